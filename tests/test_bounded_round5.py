"""Issue 14, "Bounded everything" (fifth round): memory and time bounded on pathological logs.

Small-scale versions of `scripts/gen_pathological.py`'s inputs; each asserts the bounded
structure (rows capped, counts right) that keeps the full-size input under ~300 MB. The
full-size figures are in docs/bad-inputs.md and docs/performance.md."""

from __future__ import annotations

import json

import forensics_parsers.sglang as S
from forensics_parsers.sglang import metrics
from scripts.gen_pathological import generate


def test_wide_decode_lines_take_the_general_path_with_the_same_rows(tmp_path, monkeypatch):
    """A Decode batch line of thousands of fields: the fast path built columns and
    expressions per field (~430 MB peak on 60 KB lines); past FAST_KEYS_MAX keys the general
    path parses it, to the same rows the fast path gives."""
    log = tmp_path / "wide.log"
    generate("wide-decode", log, mb=0.5, count=300)
    data = log.read_bytes()
    calls = []
    real = metrics._fields_general
    monkeypatch.setattr(
        metrics, "_fields_general", lambda sub, *a: calls.append(len(sub)) or real(sub, *a)
    )
    general = S.parse_bytes(data, "wide.log").decode
    assert sum(calls) == len(general)  # every wide line took the general path
    monkeypatch.setattr(metrics, "FAST_KEYS_MAX", 10_000)
    fast = S.parse_bytes(data, "wide.log").decode
    assert len(general) == data.count(b"\n") and general.equals(fast)
    extra = json.loads(general["extra"][0])
    assert len(extra) == 300 and extra["custom metric 0299"] == 149.5
    assert general["token"].to_list() == list(range(len(general)))
