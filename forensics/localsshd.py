"""A throwaway OpenSSH server on 127.0.0.1, for the demo and the test suite.

Generates host and user keys in a folder, writes an ``sshd_config`` that listens on a free
loopback port and accepts only that user key, starts ``sshd -D -e`` and stops it on exit.
Nothing outside the folder is touched except ``/run/sshd`` (sshd's privilege-separation dir).
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from forensics.errors import ForensicsError

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")


class SSHDUnavailable(ForensicsError):
    """sshd or ssh-keygen is missing, or the server would not start."""


def die_with_starter(argv: list[str]) -> list[str]:
    """``argv`` run so that it gets SIGTERM when the process that started it dies (util-linux's
    ``setpriv --pdeathsig``, which then execs it): a throwaway daemon (this sshd, the local
    Slurm's) never outlives a test worker killed before its finalizers ran (``timeout pytest``,
    a cancelled CI job). Unchanged where setpriv is missing."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--", *argv] if setpriv else argv


@dataclasses.dataclass
class LocalSSHD:
    host: str
    port: int
    user: str
    identity_file: str  # private key accepted by the server
    known_hosts: str  # holds the server's host key line for [127.0.0.1]:port
    host_key_pub: str  # the server's public host key line ("ssh-ed25519 AAAA...")
    dir: Path
    log: Path
    proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    def toml(self, name: str, **overrides: object) -> str:
        """A ``[hosts.NAME]`` table of forensics.toml for this server."""
        fields: dict[str, object] = {
            "address": self.address,
            "identity_file": self.identity_file,
            "known_hosts": self.known_hosts,
            "connect_timeout": 5,
        }
        fields.update(overrides)
        body = "\n".join(
            f"{k} = {v}" if isinstance(v, int | float) else f'{k} = "{v}"'
            for k, v in fields.items()
        )
        return f"[hosts.{name}]\n{body}\n"

    def entries(self, d: Path, n: int, through: dict[int, int] | None = None) -> str:
        """``n`` host entries ``bench0``... of this server, each with a known_hosts file of its
        own (in ``d``), so each is a connection of its own, as N real hosts are (entries that
        differ only by name share one); entry ``i`` of ``through`` reaches it through that
        port (a SlowPort in front of it)."""
        entries = []
        for i in range(n):
            known = d / f"known_hosts-{i}"
            if through and i in through:
                known.write_text(known_hosts_line(through[i], self.host_key_pub))
                address = f"{self.user}@127.0.0.1:{through[i]}"
                entries.append(self.toml(f"bench{i}", known_hosts=str(known), address=address))
            else:
                shutil.copyfile(self.known_hosts, known)
                entries.append(self.toml(f"bench{i}", known_hosts=str(known)))
        return "\n".join(entries)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> LocalSSHD:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def find_sshd() -> str:
    for cand in SSHD_CANDIDATES:
        if os.access(cand, os.X_OK):
            return cand
    found = shutil.which("sshd")
    if found:
        return found
    raise SSHDUnavailable(
        "sshd is not installed", hint="apt-get install -y openssh-server (.ci/run does this)"
    )


def keygen(path: Path, comment: str) -> None:
    if shutil.which("ssh-keygen") is None:
        raise SSHDUnavailable("ssh-keygen is missing", hint="apt-get install -y openssh-client")
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_banner(port: int, proc: subprocess.Popen, log: Path, deadline: float = 15.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SSHDUnavailable(f"sshd exited with {proc.returncode}: {log.read_text()[-500:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.settimeout(2)
                if s.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.05)
    raise SSHDUnavailable(f"sshd did not answer on 127.0.0.1:{port}: {log.read_text()[-500:]}")


SSHD_CONFIG = """ListenAddress 127.0.0.1
Port {port}
HostKey {host_key}
AuthorizedKeysFile {auth_keys}
PidFile {pid}
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
AllowUsers {user}
AllowTcpForwarding yes
X11Forwarding no
PrintMotd no
LoginGraceTime 30
MaxSessions 50
MaxStartups 50:30:100
Subsystem sftp internal-sftp
LogLevel VERBOSE
"""


def start_sshd(d: Path, host_key: Path, auth_keys: Path) -> tuple[subprocess.Popen, int, Path]:
    sshd = find_sshd()
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    user = getpass.getuser()
    for _attempt in range(5):
        port = _free_port()
        cfg = d / "sshd_config"
        cfg.write_text(
            SSHD_CONFIG.format(
                port=port, host_key=host_key, auth_keys=auth_keys, pid=d / "sshd.pid", user=user
            )
        )
        log = d / f"sshd-{port}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                die_with_starter([sshd, "-D", "-e", "-f", str(cfg)]),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            _wait_banner(port, proc, log)
            return proc, port, log
        except SSHDUnavailable:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if "Address already in use" not in log.read_text():
                raise
    raise SSHDUnavailable("sshd: no free port after 5 attempts")


def local_sshd(d: Path) -> LocalSSHD:
    """Keys in ``d``, a running sshd on 127.0.0.1 that accepts them (stop() it when done)."""
    d.mkdir(parents=True, exist_ok=True)
    host_key, user_key = d / "host_ed25519", d / "user_ed25519"
    for key, comment in ((host_key, "forensics-host"), (user_key, "forensics-user")):
        if not key.exists():
            keygen(key, comment)
    auth = d / "authorized_keys"
    auth.write_text((d / "user_ed25519.pub").read_text())
    proc, port, log = start_sshd(d, host_key, auth)
    pub = " ".join((d / "host_ed25519.pub").read_text().split()[:2])
    known = d / "known_hosts"
    known.write_text(known_hosts_line(port, pub))
    return LocalSSHD(
        host="127.0.0.1",
        port=port,
        user=getpass.getuser(),
        identity_file=str(user_key),
        known_hosts=str(known),
        host_key_pub=pub,
        dir=d,
        log=log,
        proc=proc,
    )


def known_hosts_line(port: int, host_key_pub: str) -> str:
    """The known_hosts line of a loopback sshd (or a port in front of it) on ``port``."""
    return f"[127.0.0.1]:{port} {host_key_pub}\n"


class SlowPort:
    """A loopback port in front of ``port`` (this sshd's) whose connections ``hold()`` keeps
    waiting (a sleep, an event's wait) before relaying them: a host that connects slowly (far
    away, a slow login), for the tests and the benchmark (docs/performance.md, "A slow host,
    twelfth stop"). The client's TCP connect succeeds at once; the server's banner comes after
    the hold. Its threads are daemons; ``close`` stops accepting."""

    def __init__(self, port: int, hold: Callable[[], object]):
        self.target, self.hold = port, hold
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, name="slow-port", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        self.hold()
        try:
            up = socket.create_connection(("127.0.0.1", self.target))
        except OSError:
            conn.close()
            return
        threading.Thread(target=_pump, args=(up, conn), daemon=True).start()
        _pump(conn, up)

    def close(self) -> None:
        self.sock.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Bytes of ``src`` to ``dst`` until ``src`` ends; then ``dst`` is told (half-close)."""
    try:
        while data := src.recv(1 << 16):
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        src.close()
        dst.close()
