"""Pathological SGLang logs for issue 14's "bounded everything" class (memory and time).

    python -m scripts.gen_pathological KIND OUT [--mb N] [--count N]

Each KIND writes a log that stresses one shape; none is committed (the tests use small-scale
versions of the same generators). Measure with, e.g.::

    FORENSICS_HOME=$(mktemp -d) /usr/bin/time -f '%e s %U+%S cpu %M KB' forensics ingest OUT
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from pathlib import Path

HEAD = (
    "[2025-10-24 16:20:00] server_args=ServerArgs(model_path='/models/m', tp_size=8, "
    "port=30000, mem_fraction_static=0.85)\n"
    "[2025-10-24 16:20:02 TP0] Init torch distributed begin.\n"
    "[2025-10-24 16:20:04 TP0] Load weight begin. avail mem=138.44 GB\n"
)
TS = "[2025-10-24 16:24:{s:02d} TP0] "
DECODE = (
    "Decode batch, #running-req: 1, #token: {t}, token usage: 0.00, accept len: 2.40, "
    "accept rate: 0.48, cuda graph: True, gen throughput (token/s): 80.65, #queue-req: 0, "
)


def wide_decode(fields: int = 4_000) -> Iterator[str]:
    """`Decode batch` lines of `fields` extra `key: value` fields each (~60 KB a line)."""
    extra = ", ".join(f"custom metric {k:04d}: {k * 0.5}" for k in range(fields))
    i = 0
    while True:
        yield TS.format(s=i % 60) + DECODE.format(t=i) + extra + ", \n"
        i += 1


def restarts(_: int = 0) -> Iterator[str]:
    """A server restarted in a loop: a launch (server_args + two stage lines) over and over."""
    while True:
        yield HEAD


def long_line(_: int = 0) -> Iterator[str]:
    """One line without a newline: the whole file (yields pieces of it)."""
    piece = "x" * (1 << 20)
    yield "[2025-10-24 16:20:00 TP0] "
    while True:
        yield piece


def tiny_warnings(_: int = 0) -> Iterator[str]:
    """Millions of short WARNING lines."""
    i = 0
    while True:
        yield f"[2025-10-24 16:20:{i % 60:02d} TP0] WARNING w{i % 10}\n"
        i += 1


def deep_traceback(_: int = 0) -> Iterator[str]:
    """One traceback of (about) a million frames, ended by its exception line only at the end
    of the file (the generator is cut by size; `--count` frames then the exception)."""
    yield HEAD + "Traceback (most recent call last):\n"
    i = 0
    while True:
        yield f'  File "/usr/lib/python3/m{i % 97}.py", line {i % 1000}, in f{i % 13}\n    g()\n'
        i += 1


def huge_server_args(_: int = 0) -> Iterator[str]:
    """A server_args line of many MB (one launch whose arguments never end)."""
    yield "[2025-10-24 16:20:00] server_args=ServerArgs(model_path='/models/m', "
    i = 0
    while True:
        yield f"opt_{i}='{'v' * 40}', "
        i += 1


def distinct_unknown(_: int = 0) -> Iterator[str]:
    """Millions of distinct lines no rule knows."""
    yield HEAD
    i = 0
    while True:
        yield f"[2025-10-24 16:20:{i % 60:02d} TP0] thing {i} happened to unit {i * 7919}\n"
        i += 1


def many_ranks(ranks: int = 1_024) -> Iterator[str]:
    """Decode lines of TP0..TP{ranks-1} (each rank its own series)."""
    yield HEAD
    i = 0
    while True:
        yield f"[2025-10-24 16:24:{i % 60:02d} TP{i % ranks}] " + DECODE.format(t=i) + "\n"
        i += 1


KINDS: dict[str, Callable[..., Iterator[str]]] = {
    f.__name__.replace("_", "-"): f
    for f in (
        wide_decode,
        restarts,
        long_line,
        tiny_warnings,
        deep_traceback,
        huge_server_args,
        distinct_unknown,
        many_ranks,
    )
}


def generate(kind: str, out: Path, mb: float = 20.0, count: int | None = None) -> int:
    """Write `kind` to `out` until `mb` MB (or `count` items of the generator); bytes written."""
    gen = KINDS[kind]() if kind not in ("wide-decode", "many-ranks") else KINDS[kind](*(
        [count] if count else []))  # fmt: skip
    limit = int(mb * (1 << 20))
    n = written = 0
    with out.open("w", encoding="utf-8") as f:
        buf: list[str] = []
        size = 0
        for piece in gen:
            buf.append(piece)
            size += len(piece)
            n += 1
            if size >= 1 << 20:
                f.write("".join(buf))
                written += size
                buf, size = [], 0
            if written + size >= limit or (
                count and kind not in ("wide-decode", "many-ranks") and n > count
            ):
                break
        f.write("".join(buf))
        written += size
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=sorted(KINDS))
    ap.add_argument("out", type=Path)
    ap.add_argument("--mb", type=float, default=20.0, help="size to stop at (MB)")
    ap.add_argument(
        "--count",
        type=int,
        help="pieces to stop at (launches, lines); fields/ranks for wide-decode/many-ranks",
    )
    a = ap.parse_args()
    print(a.out, generate(a.kind, a.out, a.mb, a.count), "bytes")


if __name__ == "__main__":
    main()
