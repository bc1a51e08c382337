"""Where models live: the store's cached model, the packaged one, loading the current one."""

from __future__ import annotations

import json
from pathlib import Path

from forensics.classifier.corpus import CORPUS, corpus_digest
from forensics.classifier.model import MODEL_VERSION, Model
from forensics.errors import ForensicsError


def _model_path(store) -> Path:
    return Path(store.root) / "models" / "phase-model.json"


def save_model(store, model: Model) -> Path:
    from forensics.output import write_home_file

    # atomic (forensics.output): a full disk leaves the old model, no half-written one
    data = json.dumps(model.data, separators=(",", ":"))
    return write_home_file(_model_path(store), data, what="the retrained model", mode=0o644)


_MODEL_CACHE: dict[str, Model] = {}


def _cache_key(store) -> str:
    return str(Path(store.root).resolve()) if store is not None else ""


# The model trained on the shipped corpus, packaged as JSON (scripts/train_packaged_model.py);
# used when its digest matches the corpus and code, so a fresh store needs no training.
PACKAGED_MODEL = Path(__file__).resolve().parents[1] / "data" / "phase-model.json"


def packaged_model(digest: str | None) -> Model | None:
    """The packaged model, if it was trained on this corpus and code (any, if no corpus)."""
    try:
        data = json.loads(PACKAGED_MODEL.read_text())
    except (OSError, ValueError):
        return None
    if data.get("version") != MODEL_VERSION:
        return None
    if digest is not None and data.get("digest") != digest:
        return None
    return Model(data, packaged=True)


def saved_model(store, digest: str) -> Model | None:
    """The model saved in the store (``classify train``, or trained for its labels) when it
    is current: this code's model version, trained on the corpus of ``digest``."""
    p = _model_path(store)
    if not p.exists():
        return None
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    if data.get("version") == MODEL_VERSION and data.get("digest") == digest:
        return Model(data)
    return None


def model_untrained(store) -> Model | None:
    """The model ``load_model(store)`` returns when it trains none, without reading the
    store's tables (only its folder: ``store`` needs a ``root``): the store's saved one when
    current, else the packaged one when current; None: neither. It does not look at the
    store's labels (with labels and no saved model, ``load_model`` trains one): a caller
    compares it with ``load_model``'s (an ingest worker's verdicts, forensics/verdicts.py)."""
    if not (CORPUS / "labels.csv").exists():
        return packaged_model(None)
    digest = corpus_digest(CORPUS)
    return saved_model(store, digest) or packaged_model(digest)


def load_model(store=None, *, corpus: Path = CORPUS) -> Model:
    """The store's model when it is current, else the packaged one, else one trained now."""
    from forensics.classifier.labels import _has_labels
    from forensics.classifier.training import train  # (training saves through this module)

    if not (corpus / "labels.csv").exists():  # installed without the corpus
        m = packaged_model(None)
        if m is None:
            raise ForensicsError(
                f"{corpus}: no training corpus and no packaged model",
                hint="reinstall forensics (its wheel carries forensics/data/corpus and the packaged model)",
            )
        return m
    digest = corpus_digest(corpus)
    key = _cache_key(store)
    m = _MODEL_CACHE.get(key)
    if m is not None and m.data.get("digest") == digest:
        return m
    m = saved_model(store, digest) if store is not None else None
    if m is not None:
        _MODEL_CACHE[key] = m
        return m
    # a fresh model from the shipped corpus (shared in-process by stores without labels)
    base = _MODEL_CACHE.get("")
    if base is None or base.data.get("digest") != digest:
        base = packaged_model(digest) or train(None, corpus=corpus)
        _MODEL_CACHE[""] = base
    if store is not None and _has_labels(store):
        base = train(store, corpus=corpus, save=False)
    # a cache of a model trained now (the packaged one is stale, or the store has labels), so
    # the next command does not train again; a read-only or full store serves without it. The
    # packaged model is not copied there: it is read from the package (the copy was 450 KB
    # written and fsynced by the first ingest into every store: 15-100 ms, issue 15)
    if store is not None and not base.packaged:
        try:
            save_model(store, base)
        except OSError:
            pass
    return base
