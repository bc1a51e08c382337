"""forensics' own files beside the store (issue 14, data loss, fourth round): known_hosts, a
retrained model, a sweep job's files and a launch's files on this machine are written by
``forensics.output`` (``write_home_file`` / ``replace_file``): atomic or a clean append, never
through a symlink, never over a file that is not regular, the old file kept when the write
fails (exit 7). Real files, the suite's real sshd for ``hosts trust``.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from forensics import hosts
from forensics.errors import StoreError
from forensics.hosts.local import LocalHost
from forensics.output import replace_file, write_home_file
from tests.test_output import run, tiny_fs  # noqa: F401 - the fixture


def _fill(folder: Path) -> None:
    """Fill the filesystem of ``folder`` to the last byte."""
    fd = os.open(folder / "fill-up", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


def _config(sshd, tmp_path) -> None:
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    Path("forensics.toml").write_text(sshd.toml(known_hosts=str(empty)))
    hosts.close_all()


def test_known_hosts_symlink_is_refused_and_its_target_kept(
    sshd_server, tmp_path, monkeypatch, capsys
):
    """`hosts trust --fingerprint` with $FORENSICS_HOME/known_hosts a symlink to a file
    elsewhere: exit 7, one line, the file the link points to unchanged (it was appended to)."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    _config(sshd_server, tmp_path)
    fp = hosts.trust_host("sshtest")["fingerprint"]
    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    kh = hosts.project_known_hosts()
    kh.parent.mkdir(parents=True, exist_ok=True)
    kh.symlink_to(outside)
    code, _, err = run(capsys, "hosts", "trust", "sshtest", "--fingerprint", fp)
    assert code == 7, err
    assert err.startswith("Error: ") and err.count("\n") == 1 and "symbolic link" in err, err
    assert outside.read_text() == "precious\n" and kh.is_symlink()
    hosts.close_all()


def test_known_hosts_on_a_full_disk_keeps_the_old_lines(
    sshd_server,
    tmp_path,
    monkeypatch,
    capsys,
    tiny_fs,  # noqa: F811
):
    """The append of a trusted key on a full disk: exit 7 "no space left", known_hosts cut
    back to exactly its old bytes (no half line)."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    full, _ = tiny_fs
    home = full / "home"
    home.mkdir()
    monkeypatch.setenv("FORENSICS_HOME", str(home))
    _config(sshd_server, tmp_path)
    fp = hosts.trust_host("sshtest")["fingerprint"]
    old = b"# a page of earlier keys\n" + b"#" * (4096 - 26) + b"\n"
    kh = hosts.project_known_hosts()
    kh.write_bytes(old)
    (full / "fill").unlink()
    _fill(full)
    code, _, err = run(capsys, "hosts", "trust", "sshtest", "--fingerprint", fp)
    assert code == 7 and "no space left" in err and err.startswith("Error: "), err
    assert kh.read_bytes() == old
    (full / "fill-up").unlink()
    code, out, err = run(capsys, "hosts", "trust", "sshtest", "--fingerprint", fp)
    assert code == 0, err
    added = kh.read_bytes()[len(old) :].decode()
    assert kh.read_bytes().startswith(old)
    assert added.split()[:2] == [f"[127.0.0.1]:{sshd_server.port}", "ssh-ed25519"]
    hosts.close_all()


def test_home_file_never_replaces_a_link_or_a_fifo(tmp_path):
    """write_home_file / replace_file (the model, a job's result, LocalHost.write): a symlink
    or a FIFO where the file should be is an error and stays as it was."""
    target = tmp_path / "outside.json"
    target.write_text("precious")
    link = tmp_path / "phase-model.json"
    link.symlink_to(target)
    fifo = tmp_path / "result.json"
    os.mkfifo(fifo)
    with pytest.raises(StoreError, match="symbolic link"):
        write_home_file(link, "{}", what="the retrained model")
    with pytest.raises(StoreError, match="fifo"):
        write_home_file(fifo, "{}", what="the job's result")
    with pytest.raises(OSError):
        LocalHost().write(str(link), b"#!/bin/sh\n")
    assert target.read_text() == "precious" and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "outside.json",
        "phase-model.json",
        "result.json",
    ]


def test_home_file_on_a_full_disk_keeps_the_old_file(tiny_fs):  # noqa: F811
    """A full disk: StoreError (exit 7) naming the cause; the old file whole, no temp left."""
    full, ro = tiny_fs
    old = full / "phase-model.json"
    old.write_text("old model")
    (full / "fill").unlink()
    _fill(full)
    with pytest.raises(StoreError, match="no space left") as ei:
        write_home_file(old, "x" * 20000, what="the retrained model")
    assert ei.value.exit_code == 7
    assert old.read_text() == "old model"
    assert sorted(p.name for p in full.iterdir()) == ["fill-up", "phase-model.json"]
    with pytest.raises(OSError, match="Read-only"):
        replace_file(ro / "x", b"y")
    assert list(ro.iterdir()) == []


def test_the_writers_of_home_files_use_the_one_mechanism():
    """No writer of a file outside the store's parts opens, renames or write_text()s on its
    own: the modules that did now call forensics.output (a grep, so a new one is noticed)."""
    import re

    root = Path(__file__).resolve().parent.parent / "forensics"
    own = re.compile(
        r"\.write_text\(|\.write_bytes\(|os\.replace\(|os\.rename\(|open\([^)]*['\"][wa]"
    )
    allowed = {
        "output.py",  # the mechanism
        "store",  # the store's own transaction and repair (its parts, its manifest)
        "store_repair.py",
        "localsshd.py",  # the throwaway sshd / slurm of tests and the demo, in their temp dirs
        "localslurm.py",
        "sim",  # the simulated server writes its own log, as a server does
        "sftp.py",  # a file on the remote host: the Host interface's remote side
    }
    found = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if rel.parts[0] in allowed or rel.name in allowed:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if own.search(line) and "noqa" not in line:
                found.append(f"{rel}:{i}: {line.strip()}")
    assert found == []
