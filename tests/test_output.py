"""Output paths (issue 14, data loss: "report -o /dev/full replaced /dev/full with a file").

Every user-named output goes through ``forensics.output.write_output``: atomic for a regular
file, in place for a character device or FIFO, refused for anything else; it never renames
over a file that is not regular. The devices here are made with ``mknod`` inside tmp_path
(never the real /dev nodes); making a character device needs root.
"""

from __future__ import annotations

import os
import stat
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
    assert err.strip().startswith("Error: ") and "No space left" in err and "Traceback" not in err
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
