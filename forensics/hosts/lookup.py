"""Host lookup: a config name, ``user@host`` or location text -> a connected, cached host."""

from __future__ import annotations

import contextlib
import os
import re
import threading
from typing import TYPE_CHECKING

from forensics.errors import UsageError
from forensics.hosts.base import Host
from forensics.hosts.local import LocalHost

if TYPE_CHECKING:  # the SSH side and the config file load with the first remote location
    from forensics.hosts.config import HostConfig

_CACHE: dict[tuple, Host] = {}
_CACHE_LOCK = threading.RLock()  # guards _CACHE and _CONNECTING (never held while connecting)
# one lock per connection key, held while that host connects (re-entered when a jump host
# connects): two hosts connect at once (ingest's lookups), one host connects once
_CONNECTING: dict[tuple, threading.RLock] = {}
_LOCAL = LocalHost()


def get_host(name: str | None, *, trust_new_host: bool = False) -> Host:
    """The host for a config name (or ``user@host[:port]``, or ``local``), connected and cached.

    Connections are reused for the life of the process; a dropped one is reopened.
    """
    if name in (None, "", "local", "localhost-local"):
        return _LOCAL
    from forensics.hosts.config import _config_for

    cfg = _config_for(name)
    return _host_for(cfg, trust_new_host=trust_new_host)


def _host_for(cfg: HostConfig, *, trust_new_host: bool = False) -> Host:
    from forensics.hosts.ssh import SSHHost

    key = (cfg.user, cfg.host, cfg.port, cfg.identity_file, cfg.known_hosts, cfg.jump)
    with _CACHE_LOCK:
        lock = _CONNECTING.setdefault(key, threading.RLock())
    with lock:
        with _CACHE_LOCK:
            cached = _CACHE.get(key)
        if isinstance(cached, SSHHost) and cached.alive():
            return cached
        host = SSHHost(cfg, trust_new_host=trust_new_host)
        host.connect()
        with _CACHE_LOCK:
            _CACHE[key] = host
        return host


def close_all() -> None:
    """Close every cached connection (the CLI calls this at exit; tests between cases)."""
    with _CACHE_LOCK:
        for host in _CACHE.values():
            with contextlib.suppress(Exception):
                host.close()
        _CACHE.clear()


_SSH_URL = re.compile(r"^ssh://(?P<addr>[^/]+)(?P<path>/.*)?$")
_NAMED = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,63}|[^@\s:/]+@[^@\s:/]+):(?P<path>.*)$")


def is_remote(text: str) -> bool:
    return bool(_SSH_URL.match(text)) or (_named_prefix(text) is not None)


def _named_prefix(text: str) -> str | None:
    m = _NAMED.match(text)
    if not m or os.path.exists(text):
        return None
    return m["name"]


def resolve_location(text: str, *, trust_new_host: bool = False) -> tuple[Host, str]:
    """``ssh://user@host[:port]/path``, ``NAME:/path``, ``user@host:/path`` or a local path.

    Returns (host, path-or-pattern). A ``NAME:`` that is not configured is a ConfigError.
    """
    m = _SSH_URL.match(text)
    if m:
        from forensics.hosts.config import HostConfig, load_config, parse_address

        addr = m["addr"]
        path = m["path"] or "."
        hosts = load_config()["hosts"]
        if addr in hosts:
            return _host_for(hosts[addr], trust_new_host=trust_new_host), path
        user, host, port = parse_address(addr, where=text)
        cfg = HostConfig(name=f"{user}@{host}:{port}", user=user, host=host, port=port)
        # an ssh:// URL to a configured address reuses that entry's keys
        for known in hosts.values():
            if (known.host, known.port) == (host, port) and known.user == user:
                cfg = known
        return _host_for(cfg, trust_new_host=trust_new_host), path
    name = _named_prefix(text)
    if name is not None:
        path = text[len(name) + 1 :]
        if not path:
            raise UsageError(f"{text}: no path after the host", hint=f"{name}:/path/to/*.log")
        return get_host(name, trust_new_host=trust_new_host), path
    return _LOCAL, text
