"""Re-check the frames -> phase table (forensics/frames/, one module per phase) against SGLang
release wheels.

    pip download --no-deps sglang==0.4.6 -d /tmp/sgl        # one or more versions
    python scripts/check_frames_table.py /tmp/sgl [--fix]

For every row of ``FRAMES`` that names SGLang's own code, the versions whose wheel defines the
function (``def NAME(`` in a .py file under sglang/) or has the file (a path ending in, or
containing, the row's ``file``) are compared with the row's ``seen``, over the versions whose
wheels are in the folder. Exit 1 when a row disagrees (``--fix`` rewrites those ``seen``
strings in the forensics/frames/ module that holds the row). Rows marked "(not SGLang)" are skipped. Wheels are read as
zip files; nothing is installed or imported.
"""

from __future__ import annotations

import argparse
import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from forensics import frames  # noqa: E402

_VERSION = re.compile(r"^sglang-(?P<v>[\w.]+?)-(?:py3|cp\d+)")


def _key(v: str) -> tuple[int, ...]:
    return tuple(int(x) if x.isdigit() else 0 for x in re.split(r"[.]", v))


def wheels(folder: Path) -> dict[str, Path]:
    out = {}
    for p in sorted(folder.rglob("sglang-*.whl")):
        m = _VERSION.match(p.name)
        if m:
            out[m["v"]] = p
    return dict(sorted(out.items(), key=lambda kv: _key(kv[0])))


def index(whl: Path) -> tuple[set[str], list[str]]:
    """(function names defined, .py paths) of one wheel's sglang package."""
    funcs: set[str] = set()
    paths: list[str] = []
    rx = re.compile(r"^\s*(?:async\s+)?def\s+(\w+)\s*\(", re.M)
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if not name.startswith("sglang/") or not name.endswith(".py"):
                continue
            paths.append(name)
            funcs.update(rx.findall(z.read(name).decode("utf-8", "replace")))
    return funcs, paths


def seen_in(row: dict, idx: dict[str, tuple[set[str], list[str]]]) -> list[str]:
    out = []
    for v, (funcs, paths) in idx.items():
        if "func" in row:
            ok = row["func"] in funcs
        else:
            ok = any(row["file"] in "/" + p for p in paths)
        if ok:
            out.append(v)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="folder holding sglang-*.whl (searched recursively)")
    ap.add_argument("--fix", action="store_true", help="rewrite disagreeing seen strings")
    args = ap.parse_args(argv)
    ws = wheels(args.folder)
    if not ws:
        print(
            f"Error: {args.folder}: no sglang-*.whl found (pip download --no-deps sglang==X -d DIR)"
        )
        return 3
    idx = {v: index(p) for v, p in ws.items()}
    checked = list(idx)
    srcs = {p: p.read_text() for p in sorted((ROOT / "forensics" / "frames").glob("*.py"))}
    bad = 0
    for row in frames.FRAMES:
        if "(not SGLang)" in row["where"]:
            continue
        got = seen_in(row, idx)
        have = [v for v in row["seen"].split() if v in checked]
        if got == have:
            continue
        bad += 1
        key = "func" if "func" in row else "file"
        print(
            f"{key} {row[key]}: table says {' '.join(have) or '-'}, wheels say {' '.join(got) or '-'}"
        )
        if args.fix:
            keep = [v for v in row["seen"].split() if v not in checked]
            new = " ".join(sorted(set(keep) | set(got), key=_key))
            pat = re.compile(
                r'(\{\s*"' + key + r'": "' + re.escape(row[key]) + r'",.*?"seen": ")[^"]*(")',
                re.S,
            )
            n = 0
            for p, src in srcs.items():
                srcs[p], k = pat.subn(lambda m, new=new: m.group(1) + new + m.group(2), src, 1)
                n += k
            assert n == 1, row
    if args.fix and bad:
        for p, src in srcs.items():
            p.write_text(src)
    print(f"{len(frames.FRAMES)} rows, {len(checked)} wheels ({' '.join(checked)}): {bad} disagree")
    return 1 if bad and not args.fix else 0


if __name__ == "__main__":
    raise SystemExit(main())
