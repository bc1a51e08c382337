"""The phase model as JSON: predicting in plain Python, fitting with scikit-learn."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from forensics.classifier.phases import PHASES
from forensics.errors import ForensicsError

MODEL_VERSION = 4  # 4: vectorizer settings in the JSON (numpy predictor)


@dataclass
class Model:
    """A trained model as JSON data. Predicting needs neither scikit-learn nor numpy (plain
    Python over the JSON's vocabularies, idf weights and coefficients); scikit-learn only
    trains (``_fit``)."""

    data: dict[str, Any]
    _checked: bool = False
    packaged: bool = False  # read from forensics/data (modelstore.packaged_model), not trained

    @property
    def classes(self) -> list[str]:
        return self.data["classes"]

    def features_of(self, doc: tuple[str, str]) -> dict[int, float]:
        """column -> value of one document: the TF-IDF row of every vectorizer side by side
        (what scikit-learn's ``TfidfVectorizer.transform`` of each, stacked, gives)."""
        if not self._checked:
            for spec in self.data["vectorizers"]:
                _check_spec(spec)
            self._checked = True
        row: dict[int, float] = {}
        offset = 0
        for spec, text in zip(self.data["vectorizers"], doc, strict=True):
            vocab, idf = spec["vocabulary"], spec["idf"]
            counts: dict[int, int] = {}
            for term in _terms(spec, text):
                j = vocab.get(term)
                if j is not None:
                    counts[j] = counts.get(j, 0) + 1
            sub = spec["sublinear_tf"]
            w = {j: ((1.0 + math.log(n)) if sub else float(n)) * idf[j] for j, n in counts.items()}
            norm = math.sqrt(sum(x * x for x in w.values()))  # norm "l2" (_check_spec)
            for j, x in w.items():
                row[offset + j] = x / norm if norm > 0 else x
            offset += len(idf)
        return row

    def logits(self, docs: list[tuple[str, str]]) -> list[list[float]]:
        coef, intercept = self.data["coef"], self.data["intercept"]
        out = []
        for doc in docs:
            row = self.features_of(doc)
            out.append(
                [
                    b + sum(c[j] * x for j, x in row.items())
                    for c, b in zip(coef, intercept, strict=True)
                ]
            )
        return out

    def proba(self, docs: list[tuple[str, str]]) -> list[list[float]]:
        """Class probabilities per document, in ``classes`` order (temperature-calibrated)."""
        t = float(self.data.get("temperature", 1.0))
        out = []
        for z in self.logits(docs):
            top = max(z)
            e = [math.exp((x - top) / t) for x in z]
            total = sum(e)
            out.append([x / total for x in e])
        return out


# The text analysis a vectorizer spec names (the settings _fit trains with, carried in the
# model's JSON): "word" splits by ``token_pattern``; "char_wb" takes character n-grams of each
# whitespace-separated word padded with one space, a word shorter than n counted once.
_WHITESPACE = re.compile(r"\s\s+")


SPEC_KEYS = ("analyzer", "token_pattern", "lowercase", "ngram_range", "sublinear_tf", "norm")


def _check_spec(spec: dict[str, Any]) -> None:
    missing = [k for k in SPEC_KEYS if k not in spec]
    if missing or spec["analyzer"] not in ("word", "char_wb") or spec["norm"] != "l2":
        raise ForensicsError(
            f"phase model: vectorizer {spec.get('kind')!r} has settings this predictor does not "
            f"implement ({missing or spec.get('analyzer')})",
            hint="retrain it: forensics classify train",
        )


def _terms(spec: dict[str, Any], text: str) -> list[str]:
    if spec["lowercase"]:
        text = text.lower()
    lo, hi = spec["ngram_range"]
    if spec["analyzer"] == "word":
        tokens = re.findall(spec["token_pattern"], text)
        if (lo, hi) == (1, 1):
            return tokens
        return [
            " ".join(tokens[i : i + n])
            for n in range(lo, hi + 1)
            for i in range(len(tokens) - n + 1)
        ]
    grams: list[str] = []
    for word in _WHITESPACE.sub(" ", text).split():
        w = f" {word} "
        for n in range(lo, hi + 1):
            if len(w) <= n:
                grams.append(w)
                break
            grams += [w[i : i + n] for i in range(len(w) - n + 1)]
    return grams


def _vec_params(kind: str) -> dict[str, Any]:
    if kind == "tokens":
        return {"token_pattern": r"\S+", "lowercase": False, "sublinear_tf": True}
    return {
        "analyzer": "char_wb",
        "ngram_range": (3, 5),
        "sublinear_tf": True,
        "lowercase": True,
        "max_features": 6000,
    }


def _spec(kind: str, v) -> dict[str, Any]:
    """What a fitted TfidfVectorizer's transform needs, as JSON (the predictor's input)."""
    params = v.get_params()
    return {
        "kind": kind,
        **{k: params[k] for k in SPEC_KEYS if k != "ngram_range"},
        "ngram_range": list(params["ngram_range"]),
        "vocabulary": {k: int(i) for k, i in v.vocabulary_.items()},
        "idf": [round(x, 5) for x in v.idf_],
    }


def _fit(docs: list[tuple[str, str]], y: list[str], *, C: float = 4.0) -> Model:
    import numpy as np
    from scipy.sparse import hstack
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    v1 = TfidfVectorizer(**_vec_params("tokens"), min_df=1)
    v2 = TfidfVectorizer(**_vec_params("chars"), min_df=2)
    X1 = v1.fit_transform([d[0] for d in docs])
    texts = [d[1] or " " for d in docs]
    X2 = v2.fit_transform(texts)
    X = hstack([X1, X2]).tocsr()
    classes = sorted(set(y), key=PHASES.index)
    from threadpoolctl import threadpool_limits

    clf = LogisticRegression(C=C, max_iter=3000, class_weight="balanced")
    with threadpool_limits(1):  # many BLAS threads make this small fit 30x slower
        clf.fit(X, y)
    order = [list(clf.classes_).index(c) for c in classes]
    coef = clf.coef_[order] if len(classes) > 2 else np.vstack([-clf.coef_[0], clf.coef_[0]])
    inter = (
        clf.intercept_[order]
        if len(classes) > 2
        else np.array([-clf.intercept_[0], clf.intercept_[0]])
    )

    data = {
        "version": MODEL_VERSION,
        "classes": classes,
        "vectorizers": [_spec("tokens", v1), _spec("chars", v2)],
        "coef": [[round(float(x), 5) for x in row] for row in coef],
        "intercept": [round(float(x), 5) for x in inter],
        "temperature": 1.0,
    }
    return Model(data)
