"""SSHHost against a real OpenSSH server on 127.0.0.1 (tests/plugins/sshd.py).

The server runs on this machine, so every remote result can be compared with LocalHost on the
same files, and "the remote process is gone" is checked in /proc.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from forensics import hosts
from forensics.errors import (
    EXIT_DEADLINE,
    EXIT_NOT_FOUND,
    EXIT_REMOTE,
    AuthFailed,
    DeadlineExceeded,
    HostKeyError,
    HostUnreachable,
    InputNotFound,
    RemoteError,
)
from forensics.hosts import LocalHost, ReadIncomplete, SSHHost, get_host, resolve_location
from tests.conftest import procs_with
from tests.plugins.sshd import ancestors, proc_stat

from .test_hosts import (
    S06_DEADLINE,
    S06_SCRIPT,
    check_s06_spill,
    record_capped,
    s06_expected,
)


@pytest.fixture
def files(tmp_path) -> Path:
    d = tmp_path / "logs"
    d.mkdir()
    (d / "a.log").write_bytes(b"alpha\n" * 1000)
    (d / "b c.log").write_bytes(os.urandom(3 << 20))
    (d / "new\nline.log").write_text("n\n")
    (d / ".hidden.log").write_text("h")
    (d / "sub dir").mkdir()
    (d / "sub dir" / "z.log").write_text("z")
    return d


def test_run_glob_stat_read_match_localhost(ssh_host, files):
    local = LocalHost()
    assert isinstance(ssh_host, SSHHost)
    for pattern in (f"{files}/*.log", f"{files}/*/*.log", f"{files}/b c.log", f"{files}/?.log"):
        assert ssh_host.glob(pattern) == local.glob(pattern)
    for path in local.glob(f"{files}/*.log"):
        rs, ls_ = ssh_host.stat(path), local.stat(path)
        assert (rs.size, int(rs.mtime), rs.is_dir) == (ls_.size, int(ls_.mtime), False)
        assert ssh_host.read(path) == local.read(path)
        assert ssh_host.read(path, 5, 1000) == local.read(path, 5, 1000)
        assert list(ssh_host.iter_chunks(path, 7, chunk=1 << 20)) == list(
            local.iter_chunks(path, 7, chunk=1 << 20)
        )
    # S11: quotes, variables and separators arrive intact through the login shell
    script = 'printf \'%s|\' "$HOME" \'a;b\' "c\'d" "$(echo x y)"; echo; echo err >&2; exit 7'
    r, l_ = ssh_host.run(script, timeout=10), local.run(script, timeout=10)
    assert (r.rc, r.stdout, r.stderr) == (l_.rc, l_.stdout, l_.stderr) == (7, l_.stdout, b"err\n")
    assert ssh_host.run("tr a-z A-Z", timeout=10, stdin=b"abc").stdout == b"ABC"
    assert ssh_host.run("kill -9 $$", timeout=10).signal == 9


def test_remote_name_with_spaces_and_newline(ssh_host, files):
    got = ssh_host.glob(f"{files}/*line*")
    assert got == [f"{files}/new\nline.log"]
    assert ssh_host.read(got[0]) == b"n\n"
    assert ssh_host.glob(f"{files}/sub dir/*") == [f"{files}/sub dir/z.log"]


def test_missing_remote_input_is_not_found(ssh_host, files):
    with pytest.raises(InputNotFound) as ei:
        ssh_host.glob(f"{files}/*.nothing")
    assert ei.value.exit_code == EXIT_NOT_FOUND and "sshtest:" in str(ei.value)
    with pytest.raises(InputNotFound):
        ssh_host.read(f"{files}/gone.log")
    with pytest.raises(InputNotFound):
        ssh_host.stat(f"{files}/gone.log")


def test_s08_remote_file_shrinking_mid_read_keeps_bytes(ssh_host, files):
    p = files / "rot.log"
    p.write_bytes(b"r" * (3 << 20))
    got = []
    with pytest.raises(ReadIncomplete) as ei:
        for chunk in ssh_host.iter_chunks(str(p), chunk=1 << 20):
            got.append(chunk)
            os.truncate(p, 0)
    assert b"".join(got) == b"r" * (1 << 20)
    assert ei.value.bytes_read == 1 << 20


def test_s08_a_file_shrinking_under_a_chunk_leaves_no_read_ahead_thread(ssh_host, files):
    """An ingest reads 4 MB chunks (128 SFTP requests). Paramiko's read-ahead thread, made to
    keep at most MAX_SFTP_REQUESTS in flight, waited for answers that a file truncated under
    it never gives (an EOF status does not count as one): it stayed until the connection
    closed, then died with "Socket is closed" (a warning of the suite, a traceback in a CLI)."""
    p = files / "rot.log"
    p.write_bytes(b"r" * (12 << 20))
    with pytest.raises(ReadIncomplete) as ei:
        for _chunk in ssh_host.iter_chunks(str(p), chunk=4 << 20):
            os.truncate(p, 0)
    assert ei.value.bytes_read == 4 << 20

    def lingering() -> list[str]:
        return [t.name for t in threading.enumerate() if "_prefetch_thread" in t.name]

    deadline = time.monotonic() + 10  # (it ends at once; the old one never did)
    while lingering() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not lingering(), "paramiko's read-ahead thread outlived the read"


def test_write_and_makedirs_over_sftp(ssh_host, tmp_path):
    d = tmp_path / "remote dir" / "x"
    ssh_host.makedirs(str(d))
    ssh_host.write(str(d / "f.json"), b'{"a": 1}', mode=0o640)
    assert (d / "f.json").read_bytes() == b'{"a": 1}'
    assert (d / "f.json").stat().st_mode & 0o777 == 0o640
    assert ssh_host.exists(str(d / "f.json")) and ssh_host.is_dir(str(d))


def test_s05_deadline_raises_and_remote_process_is_gone(ssh_host, sleep_marker):
    marker = sleep_marker
    with pytest.raises(DeadlineExceeded) as ei:
        ssh_host.run(f"sleep {marker}", timeout=1)
    assert ei.value.exit_code == EXIT_DEADLINE
    for _ in range(50):
        if not procs_with(f"sleep {marker}"):
            break
        time.sleep(0.1)
    assert procs_with(f"sleep {marker}") == []


def test_s06_huge_stdout_and_stderr_complete(ssh_host):
    script = "head -c 10485760 /dev/zero & head -c 10485760 /dev/zero >&2; wait"
    res = ssh_host.run(script, timeout=S06_DEADLINE, max_output=12 << 20)
    assert res.rc == 0
    assert len(res.stdout) == len(res.stderr) == 10 << 20
    capped = ssh_host.run(script, timeout=S06_DEADLINE)
    assert len(capped.stdout) == 1 << 20 and capped.stdout_truncated


def test_s06_huge_streams_spill_whole_to_local_files(ssh_host, tmp_path, monkeypatch):
    made = record_capped(monkeypatch)
    spill = tmp_path / "spill"
    res = ssh_host.run(S06_SCRIPT, timeout=S06_DEADLINE, max_output=256 << 10, spill_dir=spill)
    names = check_s06_spill(res, spill, 256 << 10, made)
    assert sorted(os.listdir(spill)) == sorted(names)


def test_s06_no_spill_for_small_output_and_unwritable_dir_is_not_fatal(ssh_host, tmp_path):
    spill = tmp_path / "spill"
    small = ssh_host.run("echo out; echo err >&2", timeout=10, max_output=64, spill_dir=spill)
    assert (small.stdout, small.stderr, small.stdout_spill, small.stderr_spill) == (
        b"out\n",
        b"err\n",
        None,
        None,
    )
    assert small.spill_error is None and not spill.exists()
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    res = ssh_host.run(
        S06_SCRIPT, timeout=S06_DEADLINE, max_output=1 << 16, spill_dir=blocker / "spill"
    )
    exp_out, exp_err = s06_expected()
    assert res.rc == 0 and (res.stdout, res.stderr) == (
        exp_out[-(1 << 16) :],
        exp_err[-(1 << 16) :],
    )
    assert res.stdout_spill is res.stderr_spill is None
    assert "cannot spill to" in res.spill_error and "Not a directory" in res.spill_error


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


class _RemoteSleep:
    """``host.run`` of a long remote sleep in a thread, plus the sshd child that serves it.

    The remote shell writes its pid to a local file (sshd runs on this machine); the serving
    sshd child is its nearest ``sshd`` ancestor below the test's own sshd listener, so only
    processes this test started are ever signalled.
    """

    def __init__(self, host, listener: int, tmp_path: Path, timeout: float, marker: str):
        self.marker = marker  # the sleep_marker fixture's: killed at the end, also on failure
        self.pidfile = tmp_path / f"remote-{self.marker}.pid"
        self.caught: list[BaseException] = []
        self.sleeper: int | None = None
        script = f"echo $$ > {self.pidfile}; exec sleep {self.marker}"

        def call() -> None:
            try:
                host.run(script, timeout=timeout)
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                self.caught.append(exc)

        self.thread = threading.Thread(target=call, daemon=True)
        self.thread.start()
        for _ in range(200):
            if self.pidfile.exists() and self.pidfile.read_text().strip():
                break
            time.sleep(0.05)
        self.sleeper = int(self.pidfile.read_text())
        assert self.marker.encode() in _cmdline(self.sleeper)
        chain = ancestors(self.sleeper)
        assert listener in chain
        self.sshd_child = next(
            p for p in chain[: chain.index(listener)] if proc_stat(p)[0] == "sshd"
        )

    def error(self) -> BaseException:
        self.thread.join(timeout=60)  # the deadline backstop is < 15 s; the sleep 1000 s
        assert not self.thread.is_alive(), "run() did not notice the broken connection"
        assert len(self.caught) == 1, self.caught
        return self.caught[0]

    def cleanup(self) -> None:
        if self.sleeper is not None and self.marker.encode() in _cmdline(self.sleeper):
            os.kill(self.sleeper, 9)  # the orphaned remote command this test started


def _check_lost(exc: BaseException, address: str, what: str) -> None:
    assert isinstance(exc, RemoteError) and exc.exit_code == EXIT_REMOTE, repr(exc)
    msg = str(exc)
    assert msg.startswith(f"{address}: {what} during a command (its outcome is unknown")
    assert "\n" not in msg and "Traceback" not in msg


def test_s07_connection_drop_mid_command_is_a_remote_error_then_reconnects(
    ssh_host, sshd_server, tmp_path, sleep_marker
):
    old_transport = ssh_host._client.get_transport()
    job = _RemoteSleep(ssh_host, sshd_server.proc.pid, tmp_path, 300, sleep_marker)
    try:
        os.kill(job.sshd_child, 9)  # the connection drops: sshd's child dies
        exc = job.error()
    finally:
        job.cleanup()
    _check_lost(exc, sshd_server.address, "connection lost")
    # the same host object reconnects for the next command, on a new transport
    assert ssh_host.run("echo again", timeout=10).stdout == b"again\n"
    assert ssh_host._client.get_transport() is not old_transport
    assert get_host("sshtest").run("echo cached", timeout=10).ok


def test_s07_silent_link_is_caught_by_the_deadline_then_replaced(
    sshd_server, tmp_path, sleep_marker
):
    # a link that goes silent (a firewall drop): the sshd child is stopped, not killed
    _config(sshd_server, connect_timeout=1)
    host = get_host("sshtest")
    old_transport = host._client.get_transport()
    job = None
    try:
        job = _RemoteSleep(host, sshd_server.proc.pid, tmp_path, 1, sleep_marker)
        os.kill(job.sshd_child, signal.SIGSTOP)
        exc = job.error()
        _check_lost(exc, sshd_server.address, "connection stopped answering")
        assert host._client is None  # the dead connection was dropped at once
        assert host.run("echo again", timeout=10).stdout == b"again\n"
        assert host._client.get_transport() is not old_transport
    finally:
        if job is not None:
            os.kill(job.sshd_child, signal.SIGKILL)  # the child this test stopped
            job.cleanup()
        hosts.close_all()


def test_s17_spawn_returns_at_once_and_runs_detached(ssh_host, tmp_path):
    log = tmp_path / "spawn.log"
    pid = ssh_host.spawn("echo $$; sleep 2; echo done", log=str(log))
    for _ in range(100):
        if log.exists() and log.read_text():
            break
        time.sleep(0.05)
    assert int(log.read_text().split()[0]) == pid
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    assert int(stat[2]) == pid and int(stat[3]) == pid  # own group and session


def test_connections_are_reused(ssh_config):
    a = get_host("sshtest")
    b, path = resolve_location("sshtest:/data/*.log")
    c, path2 = resolve_location("ssh://sshtest/data/x.log")
    assert a is b is c and (path, path2) == ("/data/*.log", "/data/x.log")
    a.close()
    assert get_host("sshtest").run("echo ok", timeout=10).stdout == b"ok\n"


def test_the_connection_sends_and_acknowledges_at_once(ssh_host):
    """Nagle's algorithm against a delayed ACK cost the handshake 40 ms twice (the service
    request after NEWKEYS; sshd's first channel confirmation after its unanswered
    ``hostkeys-00``): the socket has TCP_NODELAY and, on Linux, asks for an immediate ACK
    after every read (docs/performance.md, "One remote host, twelfth stop")."""
    from unittest import mock

    from forensics.hosts import ssh

    sock = ssh_host._client.get_transport().sock
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    if not hasattr(socket, "TCP_QUICKACK"):
        return
    armed = []
    with mock.patch.object(
        type(sock), "setsockopt", lambda self, *opt: armed.append(opt), create=True
    ):
        assert ssh_host.run("echo ok", timeout=10).stdout == b"ok\n"
    assert (socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1) in armed
    assert isinstance(sock, ssh._QuickAckSocket)


def test_ssh_url_with_address_uses_config_keys(ssh_config):
    host, path = resolve_location(f"ssh://{ssh_config.address}/tmp/*.log")
    assert isinstance(host, SSHHost) and path == "/tmp/*.log"
    assert host.run("echo ok", timeout=10).ok


def test_jump_host_via_direct_tcpip(sshd_server, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    Path("forensics.toml").write_text(
        sshd_server.toml("bastion") + sshd_server.toml("inner", jump="bastion")
    )
    try:
        inner = get_host("inner")
        assert inner.run("echo via-jump", timeout=10).stdout == b"via-jump\n"
        assert inner._jump is get_host("bastion")  # type: ignore[attr-defined]
    finally:
        hosts.close_all()


# -- refusals ---------------------------------------------------------------------------------


def _config(sshd, **over) -> None:
    Path("forensics.toml").write_text(sshd.toml(**over))
    hosts.close_all()


def test_s04_unknown_host_key_refused_then_trusted(sshd_server, tmp_path, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    _config(sshd_server, known_hosts=str(empty))
    with pytest.raises(HostKeyError) as ei:
        get_host("sshtest")
    msg = str(ei.value)
    assert ei.value.exit_code == EXIT_REMOTE
    assert msg.startswith(f"{sshd_server.address}: unknown host key ssh-ed25519 SHA256:")
    assert "--trust-new-host" in msg
    assert not hosts.project_known_hosts().exists()
    host = get_host("sshtest", trust_new_host=True)
    assert host.run("echo trusted", timeout=10).stdout == b"trusted\n"
    recorded = hosts.project_known_hosts().read_text()
    assert recorded.split()[:3] == [
        f"[127.0.0.1]:{sshd_server.port}",
        *sshd_server.host_key_pub.split(),
    ]
    hosts.close_all()
    assert get_host("sshtest").run("echo again", timeout=10).ok  # no trust flag needed now
    hosts.close_all()


def test_s04_changed_host_key_is_a_hard_failure(sshd_server, tmp_path, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(f"[127.0.0.1]:{sshd_server.port} {sshd_server.other_host_key}\n")
    _config(sshd_server, known_hosts=str(wrong))
    for trust in (False, True):
        with pytest.raises(HostKeyError) as ei:
            get_host("sshtest", trust_new_host=trust)
        assert "HOST KEY CHANGED" in str(ei.value) and ei.value.exit_code == EXIT_REMOTE
    assert not hosts.project_known_hosts().exists()


def test_s03_wrong_key_is_an_auth_failure(sshd_server, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    _config(sshd_server, identity_file=sshd_server.other_identity)
    with pytest.raises(AuthFailed) as ei:
        get_host("sshtest")
    msg = str(ei.value)
    assert ei.value.exit_code == EXIT_REMOTE
    assert msg.startswith(f"{sshd_server.address}: authentication failed")
    assert sshd_server.other_identity in msg and "(try:" in msg


def test_s01_connection_refused(sshd_server, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _config(sshd_server, address=f"{sshd_server.user}@127.0.0.1:{port}")
    with pytest.raises(HostUnreachable) as ei:
        get_host("sshtest")
    assert ei.value.exit_code == EXIT_REMOTE
    assert str(ei.value).startswith(f"{sshd_server.user}@127.0.0.1:{port}: ")
    assert "refused" in str(ei.value).lower()


def test_s02_listener_without_banner_fails_within_deadline(sshd_server):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        _config(sshd_server, address=f"{sshd_server.user}@127.0.0.1:{port}", connect_timeout=1)
        with pytest.raises(HostUnreachable) as ei:
            get_host("sshtest")
        assert "no SSH banner" in str(ei.value) and ei.value.exit_code == EXIT_REMOTE
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()


def test_s04_trust_host_records_only_a_matching_fingerprint(sshd_server, tmp_path, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    _config(sshd_server, known_hosts=str(empty))
    shown = hosts.trust_host("sshtest")
    assert shown["recorded"] is False and shown["fingerprint"].startswith("SHA256:")
    assert not hosts.project_known_hosts().exists()
    with pytest.raises(HostKeyError) as ei:
        hosts.trust_host("sshtest", fingerprint="SHA256:" + "A" * 43)
    assert "mismatch" in str(ei.value)
    done = hosts.trust_host("sshtest", fingerprint=shown["fingerprint"])
    assert done["recorded"] is True and hosts.project_known_hosts().is_file()
    assert get_host("sshtest").run("echo ok", timeout=10).ok
    assert hosts.trust_host("sshtest")["already_known"] is True
    hosts.close_all()


def test_stream_delivers_the_output_exactly_and_fails_with_the_remote_error(ssh_host, tmp_path):
    blob = tmp_path / "blob.bin"
    blob.write_bytes(os.urandom(3 << 20) + b"tail")  # more than the read-ahead holds at once
    got = b"".join(ssh_host.stream(f"cat {blob}"))
    assert got == blob.read_bytes()
    with pytest.raises(RemoteError, match="No such file"):
        list(ssh_host.stream(f"cat {tmp_path}/missing"))
    # a reader that stops early closes the channel: the connection serves the next command
    pieces = ssh_host.stream(f"cat {blob}")
    next(pieces)
    pieces.close()
    assert ssh_host.run("echo ok", timeout=10).text.strip() == "ok"


def _spare(host, timeout: float = 15.0):
    """The channel of the shell ``host`` started ahead, once it is there (None after
    ``timeout``)."""
    import time

    deadline = time.monotonic() + timeout
    while not host.spares and time.monotonic() < deadline:
        time.sleep(0.02)
    return host._spares[0] if host._spares else None


def test_streams_run_in_the_shell_started_ahead(ssh_host, tmp_path, monkeypatch):
    import time

    from forensics.hosts import streams

    started: list[str] = []
    real = streams._exec

    def spy(transport, command, *args):
        started.append(command)
        return real(transport, command, *args)

    monkeypatch.setattr(streams, "_exec", spy)
    blob = tmp_path / "blob.bin"
    blob.write_bytes(os.urandom(3 << 20) + b"tail")
    ssh_host.expect_streams(2)
    assert _spare(ssh_host) is not None
    assert b"".join(ssh_host.stream(f"cat {blob}")) == blob.read_bytes()
    assert _spare(ssh_host) is not None  # the second one's, started when the first began
    with pytest.raises(RemoteError, match="No such file"):
        list(ssh_host.stream(f"cat {tmp_path}/missing"))
    assert started == [streams.SPARE_SHELL] * 2  # neither stream waited for a session of its own
    assert ssh_host.spares == 0  # no more announced: none waits
    # a shell started ahead that ended meanwhile: the stream opens its own
    ssh_host.expect_streams(1)
    _spare(ssh_host).close()
    assert b"".join(ssh_host.stream(f"cat {blob}")) == blob.read_bytes()
    assert started[-1].startswith("sh -c ")
    # as many wait as are read at once, never more than are announced
    ssh_host.expect_streams(5, at_once=2)
    _spare(ssh_host)
    deadline = time.monotonic() + 15
    while ssh_host.spares < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    waiting = list(ssh_host._spares)
    assert len(waiting) == 2
    ssh_host.expect_streams(1)  # one more: the other shell ends
    assert ssh_host.spares == 1 and waiting[1].closed
    # closing the connection ends the shells still waiting
    ssh_host.close()
    assert waiting[0].closed


def test_s08_a_shrunk_read_returns_after_its_read_ahead_requests_are_sent(
    ssh_host, files, monkeypatch
):
    """After an EOF (the file shrank) the read waits for paramiko's read-ahead thread to have
    sent its requests: returned while it still sent them, a connection closed next ended it
    with "Socket is closed" (a thread's traceback on stderr; a warning of the suite under
    load). Each request is slowed here so that the thread is still sending at the EOF."""
    import paramiko

    slow = paramiko.SFTPClient._async_request

    def slowed(self, fileobj, t, *args):  # noqa: ANN001, ANN202
        if fileobj is not None:
            time.sleep(0.02)
        return slow(self, fileobj, t, *args)

    monkeypatch.setattr(paramiko.SFTPClient, "_async_request", slowed)
    p = files / "rot2.log"
    p.write_bytes(b"r" * (12 << 20))
    with pytest.raises(ReadIncomplete):
        for _chunk in ssh_host.iter_chunks(str(p), chunk=4 << 20):
            os.truncate(p, 0)
    alive = [t.name for t in threading.enumerate() if "_prefetch_thread" in t.name]
    assert alive == [], "the read returned while its read-ahead thread still sent requests"
