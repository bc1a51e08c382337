"""The OpenSSH client (``ssh`` in a subprocess) as the transport of a host's streams.

A stream of ``SSHHost.stream`` runs as ``ssh … 'sh -s'`` here, its crypto and its channel
reads in another process, off this one's GIL, instead of on paramiko's transport. The host's
connection (commands, SFTP) stays paramiko's, which connects first: the host key is checked
and the login tried there, with the project's rules, before any ``ssh`` starts.

The ``ssh`` process keeps those rules (``ssh_argv``): no ssh config file is read (``-F none``:
forensics.toml alone says how to reach a host, as with paramiko), the host key is checked
strictly against the same known_hosts files (never added, never updated), public keys only
(the identity file or the default keys, and the agent), no prompt, the host's
``connect_timeout``, a keepalive. A jump host is the same chain of ``ssh -W`` (each with its
own entry's keys and known_hosts). Where ``ssh`` is absent, or a host cannot be put so (a
name or user ``ssh`` would read as an option), or ``ssh`` fails before its first byte (exit
255), the stream runs over paramiko as before (``SSHHost`` keeps the choice per host).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import shutil
import subprocess
import tempfile
from typing import Any

from forensics.hosts.base import KEEPALIVE_S

# Asked for first, as on paramiko's side: AES-GCM (one pass with AES-NI), and the key
# exchange paramiko makes (OpenSSH 9's first, sntrup761x25519, cost ~0.07 s of CPU in the
# client per connection here, as much again in sshd; curve25519 ~0.01 s)
OPENSSH_CIPHERS = "^aes128-gcm@openssh.com"
OPENSSH_KEX = "^curve25519-sha256,curve25519-sha256@libssh.org"
# FORENSICS_SSH_TRANSPORT=paramiko: every stream over paramiko (a measurement, a host whose
# OpenSSH misbehaves); anything else or unset: the OpenSSH client where it can be used
TRANSPORT_ENV = "FORENSICS_SSH_TRANSPORT"
SSH_FAILED = 255  # ssh's own exit status for a failure of its own (connect, host key, login)
# the pipe from ssh: as big as a read-ahead piece (1 MiB; 64 KiB by default, which made
# the read-ahead queue of Streams hold 1 MiB of the wire, not 16)
PIPE_SIZE = 1 << 20
STDERR_KEPT = 4096  # bytes of a stream's stderr kept for its error message


def ssh_program() -> str | None:
    """The ``ssh`` to run (None: none, or streams are set to paramiko)."""
    if os.environ.get(TRANSPORT_ENV, "").strip().lower() == "paramiko":
        return None
    return shutil.which("ssh")


def _plain(*words: str) -> bool:
    """Whether ``words`` go on ssh's command line as they are: no option look-alike, no
    whitespace or quote (a known_hosts list is split on them)."""
    return all(w and not w.startswith("-") and not any(c in w for c in " \t\n\"'") for w in words)


def ssh_argv(host: Any, program: str) -> list[str] | None:
    """The ``ssh`` command line that reaches ``host`` (an SSHHost) as paramiko does, the
    remote command to follow; None where it cannot be said so (paramiko then)."""
    cfg = host.cfg
    known = [str(p) for p in host._known_hosts_files()]
    identity = os.path.expanduser(cfg.identity_file) if cfg.identity_file else None
    if not _plain(cfg.user, cfg.host, *known, *([identity] if identity else [])):
        return None
    opts = {
        "BatchMode": "yes",  # no prompt of any kind
        "StrictHostKeyChecking": "yes",
        "UserKnownHostsFile": " ".join(known) or "/dev/null",
        "GlobalKnownHostsFile": "/dev/null",
        "CheckHostIP": "no",
        "UpdateHostKeys": "no",
        "PreferredAuthentications": "publickey",
        "PasswordAuthentication": "no",
        "KbdInteractiveAuthentication": "no",
        "GSSAPIAuthentication": "no",
        "ForwardAgent": "no",
        "ForwardX11": "no",
        "ClearAllForwardings": "yes",
        "ControlMaster": "no",
        "ControlPath": "none",
        "ConnectTimeout": f"{cfg.connect_timeout:g}",
        "ServerAliveInterval": str(KEEPALIVE_S),
        "ServerAliveCountMax": "3",
        "Ciphers": OPENSSH_CIPHERS,
        "KexAlgorithms": OPENSSH_KEX,
        "LogLevel": "ERROR",
        "Port": str(cfg.port),
        "User": cfg.user,
    }
    if identity:
        opts["IdentityFile"] = identity
    if cfg.jump:
        jump = _jump_command(host, program)
        if jump is None:
            return None
        opts["ProxyCommand"] = jump
    argv = [program, "-F", "none", "-T", "-e", "none"]
    for k, v in opts.items():
        argv += ["-o", f"{k}={v}"]
    return [*argv, "--", cfg.host]


def _jump_command(host: Any, program: str) -> str | None:
    """``ssh -W HOST:PORT`` through the jump host's own entry (its keys, known_hosts and
    jump), as paramiko's ``direct-tcpip`` channel: a ProxyCommand (run by the local shell)."""
    from forensics.hosts.lookup import get_host

    try:
        jump = get_host(host.cfg.jump, trust_new_host=host.trust_new_host)
    except Exception:  # noqa: BLE001 - paramiko's own connect reports it
        return None
    argv = ssh_argv(jump, program) if hasattr(jump, "cfg") else None
    if argv is None:
        return None
    h, port = host.cfg.host, host.cfg.port
    target = f"[{h}]:{port}" if ":" in h else f"{h}:{port}"
    return shlex.join([*argv[:-2], "-W", target, "--", argv[-1]]).replace("%", "%%")


