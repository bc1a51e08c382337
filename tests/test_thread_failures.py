"""An exception no thread of a command caught (forensics.cli's ``threading.excepthook``): one
line on stderr, never Python's traceback; paramiko's SFTP read-ahead thread of a file given up
early (it fails once the connection closes) says nothing."""

from __future__ import annotations

import threading

import forensics.cli as cli


def _run_in_thread(target, name: str = "forensics-test") -> None:
    t = threading.Thread(target=target, name=name)
    t.start()
    t.join()


def _raises() -> None:
    raise ValueError("the disk said no --api-key sk-abcdef0123456789abcdef")


def test_a_thread_that_fails_is_one_line_naming_it_with_secrets_hidden(monkeypatch, capsys):
    monkeypatch.setattr(threading, "excepthook", cli._thread_failed_hook(False))
    _run_in_thread(_raises, "forensics-split")
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 1 and "forensics-split" in err and "ValueError" in err
    assert "sk-abcdef0123456789abcdef" not in err


def test_with_debug_the_traceback_is_shown(monkeypatch, capsys):
    monkeypatch.setattr(threading, "excepthook", cli._thread_failed_hook(True))
    _run_in_thread(_raises)
    assert "Traceback" in capsys.readouterr().err


# a function as paramiko's read-ahead thread is named, in a file as its module is named
PREFETCH = compile(
    "def _prefetch_thread():\n    raise OSError('Socket is closed')\n",
    "/site-packages/paramiko/sftp_file.py",
    "exec",
)


def test_paramikos_read_ahead_thread_failing_after_the_close_says_nothing(monkeypatch, capsys):
    space: dict = {}
    exec(PREFETCH, space)
    monkeypatch.setattr(threading, "excepthook", cli._thread_failed_hook(False))
    _run_in_thread(space["_prefetch_thread"])
    assert capsys.readouterr().err == ""
    _run_in_thread(_raises)  # any other failure is still said
    assert "ValueError" in capsys.readouterr().err


def test_a_command_puts_the_previous_thread_hook_back(monkeypatch):
    mine = lambda args: None  # noqa: E731
    monkeypatch.setattr(threading, "excepthook", mine)
    try:
        cli.main(["--help"])
    except SystemExit:
        pass
    assert threading.excepthook is mine
