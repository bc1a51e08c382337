"""Host keys: the project known_hosts, fingerprints, the unknown-key policy, ``hosts trust``."""

from __future__ import annotations

import contextlib
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import HostKeyError, UsageError
from forensics.hosts.config import _config_for, forensics_home

if TYPE_CHECKING:
    import paramiko


def project_known_hosts() -> Path:
    """Keys accepted with ``--trust-new-host`` are recorded here."""
    return forensics_home() / "known_hosts"


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style ``SHA256:...`` fingerprint."""
    import base64
    import hashlib

    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


_fingerprint = fingerprint  # for functions whose `fingerprint` parameter shadows it


def _known_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


_RECORDING = threading.Lock()  # hosts connecting at once (ingest's lookups) append one at a time


def _record_host_key(host: str, port: int, key: paramiko.PKey) -> Path:
    """One line appended to the project known_hosts through forensics.output (a regular file
    only, never through a symlink, cut back to its old size when the append fails: exit 7).
    The line holds the host name, port and key alone: no address with a user or password."""
    from forensics.output import write_home_file

    line = f"{_known_name(host, port)} {key.get_name()} {key.get_base64()}\n"
    with _RECORDING:
        return write_home_file(
            project_known_hosts(), line, what="the host key", mode=0o600, append=True
        )


def _policy(address: str, trust: bool, port: int):  # -> paramiko.MissingHostKeyPolicy
    import paramiko

    class _Policy(paramiko.MissingHostKeyPolicy):
        """Unknown key: refuse naming its fingerprint, or record it when the user trusts it."""

        def missing_host_key(self, client, hostname, key):  # noqa: ANN001
            host = hostname.split("]")[0].lstrip("[") if hostname.startswith("[") else hostname
            if trust:
                _record_host_key(host, port, key)
                client.get_host_keys().add(hostname, key.get_name(), key)
                return
            raise HostKeyError(
                f"{address}: unknown host key {key.get_name()} {fingerprint(key)}",
                hint="check the fingerprint with the host's admin, then re-run with "
                "--trust-new-host to record it",
            )

    return _Policy()


_FINGERPRINT = re.compile(r"^SHA256:[A-Za-z0-9+/]{43}=?\Z")


def trust_host(name: str, *, fingerprint: str | None = None) -> dict[str, Any]:
    """Fetch a host's key (no login) and record it in the project known_hosts.

    Without ``fingerprint`` nothing is written: the fingerprint is returned for the user to
    check and pass back. A key that differs from a recorded one is a HostKeyError (never
    replaced).
    """
    import paramiko

    if fingerprint is not None and not _FINGERPRINT.match(fingerprint.strip()):
        raise UsageError(
            f"--fingerprint {fingerprint!r}: not a SHA256 key fingerprint",
            hint=f"SHA256: and 43 base64 characters, as `forensics hosts trust {name}` prints",
        )
    from forensics.hosts.ssh import (  # ssh uses this module's policy
        SSHHost,
        _connect_error,
        _quiet_paramiko,
    )

    _quiet_paramiko()
    cfg = _config_for(name)
    probe = SSHHost(cfg)
    sock = probe._jump_channel() if cfg.jump else probe._socket()
    transport = paramiko.Transport(sock)
    try:
        transport.banner_timeout = cfg.connect_timeout
        transport.start_client(timeout=2 * cfg.connect_timeout + 1)
        key = transport.get_remote_server_key()
    except (paramiko.SSHException, EOFError, OSError) as exc:  # the one table (CONNECT_ERRORS):
        # a reset during the banner was EOFError, an internal error (issue 14, sixth round)
        raise _connect_error(exc, cfg.address, cfg.connect_timeout, []) or exc from None
    finally:
        transport.close()
    fp = _fingerprint(key)
    out = {"host": cfg.name, "address": cfg.address, "key_type": key.get_name(), "fingerprint": fp}
    keys = paramiko.HostKeys()
    for path in probe._known_hosts_files():
        with contextlib.suppress(OSError):
            keys.load(str(path))
    entry = keys.lookup(_known_name(cfg.host, cfg.port)) or {}
    recorded = entry.get(key.get_name())
    if recorded is not None:
        if recorded.asbytes() != key.asbytes():
            raise HostKeyError(
                f"{cfg.address}: HOST KEY CHANGED: got {key.get_name()} {fp}, expected "
                f"{_fingerprint(recorded)}",
                hint="this may be an attack; if the host was reinstalled, remove its old line "
                "from known_hosts yourself",
            )
        return {**out, "recorded": True, "already_known": True}
    if fingerprint is None:
        return {
            **out,
            "recorded": False,
            "hint": f"check it with the host's admin, then: forensics hosts trust {name} "
            f"--fingerprint {fp}",
        }
    if fingerprint.strip() != fp:
        raise HostKeyError(
            f"{cfg.address}: fingerprint mismatch: the host offers {fp}, you gave {fingerprint}",
            hint="do not trust this key; check the address and ask the host's admin",
        )
    path = _record_host_key(cfg.host, cfg.port, key)
    return {**out, "recorded": True, "already_known": False, "known_hosts": str(path)}
