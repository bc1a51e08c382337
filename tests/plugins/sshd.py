"""A real OpenSSH server on 127.0.0.1 for the tests (one per pytest worker).

``sshd_server`` (session) generates throwaway host and user keys, writes an sshd_config that
listens on a free port of 127.0.0.1 and accepts only that user key, starts ``sshd -D -e`` and
stops it at the end. ``ssh_config`` (function) writes a ``forensics.toml`` in the test's working
directory naming that server ``sshtest``; ``ssh_host`` returns the connected ``SSHHost``.

When sshd or ssh-keygen is missing the fixtures FAIL (CI installs openssh-server; see .ci/run).
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")


@dataclasses.dataclass
class SSHD:
    host: str
    port: int
    user: str
    identity_file: str  # private key accepted by the server
    known_hosts: str  # holds the server's host key line for [127.0.0.1]:port
    host_key_pub: str  # the server's public host key line ("ssh-ed25519 AAAA...")
    other_identity: str  # a valid key the server does NOT accept (S03)
    other_host_key: str  # a second host key, for the "changed key" case (S04)
    dir: Path
    log: Path

    @property
    def address(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    def toml(self, name: str = "sshtest", **overrides: str) -> str:
        fields = {
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


def _find_sshd() -> str:
    for cand in SSHD_CANDIDATES:
        if os.access(cand, os.X_OK):
            return cand
    found = shutil.which("sshd")
    if found:
        return found
    pytest.fail(
        "sshd is not installed: the SSH tests need a real OpenSSH server "
        "(apt-get install -y openssh-server; .ci/run does this)"
    )


def _keygen(path: Path, comment: str) -> None:
    if shutil.which("ssh-keygen") is None:
        pytest.fail("ssh-keygen is missing (apt-get install -y openssh-client)")
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
            pytest.fail(f"sshd exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.settimeout(2)
                if s.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"sshd did not answer on 127.0.0.1:{port}: {log.read_text()[-2000:]}")


def _start(d: Path, host_key: Path, auth_keys: Path) -> tuple[subprocess.Popen, int, Path]:
    sshd = _find_sshd()
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    user = getpass.getuser()
    for _attempt in range(5):
        port = _free_port()
        cfg = d / "sshd_config"
        cfg.write_text(
            f"""ListenAddress 127.0.0.1
Port {port}
HostKey {host_key}
AuthorizedKeysFile {auth_keys}
PidFile {d / "sshd.pid"}
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
        )
        log = d / f"sshd-{port}.log"
        proc = subprocess.Popen(
            [sshd, "-D", "-e", "-f", str(cfg)],
            stdin=subprocess.DEVNULL,
            stdout=open(log, "wb"),  # noqa: SIM115 - lives as long as sshd
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_banner(port, proc, log)
            return proc, port, log
        except pytest.fail.Exception:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if "Address already in use" not in log.read_text():
                raise
    pytest.fail("sshd: no free port after 5 attempts")


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory) -> SSHD:
    d = tmp_path_factory.mktemp("sshd")
    host_key, other_host_key = d / "host_ed25519", d / "other_host_ed25519"
    user_key, other_key = d / "user_ed25519", d / "other_ed25519"
    _keygen(host_key, "forensics-test-host")
    _keygen(other_host_key, "forensics-test-other-host")
    _keygen(user_key, "forensics-test-user")
    _keygen(other_key, "forensics-test-other-user")
    auth = d / "authorized_keys"
    auth.write_text((d / "user_ed25519.pub").read_text())
    proc, port, log = _start(d, host_key, auth)
    pub = " ".join((d / "host_ed25519.pub").read_text().split()[:2])
    known = d / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {pub}\n")
    other_pub = " ".join((d / "other_host_ed25519.pub").read_text().split()[:2])
    try:
        yield SSHD(
            host="127.0.0.1",
            port=port,
            user=getpass.getuser(),
            identity_file=str(user_key),
            known_hosts=str(known),
            host_key_pub=pub,
            other_identity=str(other_key),
            other_host_key=other_pub,
            dir=d,
            log=log,
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def ssh_config(sshd_server, monkeypatch) -> SSHD:
    """``forensics.toml`` in the working directory naming the test sshd ``sshtest``."""
    from forensics import hosts

    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    Path("forensics.toml").write_text(sshd_server.toml())
    hosts.close_all()
    yield sshd_server
    hosts.close_all()


@pytest.fixture
def ssh_host(ssh_config):
    """The connected ``SSHHost`` for ``sshtest``."""
    from forensics.hosts import get_host

    return get_host("sshtest")
