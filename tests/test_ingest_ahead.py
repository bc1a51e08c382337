"""A parallel ingest's logs opened ahead of their turn, a thread per host, and its workers
started (importing the parser) as soon as a log for them is known (forensics/ingest/ahead.py,
issue 15: 8 hosts should take about as long as the slowest one)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

import forensics.ingest.file as ingest_file
import forensics.ingest.inputs as inputs_module
import forensics.ingest.pool as pool
from forensics.ingest import ingest
from forensics.store import Store
from tests.conftest import FIXTURES
from tests.test_ingest_parallel import _big_log, _children, _same_store


def _workers() -> set[int]:
    """This process's ingest workers (forensics.ingest.pool._Worker): spawned, or forked by
    a pool's zygote (forensics/ingest/zygote.py)."""
    found = set()
    for pid in _children(os.getpid()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"_worker_entry" in cmdline:
            found.add(pid)
        elif b"zygote_entry" in cmdline:
            found |= _children(pid)
    return found


def _no_thread_left() -> bool:
    return not [t for t in threading.enumerate() if t.name == "forensics-open"]


def test_the_logs_of_several_hosts_are_opened_at_once(sshd_server, tmp_path, monkeypatch):
    """Two hosts' logs: both opened at the same time (one after the other before: each
    opening is a few round trips, and the Nth host's bytes came after N of them), and the
    workers started before the hosts connect (they import the parser meanwhile); small
    logs parsed here, the workers are gone at the end."""
    from forensics import hosts

    log = tmp_path / "a.log"
    shutil.copy(FIXTURES / "sglang_baseline.log", log)
    other_known = tmp_path / "known_hosts"  # another connection key: another connection
    shutil.copy(sshd_server.known_hosts, other_known)
    monkeypatch.setenv("FORENSICS_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    Path("forensics.toml").write_text(
        sshd_server.toml("h0") + sshd_server.toml("h1", known_hosts=str(other_known))
    )
    hosts.close_all()
    lock, active, most = threading.Lock(), [0], [0]
    real = ingest_file.open_log

    def spy(*a, **k):
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        time.sleep(0.5)  # long enough for the other host's opening to start meanwhile
        try:
            return real(*a, **k)
        finally:
            with lock:
                active[0] -= 1

    workers_at_connect: list[int] = []
    connect = hosts.SSHHost.connect

    def counted(self):  # the workers come while this host connects (in a thread: wait)
        deadline = time.monotonic() + 30
        while len(_workers()) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        workers_at_connect.append(len(_workers()))
        connect(self)

    monkeypatch.setattr(ingest_file, "open_log", spy)
    monkeypatch.setattr(hosts.SSHHost, "connect", counted)
    s = ingest(Store.open(tmp_path / "home"), [f"h0:{log}", f"h1:{log}"], jobs=2)
    hosts.close_all()
    assert [f.status for f in s.files] == ["new", "new"]
    assert most[0] == 2, "the two hosts' logs were opened one after the other"
    assert workers_at_connect and min(workers_at_connect) == 2, workers_at_connect
    assert _no_thread_left()
    assert not _workers()
    assert not list((tmp_path / "home" / "staging").glob("*"))


def test_a_slow_host_holds_back_no_other_hosts_lookup_nor_opening(
    sshd_server, tmp_path, monkeypatch
):
    """Three hosts, the first one slow to connect (a port in front of the sshd holds its
    connection until the two others' logs are opened, 30 s at most): their paths are looked
    up and their logs opened before it is connected (before, every lookup waited for the
    slowest connect, then went one input after the other); the files, their order and the
    store are those of a serial ingest."""
    from forensics import hosts
    from forensics.localsshd import SlowPort, known_hosts_line

    log = tmp_path / "a.log"
    shutil.copy(FIXTURES / "sglang_baseline.log", log)
    events: list[tuple[str, str]] = []
    others_opened = threading.Event()
    slow = SlowPort(sshd_server.port, lambda: others_opened.wait(30))
    slow_known = tmp_path / "known_slow"
    slow_known.write_text(known_hosts_line(slow.port, sshd_server.host_key_pub))
    toml = sshd_server.toml(
        "slow",
        address=f"{sshd_server.user}@127.0.0.1:{slow.port}",
        known_hosts=str(slow_known),
        connect_timeout=60,
    )
    for name in ("h1", "h2"):  # each a connection of its own (its own known_hosts)
        known = tmp_path / f"known_{name}"
        shutil.copy(sshd_server.known_hosts, known)
        toml += sshd_server.toml(name, known_hosts=str(known))
    monkeypatch.chdir(tmp_path)
    Path("forensics.toml").write_text(toml)
    real_connect, real_source = hosts.SSHHost.connect, ingest_file._log_source

    def connect(self):
        real_connect(self)
        events.append(("connected", self.name))

    def opening(host, path, like=None):
        got = real_source(host, path, like)
        events.append(("opened", host.name))
        if {("opened", "h1"), ("opened", "h2")} <= set(events):
            others_opened.set()
        return got

    monkeypatch.setattr(hosts.SSHHost, "connect", connect)
    monkeypatch.setattr(ingest_file, "_log_source", opening)
    inputs = [f"slow:{log}", f"h1:{log}", f"h2:{log}"]
    hosts.close_all()
    try:
        par = ingest(Store.open(tmp_path / "par"), inputs, jobs=3)
        hosts.close_all()
        ser = ingest(Store.open(tmp_path / "ser"), inputs, jobs=1)
    finally:
        hosts.close_all()
        slow.close()
    at = events.index(("connected", "slow"))
    assert ("opened", "h1") in events[:at] and ("opened", "h2") in events[:at], events
    assert [(f.host, f.status) for f in par.files] == [
        ("slow", "new"),
        ("h1", "new"),
        ("h2", "new"),
    ]
    assert [(f.host, f.path, f.status) for f in par.files] == [
        (f.host, f.path, f.status) for f in ser.files
    ]
    _same_store(tmp_path / "ser", tmp_path / "par")
    assert _no_thread_left()


def test_a_log_that_cannot_be_opened_ahead_is_skipped_in_its_turn(tmp_path):
    """An opening's error, raised in its thread, is the file's outcome in its turn, as in a
    serial ingest; the logs around it are stored as a serial ingest stores them."""
    a = _big_log(tmp_path / "a.log", 0.2, 1)
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    b = _big_log(tmp_path / "b.log", 0.2, 2)
    inputs = [str(a), str(fifo), str(b)]
    par = ingest(Store.open(tmp_path / "par"), inputs, jobs=2)
    ser = ingest(Store.open(tmp_path / "ser"), inputs, jobs=1)
    assert [(f.status, f.reason) for f in par.files] == [(f.status, f.reason) for f in ser.files]
    assert [f.status for f in par.files] == ["new", "skipped", "new"]
    assert par.warnings == ser.warnings
    _same_store(tmp_path / "ser", tmp_path / "par")
    assert _no_thread_left()


def test_workers_start_for_the_logs_opened_ahead(tmp_path, monkeypatch):
    """Four big logs, ``--jobs 4``: by the first log's submission a worker was started for
    every big log opened by then, not one per log in its turn (each imports the parser,
    ~0.3 s of CPU, before it reads a byte); an unchanged re-ingest starts none."""
    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 150_000)
    logs = [str(_big_log(tmp_path / f"l{i}.log", 0.2, i)) for i in range(4)]
    opened_when, real_take, real_submit = [], None, pool.Pool.submit
    import forensics.ingest.ahead as ahead

    real_take = ahead.OpenAhead.take

    def take(self, host, path, like=None):
        if path == logs[0]:  # every log opened before the first is taken
            deadline = time.monotonic() + 60
            while len(self.opened()) < len(logs) and time.monotonic() < deadline:
                time.sleep(0.01)
        return real_take(self, host, path, like)

    def submit(self, job, *a):
        opened_when.append(len(self.workers))
        return real_submit(self, job, *a)

    monkeypatch.setattr(ahead.OpenAhead, "take", take)
    monkeypatch.setattr(pool.Pool, "submit", submit)
    s = ingest(Store.open(tmp_path / "st"), logs, jobs=4)
    assert [f.status for f in s.files] == ["new"] * 4
    assert opened_when[0] == 4, "workers were started one by one, in each log's turn"
    opened_when.clear()
    started = []
    monkeypatch.setattr(pool.Pool, "prestart", lambda self, n: started.append(n))
    again = ingest(Store.open(tmp_path / "st"), logs, jobs=4)
    assert [f.status for f in again.files] == ["unchanged"] * 4
    assert started == [] and opened_when == []


