"""/health while measuring (H06): the samples and their summary."""

from __future__ import annotations

from dataclasses import dataclass

from forensics.bench.stats import percentile


@dataclass
class HealthSample:
    t_s: float  # when the probe was sent, seconds from the start of the measured window
    status: int | None  # the HTTP status; None when no answer came
    latency_ms: float  # until the answer, or until the probe gave up
    error: str | None = None  # timeout | conn_error | disconnected | error (no status)


# The probe's exceptions, by kind (first match wins; TimeoutError covers aiohttp's own).
def health_error_kinds() -> tuple[tuple[type[BaseException], str], ...]:
    import aiohttp

    return (
        (TimeoutError, "timeout"),
        (aiohttp.ClientConnectorError, "conn_error"),
        (aiohttp.ServerDisconnectedError, "disconnected"),
        (aiohttp.ClientOSError, "disconnected"),
        (aiohttp.ClientError, "error"),
        (OSError, "error"),
    )


HEALTH_FIELDS = (
    "every_s",
    "probe_timeout_s",
    "count",
    "non_200",
    "timeouts",
    "errors",
    "latency_ms_p50",
    "latency_ms_max",
    "longest_non_200_s",
)


def health_summary(samples: list[HealthSample], every_s: float, timeout_s: float) -> dict:
    """Counts and latencies of the samples (the keys of HEALTH_FIELDS).

    ``non_200`` counts every sample that was not a 200, timeouts and connection errors
    included; latencies are those of the probes that got an answer. ``longest_non_200_s`` is
    the longest stretch from a sample that was not 200 to the next 200 (or to the end of the
    last probe when none followed); 0.0 when every sample was 200, None without samples.
    """
    answered = [s.latency_ms for s in samples if s.status is not None]
    longest: float | None = 0.0 if samples else None
    start: float | None = None
    for s in samples:
        if s.status != 200:
            if start is None:
                start = s.t_s
        elif start is not None:
            longest = max(longest or 0.0, s.t_s - start)
            start = None
    if start is not None:
        last = samples[-1]
        longest = max(longest or 0.0, last.t_s + last.latency_ms / 1000 - start)
    return {
        "every_s": every_s,
        "probe_timeout_s": timeout_s,
        "count": len(samples),
        "non_200": sum(1 for s in samples if s.status != 200),
        "timeouts": sum(1 for s in samples if s.error == "timeout"),
        "errors": sum(1 for s in samples if s.status is None and s.error != "timeout"),
        "latency_ms_p50": percentile(answered, 50),
        "latency_ms_max": max(answered) if answered else None,
        "longest_non_200_s": longest,
    }


def health_breakdown(samples: list[HealthSample]) -> dict[str, int]:
    """How many samples per outcome: "200", "503", "timeout", ... (most frequent first)."""
    counts: dict[str, int] = {}
    for s in samples:
        key = str(s.status) if s.status is not None else (s.error or "error")
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))
