"""CPU time of classifying one stored run (what ingest pays per new run), and what it imports.

    FORENSICS_HOME=$(mktemp -d) forensics ingest bench-out/bench_busy_100mb.log
    FORENSICS_HOME=<that dir> python scripts/bench_classify_run.py

Prints the CPU seconds (``time.process_time``) of loading the model, of the first
``classify_stored`` of the store's first run (table reads and imports included) and of a warm
one (tables re-read), and whether scikit-learn, scipy or numpy were imported.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    from forensics import classifier
    from forensics.store import Store

    store = Store.open()
    sources = list(store.sources())
    if not sources:
        print("the store holds no source: ingest a log first (see the docstring)", file=sys.stderr)
        return 3
    t0 = time.process_time()
    model = classifier.load_model(store)
    t1 = time.process_time()
    classifier.classify_stored(store, sources[0], 0, model)
    t2 = time.process_time()
    for _ in range(3):
        store._cache.clear()  # re-read the tables, as a fresh ingest transaction does
        classifier.classify_stored(store, sources[0], 0, model)
    t3 = time.process_time()
    heavy = [m for m in ("sklearn", "scipy", "numpy") if m in sys.modules]
    print(
        f"load_model {t1 - t0:.3f} s, first classify {t2 - t1:.3f} s, "
        f"warm classify {(t3 - t2) / 3:.3f} s (CPU); imported: {', '.join(heavy) or 'none of sklearn, scipy, numpy'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
