"""One helper for the parser's wrapper and prefix tests: a fixture re-wrapped line by line (a
transport prefix, a JSON-lines record, a markdown quote) must give exactly its plain frames."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

from forensics_parsers.sglang import Frames, parse_bytes

FIX = Path(__file__).resolve().parent.parent / "fixtures"


def canon(f: Frames, *, zero_counts: bool = True) -> dict:
    """Frames as comparable plain data (row order: by line); counts of 0 kept or dropped."""
    out = {}
    for name, df in f.tables().items():
        if name != "runs" and not df.is_empty():
            df = df.sort(["line", *[c for c in df.columns if c != "line"]], nulls_last=True)
        out[name] = df.to_dicts()
    out["counts"] = {k: v for k, v in f.counts.items() if v or zero_counts}
    return out


def fixture_text(name: str) -> str:
    return (FIX / name).read_bytes().decode()


def fixture_lines(name: str) -> list[str]:
    """The fixture's lines without their newlines (and no empty last one)."""
    text = fixture_text(name)
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def rewrap(name: str, per_line: Callable[[int, str], str]) -> str:
    """The fixture with each line i replaced by per_line(i, line); the final newline kept."""
    ends = fixture_text(name).endswith("\n")
    lines = fixture_lines(name)
    return "\n".join(per_line(i, s) for i, s in enumerate(lines)) + ("\n" if ends else "")


@cache
def _plain(name: str) -> dict:
    return canon(parse_bytes((FIX / name).read_bytes(), "x.log"))


def assert_frames_of_fixture(name: str, wrapped: str) -> None:
    """`wrapped` parses to the frames, fields and counts of the plain fixture, table by table."""
    want, got = _plain(name), canon(parse_bytes(wrapped.encode(), "x.log"))
    for table in want:
        assert got[table] == want[table], table
