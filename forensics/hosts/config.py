"""Host configuration: ``[hosts.NAME]`` tables of forensics.toml / config.toml, addresses."""

from __future__ import annotations

import dataclasses
import getpass
import math
import re
import tomllib
from pathlib import Path
from typing import Any

from forensics.errors import ConfigError
from forensics.hosts.base import DEFAULT_CONNECT_TIMEOUT, MAX_CONNECT_TIMEOUT
from forensics.userfile import read_user_file


@dataclasses.dataclass
class HostConfig:
    """One ``[hosts.NAME]`` table."""

    name: str
    user: str
    host: str
    port: int = 22
    identity_file: str | None = None
    known_hosts: str | None = None
    jump: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    source: str = ""

    @property
    def address(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{h}:{self.port}"


HOST_KEYS = {"address", "identity_file", "known_hosts", "jump", "connect_timeout"}
_ADDRESS = re.compile(
    r"^(?:(?P<user>[^@\s/]+)@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^@\s:/\[\]]+)(?::(?P<port>\d+))?$"
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")


def forensics_home() -> Path:
    """Where forensics writes its state (forensics.home: honours --store)."""
    from forensics.home import home

    return home()


def config_paths() -> list[Path]:
    """Config files in precedence order (first wins per host name); --store does not move
    them (forensics.home)."""
    from forensics.home import default_home

    return [Path("forensics.toml"), default_home() / "config.toml"]


def parse_address(text: str, *, where: str = "address") -> tuple[str, str, int]:
    """``user@host[:port]`` -> (user, host, port); user defaults to the local user."""
    m = _ADDRESS.match(text.strip())
    if "$" in text:  # `$USER@host`: the file is data, nothing in it is expanded
        raise ConfigError(
            f"{where}: {text!r}: variables are not expanded in forensics.toml",
            hint="write the user and host as they are: user@host[:port]",
        )
    if not m:
        raise ConfigError(
            f"{where}: {text!r} is not an address",
            hint="write it as user@host or user@host:port",
        )
    host = m["host"].strip("[]")
    port = int(m["port"] or 22)
    if not 0 < port < 65536:
        raise ConfigError(f"{where}: port {port} out of range", hint="use a port 1-65535")
    return m["user"] or getpass.getuser(), host, port


# The top-level tables of forensics.toml / config.toml, and who reads them.
CONFIG_SECTIONS = (
    "hosts",  # forensics.hosts: [hosts.NAME]
    "recipes",  # forensics.recipe: [recipes.NAME]
)


def load_config(paths: list[Path] | None = None) -> dict[str, Any]:
    """The merged config: ``{"hosts": {NAME: HostConfig}, "raw": [(path, dict)]}``.

    Other sections (recipes, ...) are left in ``raw`` for their owners.
    """
    hosts: dict[str, HostConfig] = {}
    raw: list[tuple[str, dict]] = []
    for path in paths if paths is not None else config_paths():
        if not path.exists() and not path.is_symlink():
            continue
        try:  # a FIFO, device or folder is exit 2, a file over its cap too (never a hang)
            data = tomllib.loads(read_user_file(path, "config file").decode("utf-8-sig"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}", hint="fix the file") from None
        unknown = sorted(set(data) - set(CONFIG_SECTIONS))
        if unknown:  # a typo ([host.gpu8], [recipe.x]) would otherwise be silently ignored
            import difflib

            near = difflib.get_close_matches(unknown[0], CONFIG_SECTIONS, n=1)
            raise ConfigError(
                f"{path}: [{unknown[0]}]: not a section forensics reads"
                + (f" (did you mean [{near[0]}]?)" if near else ""),
                hint=f"the sections are {', '.join(f'[{s}]' for s in CONFIG_SECTIONS)}",
            )
        raw.append((str(path), data))
        section = data.get("hosts", {})
        if not isinstance(section, dict):
            raise ConfigError(f"{path}: [hosts] must be a table", hint="use [hosts.NAME]")
        for name, table in section.items():
            if name in hosts:
                continue
            hosts[name] = _host_config(path, name, table)
    _check_jumps(hosts)
    return {"hosts": hosts, "raw": raw}


def _check_jumps(hosts: dict[str, HostConfig]) -> None:
    """Every ``jump`` names a configured host (or is a ``user@host`` address) and the chain of
    jumps ends: a host that jumps to itself, or A -> B -> A, would connect for ever."""
    for name, cfg in hosts.items():
        chain = [name]
        nxt = cfg.jump
        while nxt:
            if nxt not in hosts:
                if "@" not in nxt:
                    raise ConfigError(
                        f"{hosts[chain[-1]].source}: hosts.{chain[-1]}.jump = {nxt!r}: "
                        "no such host",
                        hint=f"add [hosts.{nxt}] or give an address (user@host[:port])",
                    )
                break
            if nxt in chain:
                cycle = " -> ".join([*chain[chain.index(nxt) :], nxt])
                raise ConfigError(
                    f"{hosts[chain[-1]].source}: hosts.{chain[-1]}.jump: the jumps go round "
                    f"in a circle ({cycle})",
                    hint="the last host of a jump chain must be reachable directly: "
                    "remove one of these jump keys",
                )
            chain.append(nxt)
            nxt = hosts[nxt].jump


def _host_config(path: Path, name: str, table: Any) -> HostConfig:
    where = f"{path}: hosts.{name}"
    if not _NAME.match(name):
        raise ConfigError(f"{where}: bad host name", hint="use letters, digits, '.', '_', '-'")
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table", hint=f"write [hosts.{name}]")
    unknown = sorted(set(table) - HOST_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}.{unknown[0]}: unknown key", hint=f"known keys: {', '.join(sorted(HOST_KEYS))}"
        )
    if "address" not in table:
        raise ConfigError(f"{where}.address: missing", hint='add address = "user@host:port"')
    for key in ("address", "identity_file", "known_hosts", "jump"):
        if key in table and not isinstance(table[key], str):
            raise ConfigError(f"{where}.{key}: must be a string", hint="quote the value")
    user, host, port = parse_address(table["address"], where=f"{where}.address")
    timeout = table.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or not 0 < timeout <= MAX_CONNECT_TIMEOUT
    ):
        raise ConfigError(
            f"{where}.connect_timeout = {timeout!r}: must be a number of seconds, "
            f"more than 0 and at most {MAX_CONNECT_TIMEOUT:g}",
            hint="e.g. connect_timeout = 10",
        )
    return HostConfig(
        name=name,
        user=user,
        host=host,
        port=port,
        identity_file=table.get("identity_file"),
        known_hosts=table.get("known_hosts"),
        jump=table.get("jump"),
        connect_timeout=float(timeout),
        source=str(path),
    )


def _config_for(name: str) -> HostConfig:
    cfg = load_config()["hosts"].get(name)
    if cfg is not None:
        return cfg
    if "@" not in name:
        known = ", ".join(sorted(load_config()["hosts"])) or "none"
        raise ConfigError(
            f"unknown host {name!r} (configured: {known})",
            hint=f'add [hosts.{name}] address = "user@host" to forensics.toml',
        )
    user, host, port = parse_address(name)
    return HostConfig(name=f"{user}@{host}:{port}", user=user, host=host, port=port)
