"""A parallel ingest's logs fed to their workers while the other inputs are still listed
(forensics/ingest/early.py, issue 15: a slow host holds back no other host's parse). What the
user sees is that of an ingest that lists every input first: the rows and the store of a
serial ingest; an error at any input, or an interrupt while they are listed, stores nothing
(the files fed meanwhile are dropped) and leaves no worker behind.

The hosts are entries of the test sshd, each its own connection; ``slow`` reaches it through
a port that holds its connection until an event (forensics.localsshd.SlowPort)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import forensics.ingest.pool as pool
from forensics.ingest import ingest
from forensics.store import Store
from tests.conftest import FIXTURES
from tests.test_ingest_parallel import _descendants, _gone, _same_store

HOLD_S = 30  # the most a held host waits for its event (then it connects anyway)


def _hosts(sshd_server, tmp_path: Path, slow_port: int | None, dead: bool = False) -> None:
    """forensics.toml in the current folder: ``h1``, ``h2`` and, through ``slow_port``,
    ``slow`` (``dead``: in front of a port nobody listens on)."""
    from forensics.localsshd import known_hosts_line

    toml = ""
    if slow_port is not None:
        known = tmp_path / "known_slow"
        known.write_text(known_hosts_line(slow_port, sshd_server.host_key_pub))
        address = f"{sshd_server.user}@127.0.0.1:{slow_port}"
        toml += sshd_server.toml("slow", address=address, known_hosts=str(known),
                                 connect_timeout=HOLD_S * 2)  # fmt: skip
    for name in ("h1", "h2"):  # each a connection of its own (its own known_hosts)
        known = tmp_path / f"known_{name}"
        shutil.copy(sshd_server.known_hosts, known)
        toml += sshd_server.toml(name, known_hosts=str(known))
    Path("forensics.toml").write_text(toml)


def _logs(tmp_path: Path) -> dict[str, Path]:
    logs = {}
    for name, fixture in (("slow", "sglang_baseline.log"), ("h1", "sglang_two_launches.log"),
                          ("h2", "sglang_eagle3_cg_16dt.log")):  # fmt: skip
        logs[name] = tmp_path / f"{name}.log"
        shutil.copy(FIXTURES / fixture, logs[name])
    return logs


def _dead_port() -> int:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every file of the store folder, its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _fed_spy(monkeypatch, hosts_fed: set[str]) -> tuple[threading.Event, list]:
    """Pool.submit recorded (the host of each log fed); the event is set once every host of
    ``hosts_fed`` had a log fed."""
    fed, events, submit = threading.Event(), [], pool.Pool.submit

    def spy(self, job, *a):
        submit(self, job, *a)
        events.append(("fed", job.out.host))
        if hosts_fed <= {e[1] for e in events if e[0] == "fed"}:
            fed.set()

    monkeypatch.setattr(pool.Pool, "submit", spy)
    return fed, events


def _no_thread_left() -> bool:
    names = ("forensics-open", "forensics-ingest-feed")
    return not [t for t in threading.enumerate() if t.name in names and t.is_alive()]


def test_the_fast_hosts_logs_are_parsed_before_the_slow_host_connects(
    sshd_server, tmp_path, monkeypatch
):
    """Three hosts, the first one slow: its connection is held until the two others' logs
    are fed to workers (an event; 30 s at most). They are (before, no log was fed until every
    input was listed: after the slow host connected). The files, their order (an input
    naming a log again), the warnings (an empty log fed early, a missing one) and the store
    are those of a serial ingest; each host is told of its logs before its first is fed."""
    from forensics import hosts
    from forensics.localsshd import SlowPort

    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 0)  # the fixtures go to the workers too
    monkeypatch.chdir(tmp_path)
    logs = _logs(tmp_path)
    fed, events = _fed_spy(monkeypatch, {"h1", "h2"})
    slow = SlowPort(sshd_server.port, lambda: fed.wait(HOLD_S))
    _hosts(sshd_server, tmp_path, slow.port)
    real_connect = hosts.SSHHost.connect

    def connect(self):
        real_connect(self)
        events.append(("connected", self.name))

    real_expect = hosts.SSHHost.expect_streams

    def expect(self, n, at_once=1):
        if at_once == 3:  # the ingest's count (stream_coming's guess at connect is 1 at once)
            events.append(("told", self.name, n))  # type: ignore[arg-type]
        real_expect(self, n, at_once)

    monkeypatch.setattr(hosts.SSHHost, "connect", connect)
    monkeypatch.setattr(hosts.SSHHost, "expect_streams", expect)
    (tmp_path / "empty.log").touch()
    inputs = [f"{name}:{path}" for name, path in logs.items()]
    inputs += [f"h1:{tmp_path / 'empty.log'}", f"h2:{tmp_path / 'gone.log'}", inputs[1]]
    before = _descendants(os.getpid())
    shown: dict[str, list[tuple[int, int, int, int]]] = {}

    def progress(path, i, n, done, total):
        shown.setdefault(path, []).append((i, n, done, total))

    hosts.close_all()
    try:
        par = ingest(Store.open(tmp_path / "par"), inputs, jobs=3, progress=progress)
        hosts.close_all()
        ser = ingest(Store.open(tmp_path / "ser"), inputs, jobs=1)
        hosts.close_all()  # again: each log found unchanged out of turn, said so in its turn
        again = ingest(Store.open(tmp_path / "par"), inputs, jobs=3)
    finally:
        hosts.close_all()
        slow.close()
    at = events.index(("connected", "slow"))
    assert {("fed", "h1"), ("fed", "h2")} <= set(events[:at]), events
    assert ("fed", "slow") in events[at:], events
    for name in logs:  # each host told how many of its logs are known, before its first feed
        told = [e for e in events if e[0] == "told" and e[1] == name]
        assert told and 1 <= told[0][2] <= 2, events
        assert events.index(told[0]) < events.index(("fed", name)), events
    for path in logs.values():  # a place among the logs known so far; the bytes all read
        calls = shown[str(path)]
        assert all(0 <= i < n <= 4 for i, n, _, _ in calls), calls
        assert calls[-1][2:] == (path.stat().st_size,) * 2, calls
    assert [(f.host, f.path, f.status) for f in par.files] == [
        *((name, str(path), "new") for name, path in logs.items()),
        ("h1", str(tmp_path / "empty.log"), "new"),
    ]
    assert [(f.host, f.path, f.status, f.runs) for f in par.files] == [
        (f.host, f.path, f.status, f.runs) for f in ser.files
    ]
    assert par.warnings == ser.warnings
    assert [("no such file" in w, "empty file" in w) for w in par.warnings] == [
        (True, False),
        (False, True),
    ], par.warnings
    _same_store(tmp_path / "ser", tmp_path / "par")
    assert [f.status for f in again.files] == ["unchanged"] * 4
    assert again.warnings == par.warnings[:1]  # the missing log; the empty one is unchanged
    assert _no_thread_left()
    assert _gone(_descendants(os.getpid()) - before, 30), "a worker outlived the ingest"
    assert not list((tmp_path / "par" / "staging").glob("*"))


@pytest.mark.parametrize("failing", ["unreachable", "no-such-name", "run-check"])
def test_an_error_at_a_later_input_stores_nothing_of_what_was_fed(
    sshd_server, tmp_path, monkeypatch, failing
):
    """The fast hosts' logs are fed to workers while a later input is still being looked up,
    then that input fails (a held host that then refuses, a name not configured, ``--run``
    with no results file): the same one-line error and exit code as a serial ingest, the
    store byte for byte as it was (the work fed is dropped: an abort, not the error path's
    commit), no worker nor thread left."""
    from click.testing import CliRunner

    from forensics import hosts
    from forensics.cli import cli
    from forensics.localsshd import SlowPort

    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 0)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FORENSICS_HOME", str(tmp_path / "home"))
    logs = _logs(tmp_path)
    fed, _ = _fed_spy(monkeypatch, {"h1", "h2"})
    dead = failing == "unreachable"
    slow = SlowPort(_dead_port() if dead else sshd_server.port, lambda: fed.wait(HOLD_S))
    _hosts(sshd_server, tmp_path, slow.port)
    fast = [f"h1:{logs['h1']}", f"h2:{logs['h2']}"]
    args = {
        "unreachable": [*fast, f"slow:{logs['slow']}"],  # the last input fails, late
        "no-such-name": [f"slow:{logs['slow']}", *fast, f"nosuch:{logs['slow']}"],
        "run-check": [f"slow:{logs['slow']}", *fast, "--run", "r1"],
    }[failing]
    ingest(Store.open(tmp_path / "home"), [str(FIXTURES / "sglang_fail_capture.log")])
    before, children = _snapshot(tmp_path / "home"), _descendants(os.getpid())
    said = {}
    try:
        for jobs in ("3", "1"):  # parallel first: the event is set by its feeds
            hosts.close_all()
            said[jobs] = CliRunner().invoke(cli, ["ingest", "--jobs", jobs, *args])
            assert _snapshot(tmp_path / "home") == before, f"--jobs {jobs} stored something"
    finally:
        hosts.close_all()
        slow.close()
    assert fed.is_set(), "the fast hosts' logs were not fed while the inputs were listed"
    par, ser = said["3"], said["1"]
    assert (par.exit_code, par.output) == (ser.exit_code, ser.output)
    assert par.exit_code not in (0, 1) and par.output.startswith("Error: "), par.output
    assert len(par.output.splitlines()) == 1 and "Traceback" not in par.output, par.output
    assert _gone(_descendants(os.getpid()) - children, 30), "a worker outlived the ingest"
    assert _no_thread_left()


# the CLI in a subprocess whose pool takes every log, writing the host of each log it feeds
_FEEDING = """
import sys
import forensics.entry as entry
import forensics.ingest.pool as pool
pool.POOL_MIN_BYTES = 0
submit = pool.Pool.submit
def spy(self, job, *a):
    submit(self, job, *a)
    with open(sys.argv[1], "a") as f:
        f.write(job.out.host + "\\n")
