"""Train the phase model on the shipped corpus and package it as forensics/data/phase-model.json.

Run after changing the corpus, forensics/classifier/, forensics/signatures/, forensics/frames/ or
the SGLang parser (parsers/sglang/); the test
suite fails while the packaged model is stale (tests/test_classifier.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    from forensics import classifier

    model = classifier.train(None)
    classifier.PACKAGED_MODEL.parent.mkdir(parents=True, exist_ok=True)
    classifier.PACKAGED_MODEL.write_text(json.dumps(model.data, separators=(",", ":")))
    print(f"wrote {classifier.PACKAGED_MODEL} (digest {model.data['digest']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
