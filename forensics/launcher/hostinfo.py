"""What the launcher asks the host: its user, tools and temp dir; the journal; a process's
start time; a file's size and tail; the command lines of a process group."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from forensics.errors import ForensicsError
from forensics_parsers.journal import parse_journal

if TYPE_CHECKING:
    from forensics.hosts import Host


def host_for(name: str | None) -> Host:
    from forensics.hosts import get_host

    return get_host(name)


def is_local(host: Host) -> bool:
    from forensics.hosts import LocalHost

    return isinstance(host, LocalHost)


def probe(host: Host) -> dict[str, Any]:
    res = host.run(
        "id -un; for p in timeout setsid bash curl wget python3; do command -v $p >/dev/null 2>&1 "
        "&& echo has:$p; done; echo tmp:${TMPDIR:-/tmp}",
        timeout=20,
    )
    lines = res.text.split()
    return {
        "user": lines[0] if lines else "user",
        "has": {x[4:] for x in lines if x.startswith("has:")},
        "tmp": next((x[4:] for x in lines if x.startswith("tmp:")), "/tmp"),
    }


def read_journal(host: Host, path: str, launch_id: str) -> pl.DataFrame:
    try:
        data = host.read(path)
    except ForensicsError:
        data = b""
    return parse_journal(data, launch_id=launch_id)


def proc_start(host: Host, pid: int) -> int | None:
    res = host.run(f"cat /proc/{int(pid)}/stat 2>/dev/null", timeout=10, allow_timeout=True)
    text = res.text
    if ")" not in text:
        return None
    fields = text.rsplit(")", 1)[1].split()
    try:
        return int(fields[19])  # field 22 overall; 20th after "pid (comm)"
    except (IndexError, ValueError):
        return None


def file_size(host: Host, path: str | None) -> int:
    """The size of the file at ``path`` on the host; 0 when there is none."""
    if not path:
        return 0
    try:
        return host.stat(path).size
    except ForensicsError:
        return 0


def log_tail(host: Host, path: str | None, nbytes: int = 64 << 10, start: int = 0) -> str:
    """The last ``nbytes`` of the log written since ``start`` (all of it if it was truncated)."""
    if not path:
        return ""
    try:
        size = host.stat(path).size
        if size < start:  # truncated (`>LOG`) or replaced: all of it is this launch's
            start = 0
        return host.read(path, max(start, size - nbytes)).decode("utf-8", "replace")
    except ForensicsError:
        return ""


def group_args(host: Host, pgid: int, **kw: Any) -> str:
    """The command lines of the processes in group ``pgid`` on the host (``pgid args`` lines)."""
    return host.run(
        f"ps -ww -e -o pgid=,args= 2>/dev/null | awk '$1=={pgid}'", timeout=15, **kw
    ).text
