"""Unknown errors: one template per failure shape."""

from __future__ import annotations

import hashlib
import re

_MASKS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\x1b\[[0-9;]*m"), ""),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I), "<ID>"),
    (re.compile(r"(?:[A-Za-z]:)?(?:/[\w.@+\-]+){2,}/?"), "<PATH>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<HEX>"),
    (re.compile(r"\b[0-9a-f]{12,}\b"), "<HEX>"),
    (re.compile(r"(?<=[=:])\s*'[^']*'|(?<=[=:])\s*\"[^\"]*\""), "<STR>"),
    (re.compile(r"\b(?:rid|pid|id|request_id|req)=\S+"), "<KV>"),
    (re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"), "<N>"),
    (re.compile(r"\s+"), " "),
]


def template(text: str) -> str:
    """Mask numbers, hex, paths, ids and quoted values so repeats of one failure compare equal."""
    t = (text or "").strip()
    for rx, rep in _MASKS:
        t = rx.sub(rep, t)
    return t[:300]


def unknown_id(text: str) -> str:
    return "unknown:" + hashlib.sha1(template(text).encode()).hexdigest()[:8]
