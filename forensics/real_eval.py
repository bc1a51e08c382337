"""Score the classifier on a labelled folder of real logs (``forensics classify eval --real DIR``).

The folder holds ``<id>.log`` files and a ``labels.csv`` in the format of the development corpus
(``../shared/real-logs-dev/``): at least the columns ``id``, ``phase6`` (the phase the run failed
in, or ``ok``) and ``decidable`` (``yes`` when the excerpt's own text decides it); ``source_url``
gives the group (the issue thread or the repository) that cross-validation keeps together.

The classifier is never trained on such a folder (its model learns only from
``forensics/data/corpus`` and your ``forensics label``s), so every file is scored directly: no
figure here comes from a file that was trained on.

Figures: accuracy (all excerpts and the decidable ones), macro-F1 over the six phases on the
decidable excerpts (averaged over every phase that is true or predicted there), the share of
all excerpts that are wrong with confidence >= 0.8, the expected calibration error (10 bins)
with its reliability table, how ``decided`` agrees with ``decidable``, and one row per file.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

from forensics import classifier
from forensics.errors import InputNotFound, UsageError

PHASES = classifier.PHASES
CONFIDENT = 0.8  # "wrong with confidence >= 0.8" is the costly kind of mistake
BINS = 10
REQUIRED = ("id", "phase6", "decidable")

# source_url -> group: an issue/PR thread is one group, a repository's committed files another
_GROUP_RX = [
    re.compile(r"^https?://github\.com/(?P<g>[^/]+/[^/]+/(?:issues|pull|discussions)/\d+)"),
    re.compile(r"^https?://github\.com/(?P<g>[^/]+/[^/#?]+)"),
    re.compile(r"^https?://(?P<g>[^/]+/[^/#?]+)"),
]


def group_of(source_url: str, fallback: str) -> str:
    """The group a labelled excerpt belongs to (its thread or repository)."""
    for rx in _GROUP_RX:
        m = rx.match((source_url or "").strip())
        if m:
            return m["g"].lower()
    return fallback


def _require_folder(typed: str) -> None:
    """``typed`` (as the user typed it) is a folder: missing is exit 3; a file, FIFO, device,
    symlink loop or ``file/`` is exit 2 naming what it is (the one stat and the one table of
    file kinds; it said "no such folder", exit 3, for all of them: issue 14, sixth round)."""
    from forensics.errors import FileMissing
    from forensics.hosts.base import KIND_TEXT
    from forensics.hosts.local import LocalHost

    hint = "give a folder holding labels.csv and <id>.log files"
    try:
        st = LocalHost().stat(typed)
    except FileMissing:
        raise InputNotFound(f"{typed}: no such folder", hint=hint) from None
    if st.kind != "dir":
        raise UsageError(f"{typed}: is {KIND_TEXT.get(st.kind, st.kind)}, not a folder", hint=hint)


def read_labels(folder: str | Path) -> list[dict[str, str]]:
    _require_folder(str(folder))
    folder = Path(folder)
    path = folder / "labels.csv"
    if not path.is_file():
        raise InputNotFound(
            f"{path}: no labels.csv in the folder",
            hint="the folder needs labels.csv (id, phase6, decidable, source_url) beside the logs",
        )
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UsageError(f"{path}: unreadable ({exc})", hint="a UTF-8 CSV file") from None
    cols = set(rows[0]) if rows else set()
    missing = [c for c in REQUIRED if c not in cols]
    if missing:
        raise UsageError(
            f"{path}: missing column(s) {', '.join(missing)}",
            hint="columns id, phase6, decidable (and source_url for the groups)",
        )
    for r in rows:
        if r["phase6"] not in PHASES:
            raise UsageError(
                f"{path}: id {r['id']}: phase6 {r['phase6']!r} is not a phase",
                hint="one of " + ", ".join(PHASES),
            )
    return rows


def file_verdict(vs: list[classifier.Verdict]) -> classifier.Verdict:
    """The verdict a labelled file is scored by: its last failed run, else its last run."""
    failed = [v for v in vs if v.phase != "ok"]
    return failed[-1] if failed else vs[-1]


def _f1(y: list[str], p: list[str]) -> tuple[float, dict[str, dict[str, Any]]]:
    per = classifier.per_phase(y, p)
    macro = sum(m["f1"] for m in per.values()) / len(per) if per else 0.0
    return round(macro, 3), per


def reliability(conf: list[float], correct: list[bool], bins: int = BINS) -> list[dict[str, Any]]:
    out = []
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        idx = [i for i, c in enumerate(conf) if lo < c <= hi or (b == 0 and c <= 0)]
        if not idx:
            continue
        out.append(
            {
                "bin": f"{lo:.1f}-{hi:.1f}",
                "n": len(idx),
                "confidence": round(sum(conf[i] for i in idx) / len(idx), 3),
                "accuracy": round(sum(correct[i] for i in idx) / len(idx), 3),
            }
        )
    return out


def ece(conf: list[float], correct: list[bool], bins: int = BINS) -> float:
    n = len(conf)
    if not n:
        return 0.0
    return round(
        sum(r["n"] / n * abs(r["accuracy"] - r["confidence"]) for r in reliability(conf, correct)),
        3,
    )


def basis_accuracy(files: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per basis (what placed the verdict): n, right, mean confidence."""
    out: dict[str, dict[str, Any]] = {}
    for f in files:
        b = out.setdefault(f["basis"], {"n": 0, "right": 0, "confidence": 0.0})
        b["n"] += 1
        b["right"] += f["right"]
        b["confidence"] += f["confidence"]
    for b in out.values():
        b["confidence"] = round(b["confidence"] / b["n"], 3)
    return dict(sorted(out.items()))


