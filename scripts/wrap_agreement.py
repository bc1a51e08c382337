"""How many wrapped or prefixed variants of the fixtures parse exactly like the plain fixture.

    python scripts/wrap_agreement.py

Each fixture log is rewritten the way collectors store logs (Docker json-file, Loki JSON,
markdown quote and 4-space indent, kubectl / log-aggregator / docker compose / torchrun
prefixes, lone-CR line endings) and parsed; a variant agrees when every frame (text
included) and every count equals the plain fixture's. Figures are in docs/log-formats.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def canon(f) -> dict:
    out = {}
    for name, df in f.tables().items():
        if name != "runs" and not df.is_empty():
            df = df.sort(["line", *[c for c in df.columns if c != "line"]], nulls_last=True)
        out[name] = df.to_dicts()
    out["counts"] = dict(f.counts)
    return out


VARIANTS = {
    "docker": lambda i, s: json.dumps({"log": s + "\n", "stream": "stdout", "time": "t"}),
    "loki": lambda i, s: json.dumps({"line": s, "ts": "1"}),
    "quote": lambda i, s: "> " + s,
    "indent": lambda i, s: "    " + s,
    "kubectl": lambda i, s: f"2026-04-12T21:16:41.{i:09d}Z " + s,
    "compose": lambda i, s: "sglang-1  | " + s,
    "aggregator": lambda i, s: f"May 16, 2026 @ 20:44:{i % 60:02d}.728    " + s,
    "torchrun": lambda i, s: "[rank0]: " + s,
}


def main() -> int:
    from forensics_parsers.sglang import parse_bytes

    ok = total = 0
    by: dict[str, list[int]] = {}
    for path in sorted((ROOT / "fixtures").glob("*.log")):
        if path.name in ("binary.log", "empty.log"):
            continue
        data = path.read_bytes()
        want = canon(parse_bytes(data, "x.log"))
        text = data.decode()
        lines = text.split("\n")
        if lines[-1] == "":
            lines = lines[:-1]
        variants = {
            k: "".join(v(i, s) + "\n" for i, s in enumerate(lines)) for k, v in VARIANTS.items()
        }
        if "\r" not in text:
            variants["lone-cr"] = "".join(s + "\r" for s in lines)
        for k, v in variants.items():
            same = canon(parse_bytes(v.encode(), "x.log")) == want
            by.setdefault(k, [0, 0])
            by[k][0] += same
            by[k][1] += 1
            ok += same
            total += 1
    print("| variant | agree |\n| --- | --- |")
    for k, (a, n) in by.items():
        print(f"| {k} | {a}/{n} |")
    print(f"| all | {ok}/{total} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
