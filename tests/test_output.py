"""Output paths (issue 14, data loss: "report -o /dev/full replaced /dev/full with a file").

Every user-named output goes through ``forensics.output.write_output``: atomic for a regular
file, in place for a character device or FIFO, refused for anything else; it never renames
over a file that is not regular. The devices here are made with ``mknod`` inside tmp_path
(never the real /dev nodes); making a character device needs root.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading

import pytest

from forensics.cli import main
from forensics.errors import UsageError
from forensics.output import write_output
from tests.conftest import FIXTURES

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")


def _chardev(path, minor):
    """A character device node: minor 3 = like /dev/null, 7 = like /dev/full (ENOSPC)."""
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    return path


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return (exc.value.code or 0), out, err


@needs_root
def test_output_paths_report_to_a_full_device_leaves_it_a_device(tmp_path, capsys):
    """Output-path class: `report -o <like /dev/full>` is one error line (exit 2) and the
    node stays a character device (it was renamed over with an HTML file)."""
    full = _chardev(tmp_path / "full", 7)
    assert run(capsys, "ingest", str(FIXTURES / "sglang_eagle3_cg_5dt.log"))[0] == 0
    code, _, err = run(capsys, "report", "-o", str(full))
    assert code == 2, err
    assert err.strip().startswith("Error: ") and "no space left" in err and "Traceback" not in err
    assert stat.S_ISCHR(os.lstat(full).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".full")) == []


@needs_root
def test_output_paths_plot_to_a_null_device_writes_in_place(tmp_path, capsys):
    """Output-path class: `plot -o <like /dev/null>.png` succeeds and the node stays."""
    null = _chardev(tmp_path / "null.png", 3)
    assert run(capsys, "ingest", str(FIXTURES / "sglang_eagle3_cg_5dt.log"))[0] == 0
    code, _, err = run(capsys, "plot", "decode", "cg_5dt", "-o", str(null))
    assert code == 0, err
    assert stat.S_ISCHR(os.lstat(null).st_mode)


def test_output_paths_fifo_with_a_reader_gets_the_bytes(tmp_path):
    """Output-path class: a FIFO is written in place (a reader gets the data)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    # the reader may not have opened it yet: retry until it has (ENXIO means "no reader")
    for _ in range(500):
        try:
            write_output(fifo, b"<html>ok</html>")
            break
        except UsageError as exc:
            assert "no process is reading" in str(exc)
            threading.Event().wait(0.01)
    reader.join(10)
    assert got == [b"<html>ok</html>"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_output_paths_fifo_without_a_reader_is_refused_not_a_hang(tmp_path):
    """Output-path class: nobody reads the FIFO -> one error at once, the FIFO stays."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="no process is reading"):
        write_output(fifo, b"x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_output_paths_socket_is_refused(tmp_path):
    """Output-path class: a socket is neither a file nor a stream we write: refused."""
    import socket

    path = tmp_path / "s.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    try:
        with pytest.raises(UsageError, match="is a socket"):
            write_output(path, b"x")
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        s.close()


def test_output_paths_regular_file_is_replaced_atomically(tmp_path):
    """Output-path class: a regular file is replaced whole; a symlink's target is written
    (the link stays a link); no temporary file is left."""
    target = tmp_path / "r.html"
    target.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    write_output(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    write_output(target, "newer")
    assert target.read_text() == "newer"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.html", "r.html"]


# --- Fourth round (issue 14, outputs and secrets): stdout, stalls, full disks, odd names ---

FORENSICS = [sys.executable, "-m", "forensics"]


def _cli(*args, stdout=subprocess.PIPE, **kw):
    return subprocess.run(
        [*FORENSICS, *args], stdout=stdout, stderr=subprocess.PIPE, timeout=120, **kw
    )


@pytest.fixture
def one_run(capsys):
    assert run(capsys, "ingest", str(FIXTURES / "sglang_eagle3_cg_5dt.log"))[0] == 0


def test_output_paths_plot_to_stdout_pipe_is_only_the_image(one_run):
    """Output-path class: `plot -o -` / `-o /dev/stdout` into a pipe: stdout holds the PNG
    and nothing after it; the path line (and --json) go to stderr."""
    for target in ("-", "/dev/stdout"):
        p = _cli("plot", "decode", "cg_5dt", "-o", target)
        assert p.returncode == 0, p.stderr
        assert p.stdout.startswith(b"\x89PNG\r\n") and p.stdout.endswith(b"IEND\xaeB`\x82")
        assert p.stderr.decode().strip() == "decode plot written to standard output"
    p = _cli("report", "-o", "-")  # issue 14 round 5: said "-"
    assert p.returncode == 0, p.stderr
    assert p.stdout.rstrip().endswith(b"</html>")
    assert p.stderr.decode() == "report written to standard output\n"
    p = _cli("report", "-o", "-", "--json")
    assert p.returncode == 0, p.stderr
    assert p.stdout.rstrip().endswith(b"</html>")
    assert json.loads(p.stderr)["bytes"] == len(p.stdout)


def test_output_paths_stdout_appended_to_a_file_keeps_it(one_run, tmp_path):
    """Output-path class: `report -o /dev/stdout >> app.log` is written through stdout at its
    position: app.log keeps its lines (it was renamed over: the log was gone)."""
    log = tmp_path / "app.log"
    log.write_text("first line\n")
    with open(log, "ab") as out:
        p = _cli("report", "-o", "/dev/stdout", stdout=out)
    assert p.returncode == 0, p.stderr
    text = log.read_text()
    assert text.startswith("first line\n<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert p.stderr.decode().strip() == "report written to standard output"


def test_output_paths_fifo_whose_reader_stops_is_an_error_not_a_hang(tmp_path, monkeypatch):
    """Output-path class: a reader that opened the FIFO but reads nothing: the write ends
    with one error after STALL_S (made short here), the FIFO stays."""
    import forensics.output as output

    monkeypatch.setattr(output, "STALL_S", 0.2)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader that never reads
    try:
        with pytest.raises(UsageError, match="its reader took nothing"):
            write_output(fifo, b"x" * (4 << 20))
    finally:
        os.close(fd)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize(
    ("name", "cause"),
    [
        ("folder", "is a folder"),
        ("missing/x", "no such folder"),
        ("a" * 300, "name too long"),
        ("file.html/x", "is a file, not a folder"),
        ("home", "inside forensics' store folder"),
    ],
)
def test_output_paths_refused_targets_are_one_error_line(one_run, tmp_path, capsys, name, cause):
    """Output-path class: each refused --out is exit 2 and one `Error: …(try: …)` line;
    nothing is created beside it."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "file.html").write_text("keep")
    target = tmp_path / "forensics-home" / "x" if name == "home" else tmp_path / name
    before = sorted(p.name for p in tmp_path.iterdir())
    for cmd, ext in ((["report"], ".html"), (["plot", "decode", "cg_5dt"], ".png")):
        out_path = str(target) + ("" if name == "folder" else ext)
        code, out, err = run(capsys, *cmd, "-o", out_path)
        assert code == 2, err
        assert err.count("\n") == 1 and err.startswith("Error: ") and "(try: " in err, err
        assert cause in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "file.html").read_text() == "keep"


