"""Remedies fitted to the log's own settings, and the catalog as rows."""

from __future__ import annotations

import string
from collections.abc import Iterable
from typing import Any

from forensics.signatures.catalog import CATALOG

# Remedy placeholders that move one setting of the log: placeholder -> (config key, flag,
# step, limit). A remedy whose setting is already at its limit in the log does not fit it
# ("raise --mem-fraction-static" at 0.95) and is left out; an unknown setting renders the
# generic phrase of ``render``.
REMEDY_SETTINGS: dict[str, tuple[str, str, float, float]] = {
    "mem_up": ("mem_fraction", "--mem-fraction-static", +0.05, 0.95),
    "mem_down": ("mem_fraction", "--mem-fraction-static", -0.05, 0.50),
}


def remedy_values(config: dict[str, Any]) -> dict[str, str | None]:
    """Placeholder -> the value to suggest from the log's ``config``, None when the setting
    is already at its limit (the remedy does not fit); settings the log lacks are absent."""
    out: dict[str, str | None] = {}
    for key, (field_, flag, step, limit) in REMEDY_SETTINGS.items():
        cur = config.get(field_)
        if not isinstance(cur, int | float) or isinstance(cur, bool):
            continue
        new = min(cur + step, limit) if step > 0 else max(cur + step, limit)
        moves = new > cur + 1e-9 if step > 0 else new < cur - 1e-9
        out[key] = f"{flag} {new:.2f}" if moves else None
    return out


def fitting(remedies: Iterable[str], values: dict[str, str | None]) -> list[str]:
    """The remedies that fit the log, rendered: one naming a placeholder whose value is None
    (its setting is at its limit) is left out."""
    unfit = {k for k, v in values.items() if v is None}
    known = {k: v for k, v in values.items() if v is not None}
    return [render(r, **known) for r in remedies if not unfit & _placeholders(r)]


def _placeholders(text: str) -> set[str]:
    try:
        return {name for _, name, _, _ in string.Formatter().parse(text) if name}
    except ValueError:  # a literal brace (`awk '{print}'`): no placeholders
        return set()


def render(text: str, **values: Any) -> str:
    """Fill ``{mem_up}``-style placeholders; unknown ones render as a generic phrase."""

    class _D(dict):
        def __missing__(self, key: str) -> str:
            return {
                "mem_up": "+0.05 over the current value",
                "mem_down": "-0.05 under the current value",
                "cause": "see the error",
                "killer": "",
            }.get(key, "")

    try:
        return text.format_map(_D(values))
    except (ValueError, IndexError):
        return text


def catalog_rows() -> list[dict[str, Any]]:
    """The catalog as plain rows (for docs and `--json`)."""
    return [
        {
            "id": e["id"],
            "phase": e.get("phase"),
            "hung": e.get("hung", False),
            "patterns": e["patterns"],
            "explanation": e["explanation"],
            "remedies": e["remedies"],
        }
        for e in CATALOG
    ]
