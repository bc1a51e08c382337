"""A remote log's wire routed to its worker (forensics/ingest/wire.py), over a real sshd: the
main process forwards the stream's compressed bytes, the worker decompresses and hashes
them; the store is byte for byte the one a plain feed writes; a damaged wire and a file that
shrinks while read end as with a plain feed (fed again so, once); a log with a BOM, a
compressed log and a grown one are fed as plain bytes.

POOL_MIN_BYTES is lowered so that these small logs go to the workers."""

from __future__ import annotations

import gzip
import shutil
import stat
from multiprocessing.connection import Connection
from pathlib import Path

import pytest
import xxhash

import forensics.ingest.pool as pool
from forensics import hosts, logsource, logstream
from forensics.hosts import SSHHost
from forensics.ingest import ingest
from forensics.ingest import wire as routing
from forensics.logstream import _zstd_errors, _zstd_reader
from forensics.store import Store
from tests.test_ingest_parallel import _same_store

pytestmark = pytest.mark.skipif(not shutil.which("zstd"), reason="no zstd here")


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> list[Path]:
    """Three distinct logs of 3-5 MB (the busy mix), each over STREAM_MIN."""
    from scripts.bench_ingest import generate

    d = tmp_path_factory.mktemp("wire")
    out = []
    for i in range(3):
        generate(d / f"busy{i}.log", 3 + i, seed=i)
        out.append(d / f"busy{i}.log")
    return out


@pytest.fixture
def host(ssh_config, monkeypatch) -> str:
    """The test sshd's host entry; every log goes to a worker. (One entry: the host of
    several entries of one server is whichever connects first, in the store's source ids.)"""
    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 0)
    return "sshtest"


def _feeds(monkeypatch) -> list[tuple[str, bool]]:
    """(path, routed) of each feed a worker is given, in order (a spy)."""
    seen: list[tuple[str, bool]] = []
    real = pool._start_feed

    def start(w, job):
        seen.append((job.out.path, job.spec["routed"]))
        real(w, job)

    monkeypatch.setattr(pool, "_start_feed", start)
    return seen


def _no_lead(monkeypatch) -> None:
    """No bytes over SFTP while a stream's shell starts (logstream._lead): the stream is
    waited for (else a small log may come whole over SFTP before it starts)."""
    monkeypatch.setattr(logstream, "_lead", lambda *args: iter(()))


def _sent(monkeypatch) -> list[int]:
    """Bytes of each message the main process sends down its workers' pipes (a spy)."""
    sizes: list[int] = []
    real = Connection.send_bytes

    def send_bytes(self, buf, *a, **kw):
        sizes.append(len(buf))
        return real(self, buf, *a, **kw)

    monkeypatch.setattr(Connection, "send_bytes", send_bytes)
    return sizes


def _ingest(root: Path, inputs: list[str], route: bool, monkeypatch):
    monkeypatch.setattr(routing, "ROUTE", route)
    hosts.close_all()
    try:
        return ingest(Store.open(root), inputs, jobs=2)
    finally:
        hosts.close_all()


def test_the_main_process_forwards_the_wire_and_the_store_is_a_plain_feeds(
    host, logs, tmp_path, monkeypatch
):
    inputs = [f"{host}:{p}" for p in logs]
    plain = _ingest(tmp_path / "plain", inputs, False, monkeypatch)
    _no_lead(monkeypatch)  # what the main process sends is the wire alone
    sent = _sent(monkeypatch)
    feeds = _feeds(monkeypatch)
    routed = _ingest(tmp_path / "routed", inputs, True, monkeypatch)
    assert sorted(feeds) == sorted((str(p), True) for p in logs)  # none fed again
    size = sum(p.stat().st_size for p in logs)
    assert sum(sent) < size / 3  # the wire's bytes, not the logs'
    assert [f.status for f in routed.files] == ["new"] * 3 and not routed.warnings
    assert routed.counts == plain.counts and routed.stats == plain.stats
    _same_store(tmp_path / "plain", tmp_path / "routed")
    records = {r["path"]: r for r in Store.open(tmp_path / "routed").sources().values()}
    for p in logs:
        rec = records[str(p)]
        assert rec["size"] == p.stat().st_size
        assert rec["content_hash"] == "xxh3_128:" + xxhash.xxh3_128(p.read_bytes()).hexdigest()
    again = _ingest(tmp_path / "routed", inputs, True, monkeypatch)
    assert [f.status for f in again.files] == ["unchanged"] * 3


