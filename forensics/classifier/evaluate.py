"""Evaluation: held-out families, grouped cross-validation, per-phase figures."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from forensics.classifier.corpus import CORPUS, corpus_examples
from forensics.classifier.features import features
from forensics.classifier.model import Model, _fit
from forensics.classifier.phases import PHASES
from forensics.classifier.records import Analysis
from forensics.classifier.training import _cv_logits, _temperature
from forensics.classifier.verdict import Verdict, verdicts
from forensics.errors import UsageError


def per_phase(y_true: list[str], y_pred: list[str]) -> dict[str, dict[str, Any]]:
    """Precision, recall, F1 and support of every phase seen in ``y_true`` or ``y_pred``."""
    per = {}
    labels = [p for p in PHASES if p in set(y_true) | set(y_pred)]
    for c in labels:
        tp = sum(1 for t, p in zip(y_true, y_pred, strict=True) if t == c and p == c)
        fp = sum(1 for t, p in zip(y_true, y_pred, strict=True) if t != c and p == c)
        fn = sum(1 for t, p in zip(y_true, y_pred, strict=True) if t == c and p != c)
        prec = tp / (tp + fp) if tp + fp else 0.0
        rec = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        per[c] = {
            "precision": round(prec, 3),
            "recall": round(rec, 3),
            "f1": round(f1, 3),
            "support": tp + fn,
        }
    return per


def _scores(y_true: list[str], y_pred: list[str]) -> dict[str, Any]:
    per = per_phase(y_true, y_pred)
    present = [c for c, m in per.items() if m["support"]]
    macro = sum(per[c]["f1"] for c in present) / len(present) if present else 0.0
    confusion = {
        t: {
            p: sum(1 for a, b in zip(y_true, y_pred, strict=True) if a == t and b == p)
            for p in PHASES
        }
        for t in PHASES
        if t in set(y_true)
    }
    acc = sum(1 for t, p in zip(y_true, y_pred, strict=True) if t == p) / max(1, len(y_true))
    return {
        "n": len(y_true),
        "accuracy": round(acc, 3),
        "macro_f1": round(macro, 3),
        "per_phase": per,
        "confusion": confusion,
    }


def _predict(model: Model, items: list[tuple[dict[str, str], Analysis]]) -> list[Verdict]:
    return verdicts([a for _, a in items], model)


def _ece(conf: list[float], correct: list[bool], bins: int = 10) -> float:
    tot = len(conf)
    if not tot:
        return 0.0
    err = 0.0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        idx = [i for i, c in enumerate(conf) if lo < c <= hi or (b == 0 and c == 0)]
        if not idx:
            continue
        acc = sum(correct[i] for i in idx) / len(idx)
        avg = sum(conf[i] for i in idx) / len(idx)
        err += len(idx) / tot * abs(acc - avg)
    return round(err, 3)


def _block(model: Model, items: list[tuple[dict[str, str], Analysis]]) -> dict[str, Any]:
    """The figures of one labelled set under ``model``: scores, hung / signature accuracy, ECE
    and the first mistakes."""
    vs = _predict(model, items)
    y = [r["phase"] for r, _ in items]
    s = _scores(y, [v.phase for v in vs])
    s["rules_only_macro_f1"] = _scores(y, [a.rule_phase or "pre-exec" for _, a in items])[
        "macro_f1"
    ]
    pairs = [(r, v) for (r, _), v in zip(items, vs, strict=True)]
    hung_ok = sum(1 for r, v in pairs if (r["hung"] == "true") == v.hung)
    s["hung_accuracy"] = round(hung_ok / max(1, len(items)), 3)
    sig_items = [(r, v) for r, v in pairs if r.get("signature")]
    sig_ok = sum(1 for r, v in sig_items if _sig_ok(r["signature"], v.signature))
    s["signature_accuracy"] = round(sig_ok / max(1, len(sig_items)), 3)
    s["ece"] = _ece([v.confidence for v in vs], [v.phase == t for v, t in zip(vs, y, strict=True)])
    s["errors"] = [
        {
            "file": r["file"],
            "label": r["phase"],
            "pred": v.phase,
            "signature": v.signature,
            "expected_signature": r.get("signature"),
        }
        for r, v in pairs
        if v.phase != r["phase"]
        or (r.get("signature") and not _sig_ok(r["signature"], v.signature))
    ][:30]
    return s


def _grouped_cv(
    gen: list[tuple[dict[str, str], Analysis]], folds: int, temperature: float
) -> dict[str, Any]:
    """Grouped cross-validation over the generated examples (folds never share a family)."""
    from sklearn.model_selection import GroupKFold

    docs = [features(a) for _, a in gen]
    y = [r["phase"] for r, _ in gen]
    groups = [r["family"] for r, _ in gen]
    pred = [""] * len(gen)
    for tr, te in GroupKFold(n_splits=folds).split(docs, y, groups):
        m = _fit([docs[i] for i in tr], [y[i] for i in tr])
        m.data["temperature"] = temperature
        for i, v in zip(te, verdicts([gen[i][1] for i in te], m), strict=True):
            pred[i] = v.phase
    return {**_scores(y, pred), "folds": folds}


def _check_folds(folds: int, families: set[str]) -> None:
    if folds < 2:
        raise UsageError(
            f"--folds {folds}: cross-validation needs at least 2 folds", hint="--folds 5"
        )
    if folds > len(families):
        raise UsageError(
            f"--folds {folds}: the corpus has only {len(families)} generator families to split",
            hint=f"--folds 2..{len(families)}",
        )


def evaluate(*, corpus: Path = CORPUS, folds: int = 5) -> dict[str, Any]:
    """Held-out figures (split by generator family) and grouped cross-validation."""
    t0 = time.monotonic()
    if folds < 2:
        _check_folds(folds, set())
    ex = corpus_examples(corpus)
    _check_folds(folds, {r["family"] for r, _ in ex if r["split"] != "hand"})
    train_ex = [x for x in ex if x[0]["split"] == "train"]
    test_ex = [x for x in ex if x[0]["split"] == "test"]
    hand_ex = [x for x in ex if x[0]["split"] == "hand"]
    docs = [features(a) for _, a in train_ex]
    fit_t0 = time.monotonic()
    model = _fit(docs, [r["phase"] for r, _ in train_ex])
    fit_s = time.monotonic() - fit_t0
    logits, yi = _cv_logits(
        docs, [r["phase"] for r, _ in train_ex], [r["family"] for r, _ in train_ex], model.classes
    )
    if logits is not None:
        model.data["temperature"] = _temperature(logits, yi)
    report: dict[str, Any] = {
        "examples": len(ex),
        "train": len(train_ex),
        "test": len(test_ex),
        "hand_examples": len(hand_ex),
        "fit_seconds": round(fit_s, 2),
        "heldout": _block(model, test_ex),
    }
    if hand_ex:
        report["hand"] = _block(model, hand_ex)
    gen = [x for x in ex if x[0]["split"] != "hand"]
    report["cv"] = _grouped_cv(gen, folds, model.data["temperature"])
    report["seconds"] = round(time.monotonic() - t0, 1)
    return report


def _sig_ok(expected: str, got: str | None) -> bool:
    if "|" in expected:
        return (got or "") in expected.split("|")
    if expected == "unknown":
        return bool(got and got.startswith("unknown:"))
    return expected == (got or "")
