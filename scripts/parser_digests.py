"""Golden digests of the SGLang parser's output: any change to what it reads is deliberate.

    python scripts/parser_digests.py            # compare with fixtures/golden/parser-digests.json
    python scripts/parser_digests.py --write    # regenerate it (after a deliberate, explained fix)

For every log of the repository (fixtures/**, the classifier corpus) and every file of the
real-log corpus (``scripts.real_fields.corpus_dir``), the file is read as ingest reads it
(``forensics.logsource``: decompressed, decoded), parsed whole (``parse_bytes``), and each
table of the frames is hashed: its schema (column names and types, sorted by name) and its rows
(columns in name order, values canonical: timestamps ISO, floats ``repr``, sorted by their
canonical text so a reordering of equal content does not count), plus the line counts by kind
and the parser's counters. Only hashes are stored: no text of a real log enters the repository.
The test is tests/test_parser_golden.py.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "fixtures" / "golden" / "parser-digests.json"
REPO_LOGS = (
    (ROOT / "fixtures", "fixtures"),
    (ROOT / "forensics" / "data" / "corpus", "corpus"),
)


def _canon(v: Any) -> Any:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else repr(v)
    if isinstance(v, list | tuple):
        return [_canon(x) for x in v]
    if v is None or isinstance(v, bool | int | str):
        return v
    return v.isoformat() if hasattr(v, "isoformat") else str(v)


def table_digest(df: Any) -> str:
    cols = sorted(df.columns)
    h = hashlib.sha256()
    h.update(json.dumps([(c, str(df.schema[c])) for c in cols]).encode())
    rows = sorted(
        json.dumps([_canon(v) for v in row], ensure_ascii=False)
        for row in df.select(cols).iter_rows()
    )
    for r in rows:
        h.update(r.encode())
        h.update(b"\n")
    return h.hexdigest()[:20]


def frames_digests(frames: Any) -> dict[str, str]:
    out = {name: table_digest(df) for name, df in frames.tables().items()}
    meta = json.dumps({"counts": frames.counts, "stats": frames.stats}, sort_keys=True)
    out["counts"] = hashlib.sha256(meta.encode()).hexdigest()[:20]
    return out


def _read(path: Path) -> bytes | None:
    """The bytes ingest would parse, or None for a file ingest refuses (a binary)."""
    from forensics.errors import ForensicsError
    from forensics.hosts import LocalHost
    from forensics.logsource import open_log

    try:
        return b"".join(open_log(LocalHost(), str(path)).chunks())
    except ForensicsError:
        return None


def repo_logs() -> Iterator[tuple[str, Path]]:
    for base, label in REPO_LOGS:
        for p in sorted(base.rglob("*")):
            if p.is_file() and (p.suffix == ".log" or p.name.endswith(".log.gz")):
                yield f"{label}/{p.relative_to(base).as_posix()}", p


def real_logs(root: Path) -> Iterator[tuple[str, Path]]:
    for p in sorted(root.glob("*.log")):
        yield p.name, p


def digests(files: Iterator[tuple[str, Path]]) -> dict[str, dict[str, str]]:
    from forensics_parsers.sglang import parse_bytes

    out = {}
    for key, path in files:
        data = _read(path)
        out[key] = (
            {"refused": "1"} if data is None else frames_digests(parse_bytes(data, path.name))
        )
    return out


def generated_logs(tmp: Path) -> Iterator[tuple[str, Path]]:
    """The benchmark's line mixes (scripts/bench_ingest.py), 2 MB each, its fixed seed."""
    from scripts.bench_ingest import MIXES, generate

    for mix in MIXES:
        path = tmp / f"bench-{mix}.log"
        generate(path, 2, mix)
        yield f"bench-{mix}-2mb", path


def compute(real_root: Path | None) -> dict[str, dict[str, dict[str, str]]]:
    import tempfile

    res = {"repo": digests(repo_logs())}
    with tempfile.TemporaryDirectory() as tmp:
        res["generated"] = digests(generated_logs(Path(tmp)))
    if real_root is not None:
        res["real"] = digests(real_logs(real_root))
    return res


def diff(want: dict[str, dict[str, str]], got: dict[str, dict[str, str]]) -> list[str]:
    """Readable differences: files added/missing, and per file the tables that changed."""
    out = [f"{k}: not in the golden file" for k in sorted(set(got) - set(want))]
    out += [f"{k}: no longer parsed" for k in sorted(set(want) - set(got))]
    for k in sorted(set(want) & set(got)):
        changed = [t for t in sorted(set(want[k]) | set(got[k])) if want[k].get(t) != got[k].get(t)]
        if changed:
            out.append(f"{k}: {', '.join(changed)} changed")
    return out


def dump(res: dict[str, dict[str, dict[str, str]]]) -> str:
    """The golden file's text: one line per file, so a diff shows which files changed."""
    parts = []
    for part in sorted(res):
        rows = [
            f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}"
            for k, v in sorted(res[part].items())
        ]
        parts.append(f" {json.dumps(part)}: {{\n" + ",\n".join(rows) + "\n }")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    from scripts.real_fields import corpus_dir

    real = corpus_dir()
    got = compute(real)
    if "--write" in argv:
        if real is None:
            print("real-log corpus not found: refusing to write digests without it")
            return 1
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(dump(got))
        print(f"wrote {GOLDEN.relative_to(ROOT)}: {sum(map(len, got.values()))} files")
        return 0
    want = json.loads(GOLDEN.read_text())
    problems = [f"{part}/{d}" for part in got for d in diff(want[part], got[part])]
    print("\n".join(problems) or f"identical: {sum(map(len, got.values()))} files")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