@pytest.fixture
def tiny_fs(tmp_path):
    """A 64 KiB tmpfs (root only), filled but for a few KiB, and a read-only one."""
    full, ro = tmp_path / "full", tmp_path / "ro"
    full.mkdir()
    ro.mkdir()
    mounted = []
    try:
        for d, opts in ((full, "size=64k"), (ro, "ro,size=64k")):
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(d)], check=False)
            if r.returncode != 0:
                pytest.skip("mounting a tmpfs needs root")
            mounted.append(d)
        (full / "fill").write_bytes(b"\0" * 56 * 1024)
        yield full, ro
    finally:
        for d in mounted:
            subprocess.run(["umount", str(d)], check=False)


def test_output_paths_full_disk_and_read_only_keep_the_old_file(one_run, tiny_fs, capsys):
    """Output-path class: a full disk or a read-only folder: exit 2, one line naming the
    cause, the existing file unchanged and no temporary file left."""
    full, ro = tiny_fs
    old = full / "report.html"
    old.write_text("old report")
    for target, cause in ((old, "no space left"), (ro / "r.html", "read-only file system")):
        code, _, err = run(capsys, "report", "-o", str(target))
        assert code == 2 and err.startswith("Error: ") and cause in err, err
    assert old.read_text() == "old report"
    assert sorted(p.name for p in full.iterdir()) == ["fill", "report.html"]
    assert list(ro.iterdir()) == []


def test_output_paths_stdout_on_a_full_device_is_one_error_line(one_run):
    """Output-path class: any command's stdout on a full device (`> /dev/full`): exit 2 and
    `Error: stdout: cannot write the output (no space left …)`, never an internal error."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    for args in (["runs", "--json"], ["runs", "--csv"], ["runs"], ["show", "cg_5dt"]):
        with open("/dev/full", "wb") as full:
            p = _cli(*args, stdout=full)
        err = p.stderr.decode()
        assert p.returncode == 2, (args, err)
        assert err.startswith("Error: stdout: cannot write the output (no space left") and (
            err.count("\n") == 1
        ), (args, err)


def test_output_paths_a_replaced_file_keeps_its_mode_and_dash_works_in_the_home(one_run, tmp_path):
    """Output-path class: `-o r.html` over a 0600 file leaves it 0600 (the rename made it
    0644); `-o -` is stdout whatever the current folder (inside the home it was refused)."""
    target = tmp_path / "r.html"
    target.write_text("old")
    target.chmod(0o600)
    p = _cli("report", "-o", str(target))
    assert p.returncode == 0, p.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and target.read_text() != "old"
    p = _cli("report", "-o", "-", cwd=os.environ["FORENSICS_HOME"])
    assert p.returncode == 0, p.stderr
    assert p.stdout.rstrip().endswith(b"</html>")
