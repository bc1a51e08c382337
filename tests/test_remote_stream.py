"""Remote logs streamed over a real sshd (forensics.logsource: one stream per file, read ahead,
compressed on the wire): the bytes are the file's whatever the wire and the offset; what the
stream does not deliver comes over SFTP; several hosts in one ingest give what local ingest gives;
ingest reads through the stream, and its content hash is the file's whatever the transport.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest
import xxhash
from click.testing import CliRunner

from forensics import logsource, logstream
from forensics.cli import cli
from forensics.hosts import SSHHost
from forensics.logsource import READ_CHUNK, STREAM_MIN, Wire, open_log
from forensics.store import Store
from tests.conftest import FIXTURES


@pytest.fixture(scope="module")
def big_log(tmp_path_factory) -> Path:
    from scripts.bench_ingest import generate

    path = tmp_path_factory.mktemp("stream") / "busy.log"
    generate(path, 9)  # > two READ_CHUNKs
    return path


def _wires() -> list[str]:
    return [w.name for w in logsource.WIRE if shutil.which(w.command.split()[0])]


@pytest.mark.skipif(not shutil.which("zstd"), reason="no zstd here")
def test_the_zstd_wire_sends_frames_without_a_checksum(big_log):
    """The host hashes nothing for the wire, and nothing is checked here (SSH's MAC guards
    the bytes: docs/performance.md, "The content hash and the wire, eleventh stop"); the
    frames decode to the log."""
    import io
    import subprocess

    import zstandard

    script = logstream.wire_script(str(big_log), 0)
    out = subprocess.run(["sh", "-c", script], capture_output=True, check=True).stdout
    name, _, frames = out.partition(b"\n")
    assert name == b"zstd"
    assert not zstandard.get_frame_parameters(frames).has_checksum
    assert logstream._zstd_reader(io.BytesIO(frames)).read() == big_log.read_bytes()


@pytest.mark.parametrize("wire", _wires())
def test_streamed_chunks_are_the_file_bytes_from_any_offset(ssh_host, big_log, monkeypatch, wire):
    monkeypatch.setattr(logsource, "WIRE", tuple(w for w in logsource.WIRE if w.name == wire))
    data = big_log.read_bytes()
    src = open_log(ssh_host, str(big_log))
    chunks = list(src.chunks())
    assert b"".join(chunks) == data
    assert max(map(len, chunks)) <= READ_CHUNK
    assert b"".join(src.chunks(12_345)) == data[12_345:]
    # a stream left half-read is closed; the connection still serves
    it = src.chunks()
    next(it)
    it.close()
    assert ssh_host.run("echo ok", timeout=10).text.strip() == "ok"


@pytest.mark.parametrize("wire", _wires())
def test_a_log_that_grows_while_streamed_gives_the_bytes_it_had_when_opened(
    ssh_host, big_log, tmp_path, monkeypatch, wire
):
    # the host sends the file to its end (no `head -c` on the host): the reader stops at the
    # size stat gave when the log was opened, from the start and from an offset
    monkeypatch.setattr(logsource, "WIRE", tuple(w for w in logsource.WIRE if w.name == wire))
    _no_lead(monkeypatch)  # the bytes come through the stream
    log = tmp_path / "growing.log"
    shutil.copy(big_log, log)
    data = log.read_bytes()
    src = open_log(ssh_host, str(log))
    with log.open("ab") as f:
        f.write(b"[2026-02-25 11:00:00] a line written after the stat\n" * 100_000)
    chunks = list(src.chunks())
    assert b"".join(chunks) == data and max(map(len, chunks)) <= READ_CHUNK
    assert b"".join(src.chunks(READ_CHUNK + 7)) == data[READ_CHUNK + 7 :]


def _wire_readers(monkeypatch, wire: str) -> set[str]:
    """Only ``wire`` offered, no SFTP lead; -> the names of the threads that read the wire's
    decompressed bytes (filled as the stream is read)."""
    monkeypatch.setattr(logsource, "WIRE", tuple(w for w in logsource.WIRE if w.name == wire))
    _no_lead(monkeypatch)
    readers: set[str] = set()
    real = logstream._skip

    def skip(log, n, most):
        readers.add(threading.current_thread().name)
        return real(log, n, most)

    monkeypatch.setattr(logstream, "_skip", skip)
    return readers


@pytest.mark.parametrize("wire", _wires())
def test_the_wire_is_decompressed_in_a_thread_of_its_own_that_ends_with_the_stream(
    ssh_host, big_log, monkeypatch, wire
):
    # the reading thread (ingest's split stage) gets decompressed chunks: the wire's reader
    # is read in forensics-decode, ahead of it; a stream closed half-read ends that thread
    readers = _wire_readers(monkeypatch, wire)
    src = open_log(ssh_host, str(big_log))
    assert b"".join(src.chunks()) == big_log.read_bytes()
    assert readers == {"forensics-decode"}
    it = src.chunks()
    next(it)
    it.close()
    assert not any(t.name == "forensics-decode" for t in threading.enumerate())
    assert ssh_host.run("echo ok", timeout=10).text.strip() == "ok"


@pytest.mark.parametrize("wire", _wires())
def test_a_workers_feed_decompresses_the_wire_in_its_own_thread(
    ssh_host, big_log, monkeypatch, wire
):
    # a feeder thread of a parallel ingest only sends the chunks to its worker: no chunk
    # waits decoded ahead in the main process (8 streams at once: its peak RSS, issue 15)
    readers = _wire_readers(monkeypatch, wire)
    src = open_log(ssh_host, str(big_log))
    src.decode_ahead = False
    data = big_log.read_bytes()
    chunks = list(src.chunks())
    assert b"".join(chunks) == data and max(map(len, chunks)) <= READ_CHUNK
    assert b"".join(src.chunks(READ_CHUNK + 7)) == data[READ_CHUNK + 7 :]
    assert readers == {threading.current_thread().name}
    it = src.chunks()
    next(it)
    it.close()
    assert ssh_host.run("echo ok", timeout=10).text.strip() == "ok"


def test_a_parallel_ingest_feeds_its_workers_without_decoding_ahead(monkeypatch, tmp_path):
    """The pool's feeder thread reads its log with ``decode_ahead`` off."""

    from forensics.ingest import ingest, pool

    seen: list[bool] = []
    real = logsource.LogSource.chunks

    def chunks(self, *a, **kw):
        if threading.current_thread().name.startswith("forensics-ingest-feed"):
            seen.append(self.decode_ahead)
        return real(self, *a, **kw)

    monkeypatch.setattr(logsource.LogSource, "chunks", chunks)
    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 0)
    logs = [tmp_path / f"{i}.log" for i in range(2)]
    for p in logs:
        shutil.copy(FIXTURES / "sglang_eagle3_cg_16dt.log", p)
        with p.open("a") as f:
            f.write(f"[2026-02-25 11:00:0{len(seen)}] distinct {p.name}\n")
    ingest(Store.open(tmp_path / "st"), [str(p) for p in logs], jobs=2)
    assert seen == [False, False]


