"""Streams over the OpenSSH client (forensics.hosts.openssh) against the suite's real sshd: the
bytes are the file's; the host key is checked against the project's known_hosts files (a key
they do not hold is refused by ``ssh``, and the stream then runs over paramiko, whose
connection passed the check); a jump host works; without ``ssh`` the streams are paramiko's.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from forensics import hosts
from forensics.hosts.openssh import TRANSPORT_ENV, OpenSSHChannel, ssh_argv
from forensics.logsource import open_log

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the ssh client")


@pytest.fixture
def log(tmp_path) -> Path:
    path = tmp_path / "a.log"
    path.write_bytes(b"".join(b"[2025-01-01 00:00:00] line %d\n" % i for i in range(40_000)))
    return path


def test_a_stream_runs_in_an_ssh_process_and_gives_the_file_bytes(ssh_host, log, monkeypatch):
    seen: list[object] = []
    real = OpenSSHChannel.__init__

    def spy(self, *a, **k):
        seen.append(self)
        real(self, *a, **k)

    monkeypatch.setattr(OpenSSHChannel, "__init__", spy)
    assert b"".join(open_log(ssh_host, str(log)).chunks()) == log.read_bytes()
    assert seen, "the stream did not run through ssh"
    argv = ssh_host._ssh_argv()
    assert argv[argv.index("-F") + 1] == "none"  # no ssh config file: forensics.toml alone
    assert "StrictHostKeyChecking=yes" in argv and "BatchMode=yes" in argv


def test_a_host_key_ssh_does_not_know_is_refused_and_the_stream_goes_over_paramiko(
    ssh_host, sshd_server, log, tmp_path
):
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"[{sshd_server.host}]:{sshd_server.port} {sshd_server.other_host_key}\n")
    argv = ssh_argv(ssh_host, shutil.which("ssh"))
    assert argv is not None
    at = argv.index(f"UserKnownHostsFile={sshd_server.known_hosts}")
    argv[at] = f"UserKnownHostsFile={wrong}"
    ssh_host._ssh = argv
    chan = OpenSSHChannel(argv, "echo should-not-run", stdin=False)
    assert chan.recv(100) == b""  # ssh refused the key: nothing ran
    assert chan.recv_exit_status() == 255
    assert b"Host key verification failed" in chan.recv_stderr(4096)
    chan.close()
    assert b"".join(open_log(ssh_host, str(log)).chunks()) == log.read_bytes()
    assert ssh_host._ssh is None  # this host's streams now go over paramiko


def test_a_jump_host_is_an_ssh_w_through_its_own_entry(sshd_server, monkeypatch, log):
    Path("forensics.toml").write_text(
        sshd_server.toml("bastion") + sshd_server.toml("inner", jump="bastion")
    )
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    hosts.close_all()
    try:
        inner = hosts.get_host("inner")
        argv = inner._ssh_argv()
        proxy = next(a for a in argv if a.startswith("ProxyCommand="))
        assert " -W " in proxy and "StrictHostKeyChecking=yes" in proxy
        assert b"".join(open_log(inner, str(log)).chunks()) == log.read_bytes()
        assert inner._ssh is not None  # ssh did it, no fallback
    finally:
        hosts.close_all()


def test_without_ssh_or_when_set_so_streams_are_paramiko_s(ssh_config, log, monkeypatch):
    monkeypatch.setenv(TRANSPORT_ENV, "paramiko")
    host = hosts.get_host("sshtest")
    host.expect_streams(1)
    assert host._ssh_argv() is None
    assert b"".join(open_log(host, str(log)).chunks()) == log.read_bytes()
    hosts.close_all()
    monkeypatch.delenv(TRANSPORT_ENV)
    monkeypatch.setenv("PATH", "/nonexistent")
    host = hosts.get_host("sshtest")
    assert host._ssh_argv() is None
    assert b"".join(open_log(host, str(log)).chunks()) == log.read_bytes()


def test_a_user_or_host_ssh_would_read_as_an_option_is_not_given_to_it(ssh_host):
    ssh_host.cfg.user = "-oProxyCommand=touch /tmp/x"
    assert ssh_argv(ssh_host, "/usr/bin/ssh") is None