class OpenSSHChannel:
    """An ``ssh`` process running ``command`` on the host, shaped as the part of paramiko's
    Channel that a stream uses (``forensics.hosts.streams``): ``recv`` its stdout,
    ``sendall``/``shutdown_write`` its stdin (a shell started ahead gets its script so),
    ``exit_status_ready``/``recv_exit_status``, ``recv_stderr*`` (the last STDERR_KEPT
    bytes), ``close`` (the process ended, its files closed). ``got`` counts stdout bytes."""

    def __init__(self, argv: list[str], command: str, *, stdin: bool):
        self._err = tempfile.TemporaryFile()  # never a pipe nobody drains
        self.proc = subprocess.Popen(  # noqa: S603 - argv from ssh_argv, no shell
            [*argv, command],
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._err,
            start_new_session=True,  # a Ctrl-C in the terminal is this process's to handle
        )
        with contextlib.suppress(OSError, AttributeError):  # Linux: a read takes up to 1 MiB
            fcntl.fcntl(self.proc.stdout.fileno(), fcntl.F_SETPIPE_SZ, PIPE_SIZE)  # type: ignore
        self.closed = False
        self.got = 0
        self._err_read = False

    def settimeout(self, timeout: float | None) -> None:
        """(waits are bounded by the reader: ``Streams._pieces``)"""

    def recv(self, n: int) -> bytes:
        assert self.proc.stdout is not None
        data = os.read(self.proc.stdout.fileno(), n)
        self.got += len(data)
        return data

    def sendall(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def shutdown_write(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()

    def exit_status_ready(self) -> bool:
        return self.proc.poll() is not None

    def recv_exit_status(self) -> int:
        return self.proc.wait()

    def recv_stderr_ready(self) -> bool:
        return not self._err_read

    def recv_stderr(self, n: int) -> bytes:
        self._err_read = True
        self._err.seek(0, os.SEEK_END)
        self._err.seek(max(0, self._err.tell() - STDERR_KEPT))
        return self._err.read(STDERR_KEPT)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        proc = self.proc
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for f in (proc.stdin, proc.stdout, self._err):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