def test_what_the_stream_misses_is_read_over_sftp(ssh_host, big_log, monkeypatch):
    # a "wire" that stops after 100 kB, as a dropped stream would
    monkeypatch.setattr(logsource, "WIRE", (Wire("cat", "head -c 100000", None),))
    src = open_log(ssh_host, str(big_log))
    assert b"".join(src.chunks()) == big_log.read_bytes()
    # a wire the host does not have falls back to the next
    monkeypatch.setattr(
        logsource, "WIRE", (Wire("gzip", "no-such-zipper -c", None), Wire("cat", "cat", None))
    )
    assert b"".join(open_log(ssh_host, str(big_log)).chunks(5)) == big_log.read_bytes()[5:]


def _ingest(args: list[str]) -> dict:
    r = CliRunner().invoke(cli, ["ingest", *args, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _runs() -> dict[str, dict]:
    r = CliRunner().invoke(cli, ["runs", "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return {x["name"]: x for x in json.loads(r.output)}


def test_several_hosts_in_one_ingest_equal_local(sshd_server, ssh_config, tmp_path, monkeypatch):
    names = ["sglang_eagle3_cg_5dt.log", "sglang_baseline.log", "sglang_eagle3_nocg_16dt.log"]
    d = tmp_path / "logs"
    d.mkdir()
    for n in names:
        shutil.copy(FIXTURES / n, d / n)
    Path("forensics.toml").write_text("".join(sshd_server.toml(f"h{i}") for i in range(3)))
    remote = _ingest([f"h{i}:{d / n}" for i, n in enumerate(names)])
    assert remote["files_by_status"] == {"new": 3}
    got = _runs()
    monkeypatch.setenv("FORENSICS_HOME", str(tmp_path / "local-store"))
    local = _ingest([str(d / n) for n in names])
    want = _runs()
    for k in ("lines_total", "decode_lines", "prefill_lines", "bytes_parsed", "lines_by_kind"):
        assert remote[k] == local[k], k
    assert set(got) == set(want)
    where = ("host", "source_id", "path", "run_id", "experiment")  # name the host, not the data
    for name, run in want.items():
        assert {k: v for k, v in got[name].items() if k not in where} == {
            k: v for k, v in run.items() if k not in where
        }
        assert got[name]["host"] != "local"


@pytest.mark.parametrize("wire", [w for w in _wires() if w != "cat"])
def test_a_nul_padded_tail_comes_in_bounded_chunks(ssh_host, tmp_path, monkeypatch, wire):
    # P10: a log whose tail is NUL padding compresses > 1000x on the wire
    monkeypatch.setattr(logsource, "WIRE", tuple(w for w in logsource.WIRE if w.name == wire))
    f = tmp_path / "padded.log"
    f.write_bytes(b"[2026-02-25 11:00:00] The server is fired up and ready to roll!\n" * 200)
    with f.open("r+b") as fh:
        fh.truncate(24 << 20)
    sizes = [len(c) for c in open_log(ssh_host, str(f)).chunks()]
    assert sum(sizes) == 24 << 20
    assert max(sizes) <= READ_CHUNK


def _no_lead(monkeypatch) -> None:
    """No bytes over SFTP while a stream's shell starts (logstream._lead): the stream is
    waited for."""
    monkeypatch.setattr(logstream, "_lead", lambda *args: iter(()))


def _sftp_bytes(monkeypatch, lead: bool = False) -> list[int]:
    """Bytes read by SSHHost's SFTP reads from now on (a spy: the reads still happen).
    Unless ``lead``, a stream's first bytes do not come over SFTP while its shell starts
    (logstream._lead waits for the stream): what SFTP reads is then deterministic."""
    if not lead:
        _no_lead(monkeypatch)
    seen: list[int] = []
    real = SSHHost.iter_chunks

    def counted(self, *args, **kwargs):
        for chunk in real(self, *args, **kwargs):
            seen.append(len(chunk))
            yield chunk

    monkeypatch.setattr(SSHHost, "iter_chunks", counted)
    return seen


def _digest(data: bytes) -> str:
    """The content hash ingest stores (forensics.ingest.hashing.CURRENT), computed apart."""
    return "xxh3_128:" + xxhash.xxh3_128(data).hexdigest()


def _stored(path: Path) -> dict:
    """The manifest record of the one source ingested from ``path``."""
    (rec,) = [r for r in Store.open(None).sources().values() if r["path"] == str(path)]
    return rec


def _rows() -> dict:
    store = Store.open(None)
    return {t: len(store.table(t)) for t in ("runs", "decode", "prefill", "events", "lines")}


def test_ingest_streams_a_remote_log_and_a_same_size_same_mtime_rewrite_is_reparsed(
    ssh_config, big_log, tmp_path, monkeypatch
):
    log = tmp_path / "busy.log"
    shutil.copy(big_log, log)
    sftp = _sftp_bytes(monkeypatch)
    first = _ingest([f"sshtest:{log}"])
    assert first["files_by_status"] == {"new": 1}
    assert sum(sftp) <= 64 << 10  # the head only: the body came through the stream
    assert _stored(log)["content_hash"] == _digest(log.read_bytes())
    assert _ingest([f"sshtest:{log}"])["files_by_status"] == {"unchanged": 1}
    # the same size and mtime, other bytes in the middle: re-parsed, not "unchanged"
    st = log.stat()
    data = bytearray(log.read_bytes())
    at = data.index(b"gen throughput (token/s): ", len(data) // 2) + len(
        "gen throughput (token/s): "
    )
    data[at : at + 1] = b"9" if data[at : at + 1] != b"9" else b"8"
    log.write_bytes(bytes(data))
    os.utime(log, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert log.stat().st_size == st.st_size and log.stat().st_mtime_ns == st.st_mtime_ns
    again = _ingest([f"sshtest:{log}"])
    assert again["files_by_status"] == {"rewritten": 1}
    assert _stored(log)["content_hash"] == _digest(bytes(data))


def test_stream_and_sftp_give_the_same_hash_and_rows(ssh_config, big_log, monkeypatch, tmp_path):
    streamed = _ingest([f"sshtest:{big_log}"])
    rec, rows = _stored(big_log), _rows()
    monkeypatch.setenv("FORENSICS_HOME", str(tmp_path / "sftp-store"))
    monkeypatch.setattr(logsource, "STREAM_MIN", 1 << 62)  # every read over SFTP
    sftp = _sftp_bytes(monkeypatch)
    over_sftp = _ingest([f"sshtest:{big_log}"])
    assert sum(sftp) >= big_log.stat().st_size
    assert _stored(big_log)["content_hash"] == rec["content_hash"]
    assert rec["content_hash"] == _digest(big_log.read_bytes())
    assert _rows() == rows
    for k in ("lines_total", "decode_lines", "prefill_lines", "bytes_parsed", "lines_by_kind"):
        assert over_sftp[k] == streamed[k], k


def test_a_stream_cut_halfway_falls_back_to_sftp_cleanly(
    ssh_config, big_log, monkeypatch, tmp_path
):
    size = big_log.stat().st_size
    local = _ingest([str(big_log)])
    rows = _rows()
    monkeypatch.setenv("FORENSICS_HOME", str(tmp_path / "cut-store"))
    # a wire that stops halfway, as a dropped stream would: the rest comes over SFTP
    monkeypatch.setattr(logsource, "WIRE", (Wire("cat", f"head -c {size // 2}", None),))
    sftp = _sftp_bytes(monkeypatch)
    cut = _ingest([f"sshtest:{big_log}"])
    assert size // 2 <= sum(sftp) < size  # the second half, and the head
    assert cut["files_by_status"] == {"new": 1} and not cut["warnings"]
    assert _stored(big_log)["content_hash"] == _digest(big_log.read_bytes())
    assert _rows() == rows
    for k in ("lines_total", "decode_lines", "prefill_lines", "bytes_parsed", "lines_by_kind"):
        assert cut[k] == local[k], k
    assert _ingest([f"sshtest:{big_log}"])["files_by_status"] == {"unchanged": 1}


def test_small_remote_files_are_read_over_sftp(ssh_host, tmp_path, monkeypatch):
    sftp = _sftp_bytes(monkeypatch)
    f = tmp_path / "small.log"
    f.write_bytes(b"[2026-02-25 11:00:00] The server is fired up and ready to roll!\n" * 100)
    assert f.stat().st_size < STREAM_MIN
    assert b"".join(open_log(ssh_host, str(f)).chunks()) == f.read_bytes()
    assert sum(sftp) == f.stat().st_size + min(f.stat().st_size, logsource.HEAD_BYTES)


def test_the_hosts_of_one_ingest_connect_at_once_and_a_dead_one_once(
    sshd_server, tmp_path, monkeypatch
):
    import socket
    import threading
    import time

    from forensics import hosts
    from forensics.errors import EXIT_REMOTE

    log = tmp_path / "a.log"
    shutil.copy(FIXTURES / "sglang_baseline.log", log)
    # two connections to the test sshd (another known_hosts file: another connection key)
    other_known = tmp_path / "known_hosts"
    shutil.copy(sshd_server.known_hosts, other_known)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    Path("forensics.toml").write_text(
        sshd_server.toml("h0")
        + sshd_server.toml("h1", known_hosts=str(other_known))
        + sshd_server.toml("dead", address=f"{sshd_server.user}@127.0.0.1:{dead_port}")
    )
    hosts.close_all()
    lock, active, most, tried = threading.Lock(), [0], [0], []
    real = hosts.SSHHost.connect

    def spy(self):
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
            tried.append(self.cfg.port)
        time.sleep(0.3)  # long enough for the other host's connect to start meanwhile
        try:
            real(self)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(hosts.SSHHost, "connect", spy)
    both = _ingest([f"h0:{log}", f"h1:{log}"])
    assert both["files_by_status"] == {"new": 2}
    assert most[0] == 2  # the two hosts connected at the same time
    hosts.close_all()
    tried.clear()
    r = CliRunner().invoke(cli, ["ingest", f"h0:{log}", f"dead:{log}", "--json"])
    assert r.exit_code == EXIT_REMOTE, r.output
    assert "Connection refused" in r.output or "refused" in r.output.lower(), r.output
    assert tried.count(dead_port) == 1  # its error raised, not a second connect
    hosts.close_all()


# issue 15 (remote ingest speed): what an ingest of a remote log does while the host connects


def test_an_ingest_imports_the_parser_while_its_remote_host_connects(
    ssh_config, big_log, tmp_path, monkeypatch
):
    import threading
    import time

    from forensics import hosts
    from forensics.hosts import ssh
    from forensics.ingest import early

    events: list[tuple[str, str]] = []
    real_import, real_connect = early._import_parser, hosts.SSHHost.connect

    def importing():
        events.append(("import", threading.current_thread().name))
        real_import()

    def connect(self):
        time.sleep(0.3)  # a slow handshake: the import starts meanwhile, not after it
        real_connect(self)
        events.append(("connected", threading.current_thread().name))

    def paramiko_first():
        events.append(("paramiko", threading.current_thread().name))
        return real_paramiko()

    monkeypatch.setattr(early, "_import_parser", importing)
    monkeypatch.setattr(hosts.SSHHost, "connect", connect)
    # paramiko first, alone, then the parser beside the handshake (by turns with the GIL,
    # the two imports delayed the connection)
    real_paramiko = ssh.import_paramiko
    monkeypatch.setattr(ssh, "import_paramiko", paramiko_first)
    remote = _ingest([f"sshtest:{big_log}"])
    assert events[0] == ("paramiko", "MainThread")
    events = [e for e in events if e[0] != "paramiko"]
    assert events[0] == ("import", "forensics-parser-import")
    assert events[1][0] == "connected"
    assert not any(t.name == "forensics-parser-import" for t in threading.enumerate())
    events.clear()
    monkeypatch.setenv("FORENSICS_HOME", str(tmp_path / "local-home"))
    local = _ingest([str(big_log)])
    assert events == []  # a local ingest has nothing to overlap: no thread
    for key in ("lines_total", "decode_lines", "prefill_lines"):
        assert remote[key] == local[key]


def test_the_first_remote_shell_starts_as_the_host_connects(ssh_config, big_log, monkeypatch):
    from forensics.hosts import streams
    from forensics.hosts.sftp import SFTPFiles

    order: list[str] = []
    started: list[str] = []
    real_coming, real_stat, real_exec = (
        streams.Streams.stream_coming,
        SFTPFiles.stat,
        streams._exec,
    )

    def coming(self):
        order.append("shell")
        real_coming(self)

    def stat(self, path):
        order.append("stat")
        return real_stat(self, path)

    def spy_exec(transport, command, *args):
        started.append(command)
        return real_exec(transport, command, *args)

    monkeypatch.setattr(streams.Streams, "stream_coming", coming)
    monkeypatch.setattr(SFTPFiles, "stat", stat)
    monkeypatch.setattr(streams, "_exec", spy_exec)
    assert _ingest([f"sshtest:{big_log}"])["files_by_status"] == {"new": 1}
    assert order[:2] == ["shell", "stat"]  # before the path is looked up
    assert started == [streams.SPARE_SHELL]  # the stream ran in it, none other started


def test_stream_coming_starts_one_shell_that_expect_streams_keeps(ssh_host):
    from tests.test_hosts_ssh import _spare

    ssh_host.stream_coming()
    first = _spare(ssh_host)
    assert first is not None
    ssh_host.stream_coming()  # announced already: nothing more
    ssh_host.expect_streams(1)  # the count, once the files are known: the same shell
    assert ssh_host._spares == [first] and not first.closed
    assert b"".join(ssh_host.stream("echo ran")) == b"ran\n"
    assert ssh_host.spares == 0


def test_connections_ask_for_aes_gcm_and_paramiko_loads_without_invoke(ssh_host):
    import subprocess
    import sys

    from forensics.hosts.ssh import CIPHERS_FIRST

    t = ssh_host._client.get_transport()
    assert (t.local_cipher, t.remote_cipher) == (CIPHERS_FIRST[0], CIPHERS_FIRST[0])
    code = (
        "import sys; from forensics.hosts.ssh import import_paramiko; import_paramiko(); "
        "assert 'paramiko' in sys.modules and 'invoke' not in sys.modules; "
        "import importlib.util; assert importlib.util.find_spec('invoke') is None or "
        "__import__('invoke')"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_first_bytes_come_over_sftp_while_the_stream_s_shell_starts(
    ssh_config, ssh_host, big_log, monkeypatch, tmp_path
):
    # issue 15 (remote): a slow login shell on the host (rc files) delays a stream's first
    # bytes; meanwhile they are read over SFTP, and the stream's copy of them is dropped.
    # Here the stream "arrives" after three SFTP chunks, whatever the timing.
    from forensics.hosts.streams import RemoteStream

    real = RemoteStream.arrived
    asked: list[int] = []

    def arrived(self, timeout=0.0):
        asked.append(1)
        return len(asked) % 4 == 0 and real(self, 30.0)

    monkeypatch.setattr(RemoteStream, "arrived", arrived)
    sftp = _sftp_bytes(monkeypatch, lead=True)
    data = big_log.read_bytes()
    chunks = list(open_log(ssh_host, str(big_log)).chunks())
    assert b"".join(chunks) == data and max(map(len, chunks)) <= READ_CHUNK
    lead = sum(sftp) - logsource.HEAD_BYTES
    assert lead == 3 * logstream.LEAD_CHUNK  # SFTP first, then the stream
    assert b"".join(open_log(ssh_host, str(big_log)).chunks(12_345)) == data[12_345:]
    local = _ingest([str(big_log)])
    rows = _rows()
    monkeypatch.setenv("FORENSICS_HOME", str(tmp_path / "lead-store"))
    remote = _ingest([f"sshtest:{big_log}"])
    assert _stored(big_log)["content_hash"] == _digest(data)
    assert _rows() == rows
    for k in ("lines_total", "decode_lines", "prefill_lines", "bytes_parsed", "lines_by_kind"):
        assert remote[k] == local[k], k


def test_the_lead_waits_for_a_stream_only_where_its_shell_is_up(
    ssh_host, big_log, tmp_path, monkeypatch
):
    # issue 15 (remote): a shell started ahead says when it is up (streams.READY, dropped from
    # the stream); a stream made from one that is up is waited for (LEAD_WAIT, here long), one
    # whose shell is still starting or a new session gets its first bytes over SFTP at once
    import time

    slow = tmp_path / "slowcat"  # the wire's output comes 0.5 s after its shell runs it
    slow.write_text("#!/bin/sh\nsleep 0.5\nexec cat\n")
    slow.chmod(0o755)
    monkeypatch.setattr(logsource, "WIRE", (Wire("cat", str(slow), None),))
    monkeypatch.setattr(logstream, "LEAD_WAIT", 60.0)
    sftp = _sftp_bytes(monkeypatch, lead=True)
    data = big_log.read_bytes()

    ssh_host.expect_streams(1)
    deadline = time.monotonic() + 30
    while not (ssh_host._spares and ssh_host._spares[0].recv_ready()):
        assert time.monotonic() < deadline, "the shell started ahead never came up"
        time.sleep(0.01)
    src = open_log(ssh_host, str(big_log))
    sftp.clear()
    assert b"".join(src.chunks()) == data
    assert sum(sftp) == 0  # waited for the stream: nothing over SFTP

    ssh_host.expect_streams(0)  # no shell waits: the stream's session starts now
    assert b"".join(src.chunks()) == data
    assert sum(sftp) >= logstream.LEAD_CHUNK  # read over SFTP while it started
