"""The packaged model predicts in plain Python: the same probabilities as scikit-learn's
TF-IDF + logistic regression (the training side), without importing scikit-learn, scipy or
numpy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from forensics import classifier

ROOT = Path(__file__).resolve().parent.parent


def _sklearn_proba(model: classifier.Model, docs: list[tuple[str, str]]):
    """The reference: scikit-learn's own transform of the model's vocabularies and idf."""
    from scipy.sparse import hstack
    from sklearn.feature_extraction.text import TfidfVectorizer

    mats = []
    for spec, col in zip(model.data["vectorizers"], (0, 1), strict=True):
        v = TfidfVectorizer(**classifier._vec_params(spec["kind"]), vocabulary=spec["vocabulary"])
        v._validate_vocabulary()
        v.idf_ = np.asarray(spec["idf"], dtype=float)
        mats.append(v.transform([d[col] for d in docs]))
    z = hstack(mats) @ np.asarray(model.data["coef"]).T + np.asarray(model.data["intercept"])
    z = np.asarray(z) / float(model.data["temperature"])
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=1, keepdims=True)


@pytest.fixture(scope="module")
def model():
    m = classifier.load_model(None)
    assert m.data["digest"] == classifier.corpus_digest()
    return m


def test_the_predictor_matches_sklearn_on_the_corpus(model):
    docs = [classifier.features(a) for _, a in classifier.corpus_examples()]
    docs.append(("", ""))  # an empty document: zero features, the intercept alone
    got, want = np.asarray(model.proba(docs)), _sklearn_proba(model, docs)
    assert got.shape == want.shape == (len(docs), len(model.classes))
    assert np.abs(got - want).max() < 1e-9


def test_the_predictor_matches_sklearn_on_the_real_logs(model, shared_dir):
    docs = []
    for log in sorted((shared_dir / "real-logs-dev").glob("*.log")):
        frames = classifier.parse_path(log)
        docs += [classifier.features(a) for a in classifier.analyses_for(frames, log.name)]
    assert len(docs) >= 68
    assert np.abs(np.asarray(model.proba(docs)) - _sklearn_proba(model, docs)).max() < 1e-9


def test_classifying_imports_no_sklearn_scipy_or_numpy(fixtures_dir):
    log = str(fixtures_dir / "sglang_fail_capture.log")
    code = (
        "import sys\n"
        "from forensics import classifier\n"
        "m = classifier.load_model(None)\n"
        f"vs = classifier.classify_file({log!r}, m)\n"
        f"ans = classifier.analyses_for(classifier.parse_path({log!r}), 'x')\n"
        "assert vs and len(m.proba([classifier.features(a) for a in ans])) == len(ans)\n"
        "bad = sorted(k for k in sys.modules if k.split('.')[0] in ('sklearn', 'scipy', 'numpy'))\n"
        "print(bad[:5])\n"
        "sys.exit(1 if bad else 0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_model_whose_settings_the_predictor_lacks_is_refused(model):
    data = {**model.data, "vectorizers": [dict(s) for s in model.data["vectorizers"]]}
    data["vectorizers"][1]["analyzer"] = "char"
    with pytest.raises(classifier.ForensicsError, match="retrain"):
        classifier.Model(data).proba([("a", "b")])


def test_a_big_stored_run_is_classified_from_the_view_classify_keeps(tmp_path, fixtures_dir):
    """Ingest's verdict of a run with more kept lines than KEEP_ROWS (12,000 access lines and
    decode lines while serving) reads the bounded view a streamed classify keeps: the same
    verdict as `classify FILE`, at the cost of a small run."""
    from forensics.ingest import ingest
    from forensics.store import Store

    lines = (fixtures_dir / "sglang_fail_runtime_ima.log").read_text().splitlines(keepends=True)
    busy = [
        f'[2026-11-02 08:03:26] INFO:     127.0.0.1:{40000 + i % 9999} - "POST /generate HTTP/1.1" 200 OK\n'
        + lines[79]
        for i in range(12_000)
    ]
    log = tmp_path / "busy_ima.log"
    log.write_text("".join(lines[:80] + busy + lines[80:]))
    store = Store.open(tmp_path / "store")
    ingest(store, [str(log)])
    sid = next(iter(store.sources()))
    seen = classifier._store_tables(store, sid)
    assert len(store.table("lines")) > classifier.KEEP_ROWS["lines"] >= len(seen["lines"])
    assert len(seen["decode"]) <= 2 * 8  # first and last line per rank
    stored = classifier.classify_stored(store, sid, 0)
    (streamed,) = classifier.classify_file(log)
    assert (stored.phase, stored.signature, stored.decided) == ("runtime", streamed.signature, True)
    assert (stored.phase, stored.hung, stored.explanation) == (
        streamed.phase,
        streamed.hung,
        streamed.explanation,
    )


def test_a_stored_run_of_a_million_stage_lines_is_read_as_head_and_tail(tmp_path, fixtures_dir):
    """Issue 14, bounded memory: the verdict step read a run's events and errors whole (a
    300 MB log of one repeated stage line: 1.1 M events, 700 MB peak). Every table but runs
    is now read through its head-and-tail reduce, part by part: what the analysis sees equals
    _bounded of the whole tables, and no more than KEEP_ROWS of each."""
    from forensics.classifier.stream import _bounded
    from forensics.ingest import ingest
    from forensics.store import Store

    lines = (fixtures_dir / "sglang_eagle3_cg_5dt.log").read_text().splitlines(keepends=True)
    store = Store.open(tmp_path / "probe")
    one = tmp_path / "one.log"
    one.write_text("".join(lines))
    ingest(store, [str(one)])
    event_lines = set(store.table("events")["line"].to_list())
    stage = next(i for i in range(len(lines)) if i + 1 in event_lines and i > 20)
    n = classifier.KEEP_ROWS["events"] + 2_000
    log = tmp_path / "stages.log"
    log.write_text("".join(lines[: stage + 1] + [lines[stage]] * n + lines[stage + 1 :]))
    store = Store.open(tmp_path / "store")
    ingest(store, [str(log)])
    store = Store.open(tmp_path / "store")  # nothing read yet
    sid = next(iter(store.sources()))
    seen = classifier._store_tables(store, sid)
    # no table but runs was read whole (a whole read is cached under the table's name)
    assert not {"events", "errors", "lines"} & {k for k in (*store._cache, *store._by_source)}
    assert len(store.table("events")) > n >= classifier.KEEP_ROWS["events"] >= len(seen["events"])
    whole = {t: store.table(t).filter(pl.col("source_id") == sid) for t in seen}
    expected = _bounded(whole)
    for t in ("events", "errors", "lines"):
        assert seen[t].drop("source_id").equals(expected[t].drop("source_id")), t
