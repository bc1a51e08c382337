"""The figures of a benchmark: percentiles and the summary of its requests."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from forensics.bench.config import BODIES_PER_STATUS

if TYPE_CHECKING:
    from forensics.bench.client import RequestResult


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100), None for no values."""
    if not values:
        return None
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _stats(prefix: str, values: list[float]) -> dict[str, float | None]:
    return {
        f"{prefix}_mean": (sum(values) / len(values)) if values else None,
        f"{prefix}_p50": percentile(values, 50),
        f"{prefix}_p90": percentile(values, 90),
        f"{prefix}_p99": percentile(values, 99),
    }


def summarize(results: list[RequestResult], duration_s: float) -> dict[str, Any]:
    ok = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok and r.reason != "cancelled"]
    tokens = sum(r.output_tokens for r in ok)
    per = [r.tok_s for r in ok if r.tok_s is not None]
    reasons: dict[str, int] = {}
    statuses: dict[str, int] = {}
    bodies: dict[str, list[str]] = {}
    details: dict[str, str] = {}
    for r in failed:
        reasons[r.reason or "unknown"] = reasons.get(r.reason or "unknown", 0) + 1
        details.setdefault(r.reason or "unknown", r.detail or "")
        if r.status is not None and r.reason == "http_error":
            key = str(r.status)
            statuses[key] = statuses.get(key, 0) + 1
            if r.body is not None and len(bodies.setdefault(key, [])) < BODIES_PER_STATUS:
                bodies[key].append(r.body)
    verify = [r for r in ok if r.verify_ct]
    accept = (
        sum(r.output_tokens for r in verify) / sum(r.verify_ct or 0 for r in verify)
        if verify
        else None
    )
    out: dict[str, Any] = {
        "completed": len(ok),
        "failed": len(failed),
        "cancelled": sum(1 for r in results if r.reason == "cancelled"),
        "output_tokens": tokens,
        "output_tok_s": tokens / duration_s if ok and duration_s > 0 else None,
        "req_tok_s_median": percentile(per, 50),
        "req_tok_s_p10": percentile(per, 10),
        "req_tok_s_p90": percentile(per, 90),
        "decode_tok_s_median": (
            1.0 / m
            if (m := percentile([r.tpot_s for r in ok if r.tpot_s], 50)) is not None and m > 0
            else None
        ),
        "tokens_estimated": sum(1 for r in ok if r.tokens_estimated),
        "accept_len_client": accept,
        "failures": {
            "reasons": reasons,
            "http_status": statuses,
            "bodies": bodies,
            "first_detail": details,
        },
    }
    out.update(_stats("ttft_s", [r.ttft_s for r in ok if r.ttft_s is not None]))
    out.update(_stats("itl_s", [x for r in ok for x in r.itls]))
    out.update(_stats("tpot_s", [r.tpot_s for r in ok if r.tpot_s is not None]))
    out.update(_stats("e2e_s", [r.e2e_s for r in ok if r.e2e_s is not None]))
    return out