def cv_basis_confidence(files: list[dict[str, Any]], k: float = 2.0) -> list[float]:
    """Each file's confidence if the basis table were fitted on the other groups only (grouped
    cross-validation): the accuracy of its basis there, shrunk towards the table's value with
    weight ``k``. Its ECE says how well confidences fitted on real logs would carry over."""
    out = []
    for f in files:
        others = [o for o in files if o["basis"] == f["basis"] and o["group"] != f["group"]]
        prior = classifier.BASIS_CONFIDENCE.get(f["basis"], f["confidence"])
        out.append((sum(o["right"] for o in others) + k * prior) / (len(others) + k))
    return out


def evaluate_real(folder: str | Path, model: classifier.Model | None = None) -> dict[str, Any]:
    """Score every labelled file of ``folder`` (see the module docstring for the figures)."""
    rows = read_labels(folder)  # the path as typed (`x.log/` is no folder)
    folder = Path(folder)
    if model is None:
        model = classifier.load_model(None)
    files = []
    for r in rows:
        path = folder / f"{r['id']}.log"
        if not path.is_file():
            raise InputNotFound(
                f"{path}: labelled in labels.csv but not in the folder",
                hint="add the file or drop its row from labels.csv",
            )
        v = file_verdict(classifier.classify_file(path, model))
        files.append(
            {
                "id": r["id"],
                "group": group_of(r.get("source_url", ""), r["id"]),
                "label": r["phase6"],
                "decidable": (r.get("decidable") or "").strip().lower() == "yes",
                "phase": v.phase,
                "confidence": round(v.confidence, 3),
                "decided": bool(getattr(v, "decided", True)),
                "basis": getattr(v, "basis", ""),
                "signature": v.signature,
                "right": v.phase == r["phase6"],
            }
        )
    dec = [f for f in files if f["decidable"]]
    macro, per = _f1([f["label"] for f in dec], [f["phase"] for f in dec])
    conf = [f["confidence"] for f in files]
    right = [f["right"] for f in files]
    n = len(files)
    confident_wrong = [f["id"] for f in files if not f["right"] and f["confidence"] >= CONFIDENT]
    agree = sum(1 for f in files if f["decided"] == f["decidable"])
    cv_conf = cv_basis_confidence(files)
    return {
        "folder": str(folder),
        "n": n,
        "groups": len({f["group"] for f in files}),
        "trained_on_folder": False,
        "scoring": "direct: the classifier is not trained on this folder",
        "n_decidable": len(dec),
        "macro_f1_decidable": macro,
        "per_phase_decidable": per,
        "accuracy": round(sum(right) / n, 3) if n else 0.0,
        "accuracy_decidable": round(sum(f["right"] for f in dec) / len(dec), 3) if dec else 0.0,
        "confident_wrong": confident_wrong,
        "confident_wrong_share": round(len(confident_wrong) / n, 3) if n else 0.0,
        "ece": ece(conf, right),
        "reliability": reliability(conf, right),
        "ece_cv_basis": ece(cv_conf, right),
        "basis_accuracy": basis_accuracy(files),
        "decided_agrees_with_decidable": round(agree / n, 3) if n else 0.0,
        "files": files,
    }


def render(r: dict[str, Any]) -> list[str]:
    """The report for people (the CLI prints these lines)."""
    out = [
        f"{r['folder']}: {r['n']} labelled excerpts in {r['groups']} groups ({r['scoring']})",
        f"macro-F1 over the six phases, decidable excerpts (n={r['n_decidable']}): "
        f"{r['macro_f1_decidable']:.3f}",
        f"accuracy: {r['accuracy']:.3f} of all, {r['accuracy_decidable']:.3f} of the decidable",
        f"wrong with confidence >= {CONFIDENT}: {len(r['confident_wrong'])} of {r['n']} "
        f"({r['confident_wrong_share']:.1%})"
        + (f": {', '.join(r['confident_wrong'])}" if r["confident_wrong"] else ""),
        f"calibration: ECE {r['ece']:.3f} (basis confidences fitted by grouped CV: "
        f"{r['ece_cv_basis']:.3f}); decided agrees with decidable on "
        f"{r['decided_agrees_with_decidable']:.1%}",
        f"  {'phase':<9} {'prec':>6} {'recall':>6} {'F1':>6} {'n':>4}",
    ]
    for ph, m in r["per_phase_decidable"].items():
        out.append(f"  {ph:<9} {m['precision']:>6} {m['recall']:>6} {m['f1']:>6} {m['support']:>4}")
    out.append("  basis: n, right, mean confidence")
    for b, m in r["basis_accuracy"].items():
        out.append(f"  {b:>14} {m['n']:>4} {m['right']:>4} {m['confidence']:>6.3f}")
    out.append("  reliability: confidence bin, n, mean confidence, accuracy")
    for b in r["reliability"]:
        out.append(f"  {b['bin']:>9} {b['n']:>4} {b['confidence']:>6.3f} {b['accuracy']:>6.3f}")
    wrong = [f for f in r["files"] if not f["right"]]
    if wrong:
        out.append(f"  wrong ({len(wrong)}): id label -> verdict (confidence, decided)")
        for f in wrong:
            out.append(
                f"    {f['id']} {f['label']} -> {f['phase']} ({f['confidence']:.2f}, "
                f"{'decided' if f['decided'] else 'undecided'})"
            )
    return out
