"""The compiled line reader's own CPU time (parsers/sglang/_linescan.c; docs/performance.md).

    python scripts/bench_linescan.py FILE [--reps N] [--so PATH]

Cuts FILE into 4 MiB chunks at line ends (as ingest feeds them), then calls the C ``scan`` on
every chunk, ``N`` times over (default 5), and prints the least CPU time of a pass: the C
pass and its Arrow export, none of native.py's Python. ``--so``: another build of the module
(e.g. main's, for old against new in one session), configured from this checkout's tables.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from typing import Any

from forensics_parsers.sglang import native

CHUNK = 4 << 20


def load(path: str | None) -> Any:
    """This checkout's module, or the build at ``path`` (configured as native.py does)."""
    if path is None:
        return native._linescan
    spec = importlib.util.spec_from_file_location("forensics_parsers.sglang._linescan", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    native._configure(mod)
    tables = native.bulk_tables()
    if tables is not None:
        mod.configure_bulk(native.BULK_MAX_LINE, *tables, [r.name for r in native.SHAPED])
    return mod


def chunks(data: bytes) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        j = data.rfind(b"\n", i, i + CHUNK) if i + CHUNK < len(data) else len(data) - 1
        j = j if j >= i else min(i + CHUNK, len(data)) - 1
        out.append(data[i : j + 1])
        i = j + 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--so", help="another build of _linescan")
    args = ap.parse_args()
    mod = load(args.so)
    if mod is None:
        raise SystemExit("bench_linescan: the compiled reader is not built (make venv)")
    with open(args.file, "rb") as f:
        parts = chunks(f.read())
    best = float("inf")
    for _ in range(args.reps):
        t0 = time.process_time()
        for part in parts:
            got = mod.scan(part, 1)
            del got  # (the tables freed with their capsules, inside the pass)
        best = min(best, time.process_time() - t0)
    print(f"{args.file}: scan CPU, best of {args.reps}: {best:.4f} s ({len(parts)} chunks)")


if __name__ == "__main__":
    main()
