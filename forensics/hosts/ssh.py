"""``SSHHost``: a host over SSH (paramiko). Connection, commands, streams, port forwards;
its files (SFTP) come from ``forensics.hosts.sftp``."""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import (
    AuthFailed,
    ConfigError,
    HostKeyError,
    HostUnreachable,
    RemoteError,
)
from forensics.hosts.base import (
    DEFAULT_OP_TIMEOUT,
    KEEPALIVE_S,
    KILL_GRACE_S,
    CmdResult,
    Host,
    _deadline,
    _signal_of,
)
from forensics.hosts.capture import _Capped, _captures, _result_streams
from forensics.hosts.config import HostConfig
from forensics.hosts.forward import PortForward
from forensics.hosts.sftp import SFTPFiles
from forensics.hosts.streams import Streams
from forensics.hosts.trust import _policy, fingerprint, project_known_hosts

if TYPE_CHECKING:
    import paramiko


def _quiet_paramiko() -> None:
    """paramiko logs tracebacks at ERROR for failures we already report in one line."""
    import logging

    log = logging.getLogger("paramiko")
    if log.level == logging.NOTSET and not os.environ.get("FORENSICS_DEBUG"):
        log.setLevel(logging.CRITICAL)


def import_paramiko() -> Any:
    """paramiko, imported without ``invoke``: paramiko.config imports it (when installed) only
    for ``Match exec`` in an OpenSSH config file, which forensics never reads through
    paramiko, and it pulls in asyncio and unittest.mock: 0.05 s of CPU, ~0.1-0.3 s of wall
    on the loaded 2 cores, on the way to every connection (issue 15, remote). Blocked for
    this import only; a later ``import invoke`` works."""
    import sys

    if "paramiko" in sys.modules or "invoke" in sys.modules:
        import paramiko

        return paramiko
    sys.modules["invoke"] = None  # type: ignore[assignment] - import invoke: ImportError
    try:
        import paramiko
    finally:
        if sys.modules.get("invoke", 0) is None:
            del sys.modules["invoke"]
    return paramiko


# Ciphers asked for first: AES-GCM is one pass (AES-NI and carry-less multiply), paramiko's
# first choice aes128-ctr + hmac-sha2-256 two. Over 100 MB of plain bytes (the ``cat`` wire,
# a compressed log travelling as it is) this process paid 0.34-0.36 s of CPU against
# 0.45-0.48 s; paramiko's own order follows, for a server without GCM.
CIPHERS_FIRST = ("aes128-gcm@openssh.com",)


def _new_transport(sock: Any, **kwargs: Any) -> Any:
    """paramiko's Transport with CIPHERS_FIRST ahead (SSHClient.connect's factory)."""
    import paramiko

    t = paramiko.Transport(sock, **kwargs)
    opts = t.get_security_options()
    opts.ciphers = CIPHERS_FIRST + tuple(c for c in opts.ciphers if c not in CIPHERS_FIRST)
    return t


_QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux only


class _QuickAckSocket(socket.socket):
    """A TCP socket that acknowledges what it receives at once (``TCP_QUICKACK``, which
    Linux clears as it goes: set again after every ``recv``)."""

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data = super().recv(bufsize, flags)
        with contextlib.suppress(OSError):
            self.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
        return data


def _without_delays(sock: socket.socket) -> socket.socket:
    """``sock`` with neither end of the SSH handshake waiting for the other's delayed ACK
    (40 ms each time on Linux). Nagle's algorithm holds a small packet while one sent before
    is unacknowledged, and the receiver delays its ACK hoping to carry it with data: paramiko
    sends NEWKEYS then the service request (held: ``TCP_NODELAY`` here), and OpenSSH's sshd,
    after the login, its debug and ``hostkeys-00`` messages, which need no answer, then the
    first channel's confirmation (held until this end's ACK: ``TCP_QUICKACK``). On the
    benchmark's loopback sshd, the connection and the SFTP session took 0.11 s, 0.02 s so
    (docs/performance.md, "One remote host, twelfth stop")."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if _QUICKACK is None:
        return sock
    timeout = sock.gettimeout()
    quick = _QuickAckSocket(fileno=sock.detach())
    quick.settimeout(timeout)
    return quick


_REMOTE_WRAPPER = (
    # $1 = deadline seconds, $2 = script. GNU/busybox timeout kills the whole process group
    # it leads; without timeout the client deadline still holds.
    'if command -v timeout >/dev/null 2>&1; then timeout -k {grace} "$1" sh -c "$2"; '
    'else sh -c "$2"; fi\nexit $?'
)


def _lost(transport: Any, chan: Any) -> bool:
    """Whether a channel that ended without an exit status did so because the link died."""
    if not chan.eof_received:
        return True  # sshd always sends EOF before closing a session it ended itself
    if transport.is_active():
        # the transport thread unlinks the channels a moment before it marks itself dead
        with contextlib.suppress(RuntimeError):
            transport.join(0.5)
    return not transport.is_active()


def _connection_lost(host: str, script: str, out: _Capped, err: _Capped, what: str) -> RemoteError:
    shown = script.strip().splitlines()[0][:80] if script.strip() else ""
    got = f"; {out.total} bytes of stdout and {err.total} of stderr came back"
    return RemoteError(
        f"{host}: {what} during a command (its outcome is unknown{got}): {shown}",
        hint="check on the host whether it ran (pid file, log) before re-running; "
        "the next command reconnects",
    )


def _tried(identity_file: str | None) -> list[str]:
    """The ways of logging in that a connect tries, for an authentication failure's message."""
    tried = [f"publickey ({identity_file})"] if identity_file else []
    if os.environ.get("SSH_AUTH_SOCK"):
        tried.append("agent")
    return tried if identity_file else [*tried, "default keys in ~/.ssh"]