def test_a_worker_imports_the_parser_before_its_first_file(tmp_path):
    """A worker started ahead has polars and the parser loaded while it waits for a file
    (it imported them only once its first file came)."""
    w = pool._Worker(1)
    try:
        deadline, loaded = time.monotonic() + 120, False
        while time.monotonic() < deadline and not loaded:
            maps = Path(f"/proc/{w.proc.pid}/maps").read_text()
            loaded = "polars" in maps and "_linescan" in maps
            time.sleep(0.05)
        assert loaded, "no parser loaded by a worker without a file"
    finally:
        w.conn.send(pool.STOP)
        w.proc.wait(30)
        w.conn.close()


def _local_logs(tmp_path: Path, n: int) -> list[tuple]:
    """``n`` one-line logs, as (the local host, path)."""
    from forensics.hosts import get_host

    local = get_host("local")
    files = []
    for i in range(n):
        p = tmp_path / f"{i}.log"
        p.write_text(f"line {i}\n")
        files.append((local, str(p)))
    return files


@pytest.mark.parametrize("n", [1, 3])
def test_open_ahead_keeps_within_its_window(tmp_path, n):
    """No more than ``window`` logs past the last one taken are opened (a stale stat, held
    heads), and each is given in its turn with its hasher."""
    from forensics.ingest.ahead import OpenAhead

    files = _local_logs(tmp_path, 6)
    ahead = OpenAhead(n)
    ahead.place(files, None)
    try:
        deadline = time.monotonic() + 30
        while len(ahead.opened()) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert len(ahead.opened()) == n
        for host, path in files:
            src, hasher = ahead.take(host, path)
            assert src.path == path and src.head == Path(path).read_bytes()
            assert hasher.size == len(src.head)
            assert len(ahead.opened()) <= n + 1  # the one taken, and the window past it
    finally:
        ahead.close()
    assert _no_thread_left()


