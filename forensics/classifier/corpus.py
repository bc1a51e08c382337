"""The labeled training corpus (package data), its digest, and parsing a log into analyses."""

from __future__ import annotations

import csv
import hashlib
import sys
from pathlib import Path

import polars as pl

import forensics_parsers.sglang as sglang_parser
from forensics import frames as frames_table
from forensics import signatures as sigs
from forensics.classifier.analysis import analyze
from forensics.classifier.model import MODEL_VERSION
from forensics.classifier.records import Analysis
from forensics.errors import InputNotFound

CORPUS = (
    Path(__file__).resolve().parents[1] / "data" / "corpus"
)  # package data: the labeled training set


LABELS_CSV = CORPUS / "labels.csv"


def corpus_rows(corpus: Path = CORPUS) -> list[dict[str, str]]:
    path = corpus / "labels.csv"
    if not path.exists():
        raise InputNotFound(
            f"{path}: the labeled corpus is missing", hint="python scripts/gen_corpus.py"
        )
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _source_files(module) -> list[Path]:
    """The source files of a module: the file, or every *.py of its package (sorted)."""
    path = Path(module.__file__)
    if path.name != "__init__.py":
        return [path]
    return sorted(path.parent.rglob("*.py"), key=lambda p: p.relative_to(path.parent).as_posix())


_CODE_DIGEST: list[bytes] = []


def _code_digest() -> bytes:
    """One hash of the code a model's features depend on (computed once per process)."""
    if not _CODE_DIGEST:
        h = hashlib.sha1()
        # the classifier (module or package), the catalog, the frames table, and the parser
        # whose frames the features come from
        for module in (sys.modules[__package__], sigs, frames_table, sglang_parser):
            top = Path(module.__file__).parent
            for f in _source_files(module):
                h.update(f.relative_to(top).as_posix().encode() + b"\0")
                h.update(f.read_bytes())
        _CODE_DIGEST.append(h.digest())
    return _CODE_DIGEST[0]


def corpus_digest(corpus: Path = CORPUS) -> str:
    h = hashlib.sha1()
    h.update(str(MODEL_VERSION).encode())
    h.update(_code_digest())
    h.update((corpus / "labels.csv").read_bytes())
    return h.hexdigest()[:16]


def parse_path(path: Path | str):
    """All frames of a log file (a whole parse, through forensics.logsource)."""
    from forensics.hosts import get_host
    from forensics.logsource import open_log
    from forensics_parsers.sglang import Frames, LogParser

    src = open_log(get_host(None), str(path))
    parser = LogParser(src.where)
    parts = [parser.feed(chunk) for chunk in src.chunks()]
    return Frames.concat([*parts, parser.finish()])


def _tables(frames) -> dict[str, pl.DataFrame]:
    return frames.tables()


def analyses_for(frames, path: str, mtime: float | None = None) -> list[Analysis]:
    tables = _tables(frames)
    runs = tables["runs"]
    idx = sorted(set(runs["run_index"].to_list())) if not runs.is_empty() else []
    if not idx:
        idx = [0]
    return [analyze(tables, i, path=path, mtime=mtime) for i in idx]


_CORPUS_CACHE: dict[str, list[tuple[dict[str, str], Analysis]]] = {}


def corpus_examples(corpus: Path = CORPUS) -> list[tuple[dict[str, str], Analysis]]:
    key = str(corpus) + ":" + corpus_digest(corpus)
    if key in _CORPUS_CACHE:
        return _CORPUS_CACHE[key]
    out = []
    for row in corpus_rows(corpus):
        frames = parse_path(corpus / row["file"])
        ans = analyses_for(frames, row["file"])
        ri = int(row.get("run_index") or 0)
        a = next((x for x in ans if x.run_index == ri), ans[-1])
        out.append((row, a))
    _CORPUS_CACHE[key] = out
    return out