def _host_key_changed(exc: Any, address: str, t: float, tried: list[str]) -> Exception:
    return HostKeyError(
        f"{address}: HOST KEY CHANGED: got {exc.key.get_name()} "
        f"{fingerprint(exc.key)}, expected {fingerprint(exc.expected_key)}",
        hint="this may be an attack; if the host was reinstalled, remove its old line "
        "from known_hosts yourself",
    )


def _ssh_refused(exc: Any, address: str, t: float, tried: list[str]) -> Exception:
    if "banner" in str(exc).lower():
        return HostUnreachable(
            f"{address}: no SSH banner within {t:g} s (something listens there, "
            "but it is not answering as an SSH server)",
            hint="check the port; the server may be overloaded",
        )
    return HostUnreachable(f"{address}: SSH negotiation failed: {exc}", hint="check the server")


# A failed connect -> the one-line error it is. (exception: a builtin class, or the name of a
# paramiko one; how to say it). First match wins, so subclasses come before their bases.
ConnectError = Callable[[Any, str, float, list[str]], Exception]
CONNECT_ERRORS: tuple[tuple[type | str, ConnectError], ...] = (
    ("BadHostKeyException", _host_key_changed),
    (
        "PasswordRequiredException",
        lambda exc, address, t, tried: AuthFailed(
            f"{address}: the private key is encrypted and no agent holds it",
            hint="ssh-add the key to an agent (no password prompts here)",
        ),
    ),
    (
        "BadAuthenticationType",
        lambda exc, address, t, tried: AuthFailed(
            f"{address}: authentication failed; the server allows only "
            f"{', '.join(exc.allowed_types)} (tried: {', '.join(tried) or 'none'})",
            hint="set identity_file for this host or load a key into ssh-agent",
        ),
    ),
    (
        "AuthenticationException",
        lambda exc, address, t, tried: AuthFailed(
            f"{address}: authentication failed (tried: {', '.join(tried) or 'none'})",
            hint="check the user and that the key is in the server's authorized_keys",
        ),
    ),
    (
        TimeoutError,
        lambda exc, address, t, tried: HostUnreachable(
            f"{address}: connection timed out after {t:g} s",
            hint="check the address, VPN or firewall",
        ),
    ),
    (
        socket.gaierror,
        lambda exc, address, t, tried: HostUnreachable(
            f"{address}: cannot resolve host: {exc.strerror}", hint="check the host name"
        ),
    ),
    ("SSHException", _ssh_refused),
    (
        EOFError,  # the server closed the connection during the negotiation (after its banner)
        lambda exc, address, t, tried: HostUnreachable(
            f"{address}: the server closed the connection during the SSH negotiation",
            hint="check that sshd (not another service) listens on that port, and its logs",
        ),
    ),
    (
        OSError,
        lambda exc, address, t, tried: HostUnreachable(
            f"{address}: {(exc.strerror or str(exc)).lower()}",
            hint="check that sshd runs there and the port is right",
        ),
    ),
)


def _connect_error(
    exc: BaseException, address: str, t: float, tried: list[str]
) -> Exception | None:
    """The CONNECT_ERRORS row's error for ``exc`` (None: not a connect failure we know)."""
    import paramiko

    for kind, say in CONNECT_ERRORS:
        cls = getattr(paramiko, kind) if isinstance(kind, str) else kind
        if isinstance(exc, cls):
            return say(exc, address, t, tried)
    return None


