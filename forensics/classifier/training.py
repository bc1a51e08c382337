"""Training the model on the corpus and the user's labels, with calibration."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from forensics.classifier.corpus import CORPUS, corpus_digest, corpus_examples
from forensics.classifier.features import features
from forensics.classifier.model import Model, _fit
from forensics.classifier.modelstore import _MODEL_CACHE, _cache_key, save_model
from forensics.classifier.stored import _labeled_runs


def _temperature(p_logits, y_idx) -> float:
    """One temperature that minimises the log loss of held-out predictions (calibration)."""
    import numpy as np

    best_t, best_l = 1.0, float("inf")
    for t in np.linspace(0.3, 4.0, 38):
        z = p_logits / t
        z = z - z.max(axis=1, keepdims=True)
        lp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        loss = -lp[np.arange(len(y_idx)), y_idx].mean()
        if loss < best_l:
            best_t, best_l = float(t), loss
    return best_t


def train(
    store=None, *, corpus: Path = CORPUS, include_labels: bool = True, save: bool = True
) -> Model:
    """Fit the model on the corpus (+ the store's labels); calibrate; cache as JSON."""
    ex = corpus_examples(corpus)
    docs = [features(a) for _, a in ex]
    y = [r["phase"] for r, _ in ex]
    n_user = 0
    if store is not None and include_labels:
        for a, phase in _labeled_runs(store):
            docs.append(features(a))
            y.append(phase)
            n_user += 1
    model = _fit(docs, y)
    # calibration: a temperature fitted on grouped cross-validated logits
    fams = [r.get("family", r["file"]) for r, _ in ex] + [f"user{i}" for i in range(n_user)]
    logits, yi = _cv_logits(docs, y, fams, model.classes)
    if logits is not None:
        model.data["temperature"] = _temperature(logits, yi)
    model.data["digest"] = corpus_digest(corpus)
    model.data["n_examples"] = len(y)
    model.data["n_user_labels"] = n_user
    model.data["trained_at"] = dt.datetime.now().isoformat(timespec="seconds")
    if store is not None and save:
        save_model(store, model)
    _MODEL_CACHE[_cache_key(store)] = model
    return model


def _cv_logits(docs, y, groups, classes, k: int = 5):
    import numpy as np
    from sklearn.model_selection import GroupKFold

    uniq = sorted(set(groups))
    if len(uniq) < k:
        return None, None
    logits = np.zeros((len(y), len(classes)))
    for tr, te in GroupKFold(n_splits=k).split(docs, y, groups):
        m = _fit([docs[i] for i in tr], [y[i] for i in tr])
        if m.classes != classes:
            return None, None
        m.data["temperature"] = 1.0
        p = m.proba([docs[i] for i in te])
        logits[te] = np.log(np.clip(p, 1e-12, 1))
    yi = np.array([classes.index(c) for c in y])
    return logits, yi
