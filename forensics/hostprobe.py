"""What lint's host rules ask of a host: the free space under some paths (``df -Pk``) and
whether a TCP port is listened on (``/proc/net/tcp``). Also used by the sweep's executors."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from forensics.hosts import Host


def free_space(host: Host, paths: list[str]) -> list[tuple[str, str, float]]:
    """``(path, mount, free MiB)`` per filesystem holding ``paths`` (or their nearest existing
    parent), one entry per mount, from ``df -Pk`` on the host. Unreadable ones are left out."""
    script = "; ".join(
        f'p={shlex.quote(p)}; while [ ! -e "$p" ] && [ "$p" != / ] && [ "$p" != . ]; '
        f'do p=$(dirname "$p"); done; echo "@{i}"; df -Pk "$p" 2>/dev/null | tail -n 1'
        for i, p in enumerate(paths)
    )
    res = host.run(script, timeout=15, allow_timeout=True)
    out: dict[str, tuple[str, str, float]] = {}
    current = None
    for line in res.text.splitlines():
        if line.startswith("@") and line[1:].isdigit():
            current = int(line[1:])
            continue
        parts = line.split()
        if current is None or len(parts) < 6 or not parts[-3].isdigit():
            continue
        mount = parts[-1]
        out.setdefault(mount, (paths[current], mount, int(parts[-3]) / 1024))
    return list(out.values())


def port_listening(host: Host, port: int) -> bool:
    """Whether something listens on TCP ``port`` on the host (from /proc/net/tcp{,6})."""
    script = "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null"
    res = host.run(script, timeout=15)
    want = f":{port:04X}"
    for line in res.text.splitlines()[0:]:
        parts = line.split()
        if len(parts) > 3 and parts[3] == "0A" and parts[1].upper().endswith(want):
            return True
    return False
