"""Phase classifier: in which phase a run died (or ``ok``), whether it hung, and why.

Logic before statistics:

* **routine lines never decide**: the NOISE table of ``forensics.signatures`` (ignored import
  errors, deprecation and driver-version warnings, resource_tracker leak reports, Ascend TBE
  worker noise, Triton diagnostics, ...) and ``ROUTINE_CONTEXT`` here (text before the server's
  own output, after a shutdown request, a harness's or client's traceback, an error the server
  kept serving after);
* **an error decides only if fatal** (a traceback's exception, a fatal signature, an exit);
* **the failure is never earlier than what the log proves**: a decode/prefill line proves
  serving, a capture line that loading ended (``_floor``), per rank where ranks are tagged;
* **where on the stack** comes from ``forensics.frames`` (a table read from SGLang's own source,
  0.1.14 .. 0.5.23), and the signature catalog says what failed;
* every verdict says whether the text **decided** it; what placed it (``basis``) sets its
  confidence (``BASIS_CONFIDENCE``, measured on real logs).

Only when the text does not decide does a **scikit-learn** logistic regression (structural
tokens and character n-grams of the error text, trained on ``forensics/data/corpus`` plus the
user's ``forensics label``s) pick the likeliest phase no earlier than what the log proves; the
verdict is then ``decided: false`` with a low confidence and says what would settle it.

The model is kept as JSON (vocabularies, idf weights, coefficients, a calibration temperature):
it is retrained from the corpus in seconds when absent and cached in the store's ``models/``
folder; no pickle is ever loaded.
"""

from __future__ import annotations

from forensics import signatures as sigs
from forensics.classifier.analysis import analyze
from forensics.classifier.corpus import (
    CORPUS,
    LABELS_CSV,
    _source_files,
    analyses_for,
    corpus_digest,
    corpus_examples,
    corpus_rows,
    parse_path,
)
from forensics.classifier.decide import BASIS_CONFIDENCE, DECIDING
from forensics.classifier.evaluate import _scores, evaluate, per_phase
from forensics.classifier.features import features
from forensics.classifier.hostevidence import host_evidence
from forensics.classifier.labels import label
from forensics.classifier.model import MODEL_VERSION, Model, _vec_params
from forensics.classifier.modelstore import (
    _MODEL_CACHE,
    PACKAGED_MODEL,
    _model_path,
    load_model,
    packaged_model,
    save_model,
)
from forensics.classifier.phases import LIFE, PHASES, STAGE_PHASE, STALE_S
from forensics.classifier.records import Analysis, ErrorRec
from forensics.classifier.sources import (
    PASTE_MAX,
    classify_bytes,
    classify_file,
    classify_source,
    classify_text,
    read_paste,
)
from forensics.classifier.stored import (
    _store_tables,
    analyze_stored,
    classify_runs,
    classify_stored,
)
from forensics.classifier.stream import KEEP_ROWS, KEEP_TEXT, iter_analyses
from forensics.classifier.training import train
from forensics.classifier.verdict import SETTLE, Verdict, explain, verdict, verdicts
from forensics.errors import ForensicsError, RunNotFound
from forensics.tables import LABEL_SCHEMA, VERDICT_SCHEMA

__all__ = [
    "sigs",
    "ForensicsError",
    "RunNotFound",
    "LABEL_SCHEMA",
    "VERDICT_SCHEMA",
    "PHASES",
    "MODEL_VERSION",
    "CORPUS",
    "LABELS_CSV",
    "STALE_S",
    "STAGE_PHASE",
    "LIFE",
    "BASIS_CONFIDENCE",
    "DECIDING",
    "SETTLE",
    "KEEP_ROWS",
    "KEEP_TEXT",
    "PASTE_MAX",
    "PACKAGED_MODEL",
    "ErrorRec",
    "Analysis",
    "Model",
    "Verdict",
    "analyze",
    "features",
    "explain",
    "verdict",
    "verdicts",
    "host_evidence",
    "corpus_rows",
    "corpus_digest",
    "corpus_examples",
    "parse_path",
    "analyses_for",
    "iter_analyses",
    "train",
    "save_model",
    "packaged_model",
    "load_model",
    "classify_file",
    "classify_source",
    "classify_text",
    "read_paste",
    "classify_bytes",
    "analyze_stored",
    "classify_stored",
    "classify_runs",
    "label",
    "per_phase",
    "evaluate",
    "_source_files",
    "_vec_params",
    "_store_tables",
    "_model_path",
    "_MODEL_CACHE",
    "_scores",
]
