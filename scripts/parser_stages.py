"""Where the SGLang parser's CPU time goes, stage by stage (docs/performance.md).

    python scripts/parser_stages.py FILE [--python]   # --python: LogParser(bulk=False)

Feeds FILE in 4 MiB chunks as ingest does (``feed_split`` in this thread, ``extract_batch``
after it) twice, and prints the CPU time (``time.process_time``: every thread of the process,
so polars' own threads count) of the second pass, in total and per stage. The stages are
measured by wrapping the parser's step functions; nested stages are inside their parent's
figure. A benchmark file: ``python scripts/bench_ingest.py --keep --no-remote`` keeps
bench-out/bench_busy_100mb.log.
"""

from __future__ import annotations

import collections
import sys
import time
from collections.abc import Callable
from typing import Any

from forensics_parsers.sglang import LogParser, bulk, extract_batch, metrics, native, parser, runs

CHUNK = 4 << 20
STAGES: list[tuple[Any, str, str]] = [
    (parser.LogParser, "split_lines", "split_lines (ingest: the reading thread)"),
    (native, "scan", "· compiled line reader (native.py; None: absent or off)"),
    (parser, "chunk_lines", "· split at LF (polars' CSV reader or decode + split)"),
    (parser.LogParser, "_lines_of", "· lines frame (split, secrets, metrics test)"),
    (parser, "redact_lines", "· · secrets redaction"),
    (metrics, "read_heads", "· metrics lines: kind, head, timestamp"),
    (parser.LogParser, "feed_lines", "feed_lines (ingest: the parser's thread)"),
    (bulk, "split", "· bulk lines classified in polars"),
    (bulk, "gaps", "· bulk lines between the rare ones"),
    (parser.LogParser, "_python_lines_between", "· rare lines through the rule table (Python)"),
    (parser.LogParser, "_python_lines", "· rare lines through the rule table (Python)"),
    (parser.LogParser, "_after_python", "· bulk lines' effect (runs, counts, order)"),
    (bulk, "disorder", "· · timestamp order"),
    (metrics, "prepare", "· metrics lines: their runs"),
    (bulk, "lines_frame", "· `lines` frame"),
    (runs, "runs_frame", "· `runs` frame"),
]


def _timed(f: Callable, label: str, acc: collections.Counter) -> Callable:
    def g(*a: Any, **k: Any) -> Any:
        t = time.process_time()
        try:
            return f(*a, **k)
        finally:
            acc[label] += time.process_time() - t

    return g


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    use_bulk = "--python" not in argv
    acc: collections.Counter = collections.Counter()
    for obj, name, label in STAGES:
        setattr(obj, name, _timed(getattr(obj, name), label, acc))
    for _ in range(2):
        acc.clear()
        p = LogParser(argv[0], date_hint="2026-11-01", bulk=use_bulk)
        feed = ext = 0.0
        size = 0
        with open(argv[0], "rb") as f:  # chunk by chunk: memory bounded by the chunk
            chunks = iter(lambda: f.read(CHUNK), b"")
            for chunk in chunks:
                size += len(chunk)
                t0 = time.process_time()
                _, prepared = p.feed_split(chunk)  # = feed_lines(split_lines(chunk))
                t1 = time.process_time()
                extract_batch(prepared)
                feed, ext = feed + t1 - t0, ext + time.process_time() - t1
        p.finish()
    mb = size / (1 << 20)
    print(f"{argv[0]}: {mb:.0f} MB, bulk={'on' if use_bulk else 'off'}; CPU seconds:")
    print(f"  feed_split                                    {feed:6.3f}")
    for label, v in acc.items():
        print(f"    {label:44s} {v:6.3f}")
    print(f"  extract_batch (metrics fields: ingest's worker) {ext:6.3f}")
    print(f"  total                                         {feed + ext:6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
