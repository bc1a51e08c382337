"""What a startup-stage line says beyond its stage: the ``scope`` and ``detail`` of its event.

Each function here is the ``event`` of one row of ``RULES`` (parsers/sglang/rules.py): it gets
the run being parsed (its per-rank counters live there, so a resumed parse goes on counting),
the line's rank, its message and the rule's match, and returns ``(scope, detail)``. Rows without
an ``event`` give an empty scope and detail. The memory figures (``elapsed_s``, ``avail_mem_gb``,
``mem_usage_gb``) are read from every stage line alike: ``mem_figures``.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

Event = tuple[str, str]  # (scope, detail)

_MEM_RX = {
    "elapsed_s": re.compile(r"(?:Time elapsed: |elapsed=)([\d.]+) ?s"),
    "avail_mem_gb": re.compile(r"avail(?:able)?[ _](?:gpu_)?mem=([\d.]+) ?GB"),
    "mem_usage_gb": re.compile(r"mem usage=([\d.]+) ?GB"),
}
_TYPE_RX = re.compile(r"type=(\w+)")
_DRAFT_CLASS_RX = re.compile(r"(?:Eagle3?|NextN|MTP|Draft)\b", re.I)
_BS_RX = re.compile(r"bs=(\d+)")
_PROGRESS_RX = re.compile(r"(\d+)/(\d+)")


def mem_figures(msg: str) -> dict[str, float | None]:
    vals: dict[str, float | None] = dict.fromkeys(_MEM_RX)
    for k, rx in _MEM_RX.items():
        vm = rx.search(msg)
        if vm:
            try:
                vals[k] = float(vm.group(1))
            except ValueError:
                pass
    return vals


def capture_edge(msg: str) -> str:
    """``begin`` or ``end`` for a ``Capture ... graph begin|end`` line."""
    return "begin" if " begin" in msg[: msg.find("graph") + 12] else "end"


def _load(run: dict[str, Any], rank: str, msg: str, mm: re.Match[str], *, begin: bool) -> Event:
    """``Load weight begin|end``: the model class as detail; the target is each rank's first
    load, the draft a later one (or a drafter's class name)."""
    tm = _TYPE_RX.search(msg)
    cls = tm.group(1) if tm else ""
    if begin:
        run["loads"] += 1
    per_rank = run.setdefault("load_begins", {})
    if not cls:
        if begin:
            per_rank[rank] = per_rank.get(rank, 0) + 1
        is_draft = per_rank.get(rank, 1) > 1
    else:
        is_draft = bool(_DRAFT_CLASS_RX.search(cls)) or per_rank.get(rank, 1) > 1
    return ("draft" if is_draft else "target"), cls


load_begin = partial(_load, begin=True)
load_end = partial(_load, begin=False)


def _pool(run: dict[str, Any], rank: str, msg: str, mm: re.Match[str], *, key: str) -> Event:
    """The KV pool / the memory pool: each rank's first is the target's, a later the draft's."""
    seen = run.setdefault(key, {})
    seen[rank] = seen.get(rank, 0) + 1
    return ("target" if seen[rank] == 1 else "draft"), ""


kv_pool = partial(_pool, key="kv_seen")
pool_end = partial(_pool, key="pool_seen")


def capture(run: dict[str, Any], rank: str, msg: str, mm: re.Match[str]) -> Event:
    """``Capture <scope> ... graph begin|end``: the scope named in the line (target when none)."""
    raw_scope = (mm.group("scope") or "").strip()
    if raw_scope.startswith("target") or not raw_scope:
        scope = "target"
        if not raw_scope:
            # 0.4.3 reuses the target text for the draft: the second pair is the draft
            seen = run.setdefault("plain_capture", {})
            if capture_edge(msg) == "begin":
                seen[rank] = seen.get(rank, 0) + 1
            if seen.get(rank, 1) > 1:
                scope = "draft"
    elif raw_scope == "draft extend":
        scope = "draft_extend"
    elif raw_scope.startswith("draft"):
        scope = "draft"
    else:
        scope = raw_scope.replace(" ", "_")
    return scope, raw_scope


def capture_progress(run: dict[str, Any], rank: str, msg: str, mm: re.Match[str]) -> Event:
    bm = _BS_RX.search(msg)
    pm = _PROGRESS_RX.search(msg)
    return "", (f"bs={bm.group(1)} " if bm else "") + (pm.group(0) if pm else "")


def capacity(run: dict[str, Any], rank: str, msg: str, mm: re.Match[str]) -> Event:
    return "", msg[:200]
