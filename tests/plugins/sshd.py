"""A real OpenSSH server on 127.0.0.1 for the tests (one per pytest worker).

``sshd_server`` (session) generates throwaway host and user keys, writes an sshd_config that
listens on a free port of 127.0.0.1 and accepts only that user key, starts ``sshd -D -e`` and
stops it at the end. ``ssh_config`` (function) writes a ``forensics.toml`` in the test's working
directory naming that server ``sshtest``; ``ssh_host`` returns the connected ``SSHHost``.

When sshd or ssh-keygen is missing the fixtures FAIL (CI installs openssh-server; see .ci/run).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from forensics.localsshd import LocalSSHD, SSHDUnavailable, keygen, local_sshd


@dataclasses.dataclass
class SSHD(LocalSSHD):
    other_identity: str = ""  # a valid key the server does NOT accept (S03)
    other_host_key: str = ""  # a second host key, for the "changed key" case (S04)

    def toml(self, name: str = "sshtest", **overrides: object) -> str:
        return super().toml(name, **overrides)


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory) -> SSHD:
    d = tmp_path_factory.mktemp("sshd")
    server = None
    try:
        server = local_sshd(d)
        other_key, other_host_key = d / "other_ed25519", d / "other_host_ed25519"
        keygen(other_key, "forensics-test-other-user")
        keygen(other_host_key, "forensics-test-other-host")
    except BaseException as exc:
        if server is not None:  # started, then the other keys failed: not left running
            server.stop()
        if isinstance(exc, SSHDUnavailable):
            pytest.fail(f"the SSH tests need a real OpenSSH server: {exc}")
        raise
    other_pub = " ".join((d / "other_host_ed25519.pub").read_text().split()[:2])
    fields = {f.name: getattr(server, f.name) for f in dataclasses.fields(LocalSSHD)}
    srv = SSHD(**fields, other_identity=str(other_key), other_host_key=other_pub)
    try:
        yield srv
    finally:
        srv.stop()


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


# -- the processes of a test's own sshd (S07 tests cut connections by killing them) ----------


def proc_stat(pid: int) -> tuple[str, int]:
    """(comm, ppid) of a live process (OSError once it is gone)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    comm = text[text.index("(") + 1 : text.rindex(")")]
    return comm, int(text.rsplit(")", 1)[1].split()[1])


def ancestors(pid: int) -> list[int]:
    """``pid`` and its parents up to (not including) init."""
    chain = []
    while pid > 1:
        chain.append(pid)
        pid = proc_stat(pid)[1]
    return chain


def connection_processes(master: int) -> list[int]:
    """The per-connection ``sshd`` processes below the listener ``master`` (one a test started)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if proc_stat(int(d.name))[0] == "sshd" and master in ancestors(int(d.name))[1:]:
                out.append(int(d.name))
        except OSError:  # gone while we looked
            continue
    return out