def _damaging_wire(tmp_path: Path, monkeypatch) -> None:
    """A zstd wire that drops 1000 bytes of its output after its first 200 kB."""
    script = tmp_path / "damaging-zstd"
    script.write_text(
        "#!/bin/sh\nzstd -q -c -1 --no-check | { head -c 200000; head -c 1000 >/dev/null; cat; }\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    wire = logsource.Wire("zstd", str(script), _zstd_reader, _zstd_errors)
    monkeypatch.setattr(logsource, "WIRE", (wire, logsource.WIRE[-1]))


def test_a_wire_damaged_mid_stream_is_fed_again_plain_and_ends_as_today(
    host, logs, tmp_path, monkeypatch
):
    _damaging_wire(tmp_path, monkeypatch)
    _no_lead(monkeypatch)
    inputs = [f"{host}:{logs[0]}", f"{host}:{logs[1]}"]  # (one log: no worker)
    plain = _ingest(tmp_path / "plain", inputs, False, monkeypatch)
    feeds = _feeds(monkeypatch)
    routed = _ingest(tmp_path / "routed", inputs, True, monkeypatch)
    assert sorted(feeds) == sorted((str(p), r) for p in logs[:2] for r in (True, False))
    assert [f.status for f in routed.files] == ["new"] * 2 and not routed.warnings
    assert routed.counts == plain.counts and routed.stats == plain.stats
    assert sum(f.bytes_parsed for f in routed.files) == sum(p.stat().st_size for p in logs[:2])
    _same_store(tmp_path / "plain", tmp_path / "routed")
    local = ingest(Store.open(tmp_path / "local"), [str(p) for p in logs[:2]], jobs=1)
    assert local.counts == routed.counts


def test_a_log_that_shrinks_while_read_ends_incomplete_as_today(host, logs, tmp_path, monkeypatch):
    log = tmp_path / "shrinking.log"
    half = logs[2].stat().st_size // 2
    real = SSHHost.stream

    def stream(self, script, **kw):  # the file loses its second half as its stream starts
        with log.open("r+b") as f:
            f.truncate(half)
        return real(self, script, **kw)

    monkeypatch.setattr(SSHHost, "stream", stream)
    feeds = _feeds(monkeypatch)
    outcomes = []
    for route in (False, True):
        shutil.copy2(logs[2], log)  # (its mtime: the source records compare)
        inputs = [f"{host}:{log}", f"{host}:{logs[0]}"]  # (one log: no worker)
        s = _ingest(tmp_path / f"store-{route}", inputs, route, monkeypatch)
        outcomes.append(([(f.status, f.reason) for f in s.files], s.warnings, s.counts))
    assert outcomes[0] == outcomes[1]
    assert outcomes[1][0] == [("new", "incomplete"), ("new", "")]
    assert len(outcomes[1][1]) == 1 and "file shrank or vanished while reading" in outcomes[1][1][0]
    assert [r for p, r in feeds if p == str(log)] == [False, True, False]
    _same_store(tmp_path / "store-False", tmp_path / "store-True")


def test_a_bom_a_compressed_log_and_a_grown_log_are_fed_plain(host, logs, tmp_path, monkeypatch):
    d = tmp_path / "logs"
    d.mkdir()
    bom, gz, grown = d / "bom.log", d / "gz.log.gz", d / "grown.log"
    bom.write_bytes(b"\xef\xbb\xbf" + logs[0].read_bytes())
    gz.write_bytes(gzip.compress(logs[1].read_bytes(), 1))
    shutil.copy(logs[2], grown)
    root = tmp_path / "store"
    feeds = _feeds(monkeypatch)
    inputs = [f"{host}:{bom}", f"{host}:{gz}", f"{host}:{grown}"]
    first = _ingest(root, inputs, True, monkeypatch)
    assert [f.status for f in first.files] == ["new"] * 3
    assert sorted(feeds) == sorted([(str(bom), False), (str(gz), False), (str(grown), True)])
    with grown.open("ab") as f:
        f.write(logs[0].read_bytes())  # more than POOL_MIN_BYTES (0) to parse: a worker's
    feeds.clear()
    other = d / "other.log"  # (one log: no worker)
    shutil.copy(logs[1], other)
    again = _ingest(root, [f"{host}:{grown}", f"{host}:{other}"], True, monkeypatch)
    assert [f.status for f in again.files] == ["grown", "new"]
    assert sorted(feeds) == [(str(grown), False), (str(other), True)]


def test_a_worker_killed_while_fed_the_wire_fails_its_file_alone(host, logs, tmp_path, monkeypatch):
    import os
    import signal

    real, killed = pool._start_feed, []

    def start(w, job):  # the first routed log's worker is killed as its feed starts
        real(w, job)
        if job.spec["routed"] and not killed:
            killed.append(job.out.path)
            os.kill(w.proc.pid, signal.SIGKILL)

    monkeypatch.setattr(pool, "_start_feed", start)
    s = _ingest(tmp_path / "st", [f"{host}:{p}" for p in logs[:2]], True, monkeypatch)
    by = {f.path: (f.status, f.reason) for f in s.files}
    assert by.pop(killed[0]) == ("failed", "worker") and list(by.values()) == [("new", "")]
    warning = [w for w in s.warnings if killed[0] in w]
    assert len(warning) == 1 and "worker process died" in warning[0], s.warnings
    again = _ingest(tmp_path / "st", [f"{host}:{p}" for p in logs[:2]], True, monkeypatch)
    assert sorted(f.status for f in again.files) == ["new", "unchanged"]


def test_ctrl_c_while_workers_are_fed_the_wire_leaves_no_worker_and_the_command_completes(
    host, tmp_path
):
    """Ctrl-C (SIGINT to the process group) of a parallel ingest of remote logs, their wires
    routed to the workers: exit 130, one line saying what was committed, no traceback, no
    worker left; the same command again gives the store of a serial ingest."""
    import os
    import signal
    import subprocess
    import sys

    from tests.test_ingest_parallel import CODE, _big_log, _gone, _running_past_a_commit

    logs = [_big_log(tmp_path / f"big{i}.log", 3, i) for i in range(6)]
    home = tmp_path / "st"
    cmd = [sys.executable, "-c", CODE, "--store", str(home), "ingest", "--jobs", "2"]
    cmd += [f"{host}:{p}" for p in logs]
    p, workers = _running_past_a_commit(cmd, home)
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert _gone(workers), "a worker process outlived the ingest"
    assert p.returncode == 130, err
    assert "Traceback" not in err
    said = [line for line in err.splitlines() if line.startswith("Interrupted:")]
    assert len(said) == 1 and "committed before Ctrl-C" in said[0], err
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    hosts.close_all()
    serial = tmp_path / "serial"
    ingest(Store.open(serial), [f"{host}:{p}" for p in logs], jobs=1)
    hosts.close_all()
    _same_store(serial, home, skip=("verdicts",))
    assert not [d for d in (home / "staging").glob("*")], "staging folders left behind"