class SSHHost(SFTPFiles, Streams, Host):
    """A host over SSH (paramiko): one transport, one SFTP session, reused; streams
    (forensics.hosts.streams)."""

    def __init__(self, cfg: HostConfig, *, trust_new_host: bool = False):
        self.cfg = cfg
        self.name = cfg.name
        self.address = cfg.address
        self.trust_new_host = trust_new_host
        self.op_timeout = DEFAULT_OP_TIMEOUT
        self._client: paramiko.SSHClient | None = None
        self._jump: Host | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._lock = threading.RLock()
        self._sftp_lock = threading.RLock()
        self._spares: list[Any] = []  # shells started ahead of streams (Streams)

    # -- connection -----------------------------------------------------------------------

    def connect(self) -> None:
        paramiko = import_paramiko()
        cfg = self.cfg
        _quiet_paramiko()
        client = paramiko.SSHClient()
        for path in self._known_hosts_files():
            try:
                client.load_system_host_keys(str(path))
            except (OSError, paramiko.SSHException) as exc:
                raise ConfigError(
                    f"{path}: unreadable known_hosts: {exc}", hint="fix or remove the file"
                ) from None
        client.set_missing_host_key_policy(_policy(self.address, self.trust_new_host, cfg.port))
        sock = self._jump_channel() if cfg.jump else self._socket()
        identity = os.path.expanduser(cfg.identity_file) if cfg.identity_file else None
        if identity and not os.path.isfile(identity):
            raise ConfigError(
                f"{cfg.source or self.address}: identity_file {cfg.identity_file}: no such file",
                hint="point identity_file at a private key",
            )
        t = cfg.connect_timeout
        try:
            client.connect(
                cfg.host,
                port=cfg.port,
                username=cfg.user,
                key_filename=identity,
                look_for_keys=identity is None,
                allow_agent=True,
                timeout=2 * t + 1,  # with sock given: the negotiation deadline, > banner
                banner_timeout=t,
                auth_timeout=t,
                channel_timeout=t,
                sock=sock,
                passphrase=None,
                password=None,
                transport_factory=_new_transport,
            )
        except Exception as exc:
            client.close()
            if isinstance(exc, HostKeyError):  # raised by our policy: already one line
                raise
            error = _connect_error(exc, self.address, t, _tried(cfg.identity_file))
            if error is None:
                raise
            raise error from None
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(KEEPALIVE_S)
        self._client = client

    def _socket(self) -> socket.socket:
        """The TCP connection, opened here so that S01 errors carry the errno text."""
        t = self.cfg.connect_timeout
        try:
            return _without_delays(
                socket.create_connection((self.cfg.host, self.cfg.port), timeout=t)
            )
        except OSError as exc:
            raise _connect_error(exc, self.address, t, []) from None

    def _known_hosts_files(self) -> list[Path]:
        files = []
        if self.cfg.known_hosts:
            p = Path(os.path.expanduser(self.cfg.known_hosts))
            if not p.is_file():
                raise ConfigError(
                    f"{self.cfg.source or self.address}: known_hosts {self.cfg.known_hosts}: "
                    "no such file",
                    hint="create it (ssh-keyscan, checked) or use --trust-new-host",
                )
            files.append(p)
        else:
            p = Path(os.path.expanduser("~/.ssh/known_hosts"))
            if p.is_file():
                files.append(p)
        from forensics.home import default_home

        # keys accepted under the default home stay trusted under --store DIR
        for p in dict.fromkeys([project_known_hosts(), default_home() / "known_hosts"]):
            if p.is_file():
                files.append(p)
        return files

    def _jump_channel(self):  # noqa: ANN202 - paramiko.Channel
        from forensics.hosts.lookup import get_host  # lookup builds SSHHosts

        jump = get_host(self.cfg.jump, trust_new_host=self.trust_new_host)
        if not isinstance(jump, SSHHost) or jump._client is None:
            raise ConfigError(
                f"{self.cfg.source}: hosts.{self.cfg.name}.jump = {self.cfg.jump!r} is not an "
                "SSH host",
                hint="name another [hosts.X] entry",
            )
        self._jump = jump
        transport = jump._client.get_transport()
        try:
            return transport.open_channel(
                "direct-tcpip",
                (self.cfg.host, self.cfg.port),
                ("127.0.0.1", 0),
                timeout=self.cfg.connect_timeout,
            )
        except Exception as exc:  # paramiko raises ChannelException / SSHException
            raise HostUnreachable(
                f"{self.address}: jump host {jump.name} could not reach it: {exc}",
                hint="check the address as seen from the jump host",
            ) from None

    def alive(self) -> bool:
        if self._client is None:
            return False
        t = self._client.get_transport()
        return bool(t and t.is_active())

    def _transport(self):  # noqa: ANN202
        if not self.alive():
            self.connect()
        assert self._client is not None
        return self._client.get_transport()

    def close(self) -> None:
        with self._lock:
            self._drop_spare()
            self._drop_sftp()
            if self._client is not None:
                self._client.close()
                self._client = None

    # -- commands -------------------------------------------------------------------------

    def run(
        self,
        script: str,
        *,
        timeout: float,
        stdin: bytes | None = None,
        max_output: int = 1 << 20,
        allow_timeout: bool = False,
        spill_dir: str | os.PathLike | None = None,
        spill_name: str | None = None,
    ) -> CmdResult:
        import paramiko

        wrapper = _REMOTE_WRAPPER.format(grace=KILL_GRACE_S)
        command = shlex.join(["sh", "-c", wrapper, "forensics", f"{timeout:g}", script])
        start = time.monotonic()
        # the remote `timeout` fires first; the client deadline is the backstop (S07: a link
        # that dies silently is noticed here at the latest)
        client_deadline = start + timeout + KILL_GRACE_S + 5
        transport = self._transport()
        try:
            chan = transport.open_session(timeout=self.cfg.connect_timeout)
            chan.exec_command(command)
            if stdin:
                chan.settimeout(max(1.0, timeout))
                chan.sendall(stdin)
            chan.shutdown_write()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            if not isinstance(exc, paramiko.ChannelException):  # not a refusal: a dead link
                self._discard(transport)
            raise RemoteError(
                f"{self.address}: could not start a command: {exc}",
                hint="the connection may have dropped; re-run",
            ) from None
        out, err = _captures(max_output, spill_dir, spill_name or script)
        timed_out = False
        try:
            rc, timed_out = self._pump(chan, out, err, client_deadline)
            if rc is None and not timed_out and _lost(transport, chan):
                raise _connection_lost(self.address, script, out, err, "connection lost")
            if timed_out and not self._answers(transport):
                # not even the remote `timeout` answered: the link died silently (S07)
                self._discard(transport)
                raise _connection_lost(
                    self.address, script, out, err, "connection stopped answering"
                )
        except (OSError, EOFError, paramiko.SSHException):
            raise _connection_lost(self.address, script, out, err, "connection lost") from None
        finally:
            chan.close()
            out.close()
            err.close()
        elapsed = time.monotonic() - start
        if rc == 124 and elapsed >= timeout * 0.9:
            timed_out = True
        res = CmdResult(
            rc=rc,
            timed_out=timed_out,
            signal=_signal_of(rc),
            elapsed_s=elapsed,
            **_result_streams(out, err),
        )
        if timed_out and not allow_timeout:
            raise _deadline(self.address, script, timeout, res)
        return res

    def _answers(self, transport: Any) -> bool:
        """Whether the server still opens a channel on ``transport`` (a liveness probe)."""
        try:
            transport.open_session(timeout=self.cfg.connect_timeout).close()
        except Exception:  # noqa: BLE001 - any failure means no answer
            return False
        return True

    def _discard(self, transport: Any) -> None:
        """Drop a dead connection so that the next call opens a new one (S07)."""
        with self._lock:
            if self._client is None or self._client.get_transport() is not transport:
                return  # already replaced
            self._drop_spare()
            self._drop_sftp()
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None

    @staticmethod
    def _pump(chan: Any, out: _Capped, err: _Capped, deadline: float) -> tuple[int | None, bool]:
        """Drain both streams of ``chan`` until it ends: (exit status or None, timed out)."""
        chan.setblocking(False)
        fd = chan.fileno()
        while True:
            drained = False
            while chan.recv_ready():
                out.add(chan.recv(1 << 16))
                drained = True
            while chan.recv_stderr_ready():
                err.add(chan.recv_stderr(1 << 16))
                drained = True
            if chan.exit_status_ready() and not chan.recv_ready():
                if not chan.recv_stderr_ready() and (chan.eof_received or chan.closed):
                    break
            if chan.closed and not drained:
                break
            now = time.monotonic()
            if now > deadline:
                return None, True
            if not drained:
                # short waits: the exit status arrives without waking the data pipe
                select.select([fd], [], [], min(0.01, deadline - now))
        rc = chan.recv_exit_status()
        return (None if rc == -1 else rc), False  # -1: the server sent no exit status

    # -- files (SFTP) ---------------------------------------------------------------------

    def forward(self, remote_port: int, remote_host: str = "127.0.0.1") -> PortForward:
        """A local TCP port that reaches ``remote_host:remote_port`` as seen from this host
        (``ssh -L``): for servers that listen on the host's loopback only, as SGLang does by
        default. Use as a context manager; each connection is one ``direct-tcpip`` channel."""
        return PortForward(self, remote_host, int(remote_port))

    def makedirs(self, path: str) -> None:
        res = self.run_argv(["mkdir", "-p", "--", self._sftp_path(path)], timeout=self.op_timeout)
        if not res.ok:
            raise RemoteError(
                f"{self.name}:{path}: cannot create directory: {res.err.strip()[:200]}",
                hint="check permissions and free space",
            )
