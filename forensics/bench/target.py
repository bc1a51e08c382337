"""Where a benchmark goes (a URL, HOST[:PORT], a configured host through SSH, a launch's
name) and which run it measures (the run on that port, or ``--run NAME``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from forensics.errors import UsageError

if TYPE_CHECKING:
    from forensics.store import Store


def resolve_target(target: str, port: int | None = None) -> str:
    """A URL as given, or ``HOST[:PORT]`` / a configured host name -> ``http://host:port``.

    The port is the one in TARGET, else ``port`` (e.g. the run's), else SGLang's 30000.
    """
    if "@" in target and "://" not in target:
        target = "http://" + target  # user:password@host[:port]: basic auth over http
    if "://" in target:
        return target.rstrip("/")
    bracketed = re.fullmatch(r"\[([^\]]*)\](?::(.*))?", target)  # [::1] or [::1]:PORT
    if bracketed:
        name, sep, p = bracketed[1], ":" if bracketed[2] is not None else "", bracketed[2] or ""
    elif target.count(":") == 1:
        name, sep, p = target.rpartition(":")
    else:
        name, sep, p = target, "", ""
    if sep and not (p.isascii() and p.isdigit()):  # not `８０` either (int() reads it)
        raise UsageError(f"{target}: bad port {p!r}", hint="HOST:PORT or http://HOST:PORT")
    host = name
    try:
        from forensics.hosts import load_config

        cfg = load_config()["hosts"].get(name)
    except ImportError:
        cfg = None
    if cfg is not None:
        host = cfg.host
    if not host:
        raise UsageError(f"{target}: no host", hint="forensics bench http://HOST:PORT")
    final_port = int(p) if sep else (port or 30000)
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{final_port}"


@dataclass
class Target:
    """Where a benchmark goes. ``url``: what the user means (shown and stored). ``ssh_host``:
    a configured host whose loopback serves it, reached through an SSH tunnel
    (``SSHHost.forward``) to ``remote_port``; None to connect to ``url`` directly."""

    url: str
    ssh_host: str | None = None
    remote_port: int | None = None


def resolve_bench_target(
    target: str, port: int | None = None, store: Store | None = None, *, direct: bool = False
) -> Target:
    """TARGET of ``forensics bench`` -> a ``Target``.

    A URL is used as given. A configured host name (``gpu8``, ``gpu8:30001``) is reached
    through SSH at the host's 127.0.0.1 (SGLang listens there by default) unless ``direct``.
    The name of a launch (``forensics launch --name NAME``) means its host and port. Anything
    else is ``HOST[:PORT]``.
    """
    from forensics.hosts import load_config

    hosts = load_config()["hosts"]
    name = target.rpartition(":")[0] if target.count(":") == 1 else target
    if "://" not in target and name in hosts:
        url = resolve_target(target, port)
        return Target(url, None if direct else name, urlsplit(url).port)
    if "://" not in target and port is None and not set(target) & {":", "/"} and store:
        from forensics.launcher import find_launch_exact

        row = find_launch_exact(store, target)
        if row is not None:
            lport = int(row.get("port") or urlsplit(row.get("health_url") or "").port or 30000)
            if row.get("host") in (None, "", "local"):
                return Target(f"http://127.0.0.1:{lport}")
            url = resolve_target(f"{row['host']}:{lport}")
            return Target(url, None if direct else row["host"], lport)
    return Target(resolve_target(target, port))


def run_port(store: Store, run_id: str) -> int | None:
    import polars as pl

    from forensics.runs import runs_table

    df = runs_table(store, classify=False)
    if df.is_empty() or "port" not in df.columns:
        return None
    hit = df.filter(pl.col("run_id") == run_id)
    if hit.is_empty() or hit["port"][0] is None:
        return None
    return int(hit["port"][0])


def find_run_for_url(store: Store, url: str) -> tuple[str, str] | None:
    """The latest run whose port matches the URL's port (host preferred); (run_id, name)."""
    import polars as pl

    from forensics.runs import runs_table

    df = runs_table(store, classify=False)
    if df.is_empty() or "port" not in df.columns:
        return None
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    cand = df.filter(pl.col("port").cast(pl.Int64, strict=False) == port)
    if cand.is_empty():
        return None
    host = (parts.hostname or "").lower()
    wildcard = {"", "0.0.0.0", "::", "127.0.0.1", "localhost", "::1"}
    if "host" in cand.columns:
        same = cand.filter(pl.col("host").cast(pl.Utf8).str.to_lowercase() == host)
        if not same.is_empty():
            cand = same
        elif host not in wildcard:
            loose = cand.filter(
                pl.col("host").is_null() | pl.col("host").cast(pl.Utf8).is_in(list(wildcard))
            )
            cand = loose if not loose.is_empty() else cand
    if "started_at" in cand.columns:
        cand = cand.sort("started_at", nulls_last=False)
    row = cand.row(-1, named=True)
    return str(row["run_id"]), str(row.get("name") or row["run_id"])


def resolve_run(store: Store, match: str) -> tuple[str, str]:
    from forensics.runs import find_run

    row = find_run(store, match, classify=False, what=f"--run {match}")
    return str(row["run_id"]), str(row.get("name") or row["run_id"])