def test_logs_added_input_by_input_are_opened_within_the_window_of_their_least_place(tmp_path):
    """Inputs looked up out of order (``add``): each log opened once its least place (the
    inputs not looked up yet counting none) is within the window; then placed, each is
    given in its turn."""
    from forensics.ingest.ahead import OpenAhead

    files = _local_logs(tmp_path, 4)

    def opened(n: int) -> list[str]:
        deadline = time.monotonic() + 30
        while len(ahead.opened()) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        return [src.path for src in ahead.opened()]

    ahead = OpenAhead(2)
    try:
        ahead.add(1, files[1:])  # input 0 not looked up yet: these are at least 0, 1, 2
        assert opened(2) == [files[1][1], files[2][1]]
        ahead.add(0, files[:1])  # now 0 comes first: 1 and 2 are at 1, 2, and 3 at 3
        assert opened(3) == [p for _, p in files[:3]]
        ahead.place(files, None)
        for host, path in files:
            src, _ = ahead.take(host, path)
            assert src.path == path and src.head == Path(path).read_bytes()
    finally:
        ahead.close()
    assert _no_thread_left()


def test_the_inputs_errors_are_raised_in_input_order_not_as_they_come(
    sshd_server, tmp_path, monkeypatch
):
    """Each remote input is looked up in a thread of its own: the first input's host fails
    late (held, then refused), the second's name fails at once; the error raised is the
    first input's, in one line, and nothing is stored."""
    import socket

    from click.testing import CliRunner

    from forensics import hosts
    from forensics.cli import cli
    from forensics.errors import EXIT_REMOTE
    from forensics.localsshd import SlowPort

    log = tmp_path / "a.log"
    shutil.copy(FIXTURES / "sglang_baseline.log", log)
    with socket.socket() as s:  # a port nobody listens on, behind a held port
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    failed = []
    real_look_up = inputs_module._look_up

    def look_up(text, *a):
        try:
            return real_look_up(text, *a)
        except Exception:
            failed.append(text)
            raise

    monkeypatch.setattr(inputs_module, "_look_up", look_up)
    slow = SlowPort(dead, lambda: time.sleep(0.5))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FORENSICS_HOME", str(tmp_path / "home"))
    Path("forensics.toml").write_text(
        sshd_server.toml("late", address=f"{sshd_server.user}@127.0.0.1:{slow.port}")
    )
    hosts.close_all()
    try:
        r = CliRunner().invoke(cli, ["ingest", f"late:{log}", f"nosuch:{log}", "--json"])
    finally:
        hosts.close_all()
        slow.close()
    assert failed == [f"nosuch:{log}", f"late:{log}"]  # the second failed first
    assert r.exit_code == EXIT_REMOTE, r.output
    assert r.output.startswith(f"Error: {sshd_server.user}@127.0.0.1:{slow.port}: "), r.output
    assert len(r.output.splitlines()) == 1, r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "home" / "manifest.json").exists()


def test_a_log_opened_before_the_logs_are_placed_is_taken_out_of_turn(tmp_path):
    """While the inputs are listed (forensics/ingest/early.py), a log opened is ``ready`` and
    taken out of turn, the one opened ahead; the window moves past it; the others are then
    placed and taken in turn."""
    from forensics.ingest.ahead import OpenAhead

    files = _local_logs(tmp_path, 4)

    def ready(want: list) -> list:
        deadline = time.monotonic() + 30
        while ahead.ready() != want and time.monotonic() < deadline:
            time.sleep(0.01)
        return ahead.ready()

    ahead = OpenAhead(1)
    try:
        ahead.add(1, files[1:])  # input 0 not looked up yet: the window opens files[1] only
        assert ready([files[1]]) == [files[1]]
        assert ahead.place_of(*files[2]) == (1, 3)
        src, hasher = ahead.take(*files[1])
        assert src.path == files[1][1] and hasher.size == len(src.head)
        assert ready([files[2]]) == [files[2]], "the window did not move past the log taken"
        ahead.add(0, files[:1])
        ahead.place(files, None)
        for host, path in (files[0], files[2], files[3]):
            src, _ = ahead.take(host, path)
            assert src.path == path and src.head == Path(path).read_bytes()
    finally:
        ahead.close()
    assert _no_thread_left()