pool.Pool.submit = spy
entry.main(sys.argv[2:])
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_while_the_inputs_are_listed_stores_nothing_and_leaves_no_worker(
    sshd_server, tmp_path, monkeypatch, sig
):
    """Ctrl-C (or SIGTERM) to the process group of ``forensics ingest`` once the fast hosts'
    logs are fed and the slow host still held: exit 130, one line, no traceback, the store
    byte for byte as it was, no worker process left."""
    from forensics.localsshd import SlowPort

    monkeypatch.chdir(tmp_path)
    logs = _logs(tmp_path)
    release = threading.Event()
    slow = SlowPort(sshd_server.port, lambda: release.wait(HOLD_S * 4))
    _hosts(sshd_server, tmp_path, slow.port)
    home, fed = tmp_path / "home", tmp_path / "fed"
    ingest(Store.open(home), [str(FIXTURES / "sglang_fail_capture.log")])
    before = _snapshot(home)
    inputs = [f"{name}:{path}" for name, path in logs.items()]
    cmd = [sys.executable, "-c", _FEEDING, str(fed), "--store", str(home), "ingest", "--jobs", "3"]
    p = subprocess.Popen([*cmd, *inputs], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (fed.exists() and sorted(fed.read_text().split()) == ["h1", "h2"]):
            assert p.poll() is None and time.monotonic() < deadline, "no log fed"
            time.sleep(0.01)
        workers = _descendants(p.pid)
        os.killpg(p.pid, sig)
        out, err = p.communicate(timeout=120)
    finally:
        release.set()
        if p.poll() is None:
            p.kill()
        slow.close()
    assert p.returncode == 130, err
    said = [line for line in err.splitlines() if line.strip()]
    assert len(said) == 1 and said[0].startswith("Interrupted"), err
    assert "slow" not in fed.read_text().split()
    assert _gone(workers, 30), "a worker process outlived the ingest"
    assert _snapshot(home) == before


def test_an_interrupt_in_the_library_leaves_no_thread_and_the_lookup_does_nothing_more(
    sshd_server, tmp_path, monkeypatch
):
    """An interrupt lands in the main thread while it feeds the fast hosts' logs and the slow
    host is held: the ingest raises it, stores nothing, leaves no worker, no opening nor feed
    thread; the slow host's lookup, released, ends without starting anything on its host."""
    from forensics import hosts
    from forensics.ingest import early
    from forensics.localsshd import SlowPort

    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 0)
    monkeypatch.chdir(tmp_path)
    logs = _logs(tmp_path)
    fed, _ = _fed_spy(monkeypatch, {"h1", "h2"})
    release = threading.Event()
    slow = SlowPort(sshd_server.port, lambda: release.wait(HOLD_S))
    _hosts(sshd_server, tmp_path, slow.port)
    feed = early.EarlyFeed.feed

    def interrupted(self):
        waits = feed(self)
        if fed.is_set():  # the fast hosts' logs fed, the slow host held: a Ctrl-C now
            raise KeyboardInterrupt
        return waits

    monkeypatch.setattr(early.EarlyFeed, "feed", interrupted)
    home = tmp_path / "home"
    ingest(Store.open(home), [str(FIXTURES / "sglang_fail_capture.log")])
    before, children = _snapshot(home), _descendants(os.getpid())
    inputs = [f"{name}:{path}" for name, path in logs.items()]
    shells: list[str] = []
    monkeypatch.setattr(hosts.SSHHost, "stream_coming", lambda self: shells.append(self.name))
    hosts.close_all()
    try:
        with pytest.raises(KeyboardInterrupt):
            ingest(Store.open(home), inputs, jobs=3)
        assert _snapshot(home) == before
        assert _no_thread_left()
        assert _gone(_descendants(os.getpid()) - children, 30), "a worker outlived the ingest"
        release.set()
        lookups = [t for t in threading.enumerate() if t.name == "forensics-lookup"]
        for t in lookups:
            t.join(HOLD_S)
        assert not [t for t in lookups if t.is_alive()]
        assert "slow" not in shells, "the lookup went on after the interrupt"
    finally:
        release.set()
        hosts.close_all()
        slow.close()
