"""What one benchmark is asked to do: :class:`BenchConfig`, its bounds and the protocol's
constants (APIs and their endpoints, failure reasons, byte caps, deadlines)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from urllib.parse import urlsplit

from forensics.errors import UsageError
from forensics.urls import redact_url

APIS = ("native", "openai", "openai-completions")
ENDPOINTS = {
    "native": "/generate",
    "openai": "/v1/chat/completions",
    "openai-completions": "/v1/completions",
}
# Failure reasons (the contract's `requests{...}` counters, plus the two below).
REASONS = (
    "http_error",
    "truncated",
    "protocol_error",
    "timeout",
    "conn_error",
    "empty_output",
    "server_error",  # the stream itself carried an error object or an abort finish reason
)
BASELINE_KEY = "bench.baseline"  # older stores: one baseline for all (forensics.baseline)
HEALTH_EVERY_MIN = 0.1  # seconds between /health samples, when sampling is on
HEALTH_TIMEOUT = 5.0  # each /health probe's deadline (bad-inputs H06: at least 5 s)
MAX_BODY = 4096  # bytes kept of an error body (H01)
# Every read from the server has a byte cap (issue 14, bounded memory): one SSE line or event,
# a JSON answer (/server_info, /v1/models), and a /health or /flush_cache body.
MAX_SSE_EVENT = 8 << 20
MAX_JSON_BODY = 1 << 20
MAX_SMALL_BODY = 64 << 10
DEADLINE_GRACE_S = 1.0  # after --deadline: this long for the bookkeeping, then it is cut
BODIES_PER_STATUS = 3


# --------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------
# Numeric options: (flag, BenchConfig field, (low bound, exclusive, an example), high bound).
# NaN and inf are refused too: a --deadline of nan would never pass and a --duration of inf
# never ends; the high bounds refuse what no benchmark means (`--deadline 1e308` is an
# overflow in the timers, `--num-prompts 10**30` a prompt list that never fits in memory).
DAY_S = 86400.0
BOUNDS: tuple[tuple[str, str, tuple[float, bool, str], float], ...] = (
    ("--rate", "rate", (0, True, "2"), 1e6),
    ("--duration", "duration", (0, True, "60"), 7 * DAY_S),
    ("--deadline", "deadline", (0, True, "600"), 7 * DAY_S),
    ("--connect-timeout", "connect_timeout", (0, True, "10"), DAY_S),
    ("--ttft-timeout", "ttft_timeout", (0, True, "300"), DAY_S),
    ("--idle-timeout", "idle_timeout", (0, True, "60"), DAY_S),
    ("--request-timeout", "request_timeout", (0, True, "900"), 7 * DAY_S),
    ("--temperature", "temperature", (0, False, "0"), 100.0),
    ("--random-input-len", "random_input_len", (1, False, "512"), 10_000_000),
    ("--max-failure-rate", "max_failure_rate", (0, False, "0.05"), 1.0),
    ("--health-every", "health_every", (0, False, "2"), DAY_S),
    ("--concurrency", "concurrency", (1, False, "8"), 100_000),
    ("--num-prompts", "num_prompts", (1, False, "100"), 10_000_000),
    ("--max-new-tokens", "max_new_tokens", (1, False, "256"), 10_000_000),
    ("--warmup", "warmup", (0, False, "1"), 100_000),
)


@dataclass
class BenchConfig:
    url: str
    api: str = "native"
    concurrency: int = 1
    num_prompts: int | None = None  # default: 10 (single stream) or 4 x concurrency
    rate: float | None = None  # requests/s, Poisson arrivals (with `duration`)
    duration: float | None = None
    warmup: int = 1
    max_new_tokens: int = 256
    ignore_eos: bool = True
    temperature: float = 0.0
    dataset: str | None = None
    random_input_len: int | None = None
    model: str | None = None  # OpenAI `model`; default: the first of /v1/models
    flush_cache: bool = True
    connect_timeout: float = 10.0
    ttft_timeout: float = 300.0
    idle_timeout: float = 60.0
    request_timeout: float = 900.0
    deadline: float | None = 3600.0  # the whole benchmark, warmup included
    dead_after: int = 3  # consecutive conn_error/truncated before /health is checked
    max_failure_rate: float = 0.05
    seed: int = 0
    health_every: float = 2.0  # seconds between /health samples while measuring; 0 = off
    health_timeout: float = HEALTH_TIMEOUT  # each probe's deadline (not a CLI option)

    @property
    def mode(self) -> str:
        if self.rate is not None:
            return "rate"
        return "single" if self.concurrency == 1 else "concurrency"

    def validate(self) -> None:
        shown = redact_url(self.url)
        try:
            parts = urlsplit(self.url)
        except ValueError as exc:  # "http://[::1" (an unclosed IPv6 bracket)
            raise UsageError(
                f"{shown}: not a valid URL ({exc})", hint="forensics bench http://HOST:PORT"
            ) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(
                f"{shown}: not an http(s) URL", hint="forensics bench http://HOST:PORT"
            )
        try:
            port = parts.port
        except ValueError:  # `:notaport`, `:99999`, `:-1`
            port = -1
        if port is not None and not 0 < port < 65536:
            raise UsageError(
                f"{shown}: bad port {parts.netloc.rpartition(':')[2]!r}",
                hint="use a port 1-65535: http://HOST:PORT",
            )
        for flag, value, low, high in BOUNDS:
            v = getattr(self, value)
            if v is None:
                continue
            if (
                v != v
                or v in (float("inf"), float("-inf"))
                or v < low[0]
                or (low[1] and v == low[0])
                or v > high
            ):
                need = f"more than {low[0]:g}" if low[1] else f"at least {low[0]:g}"
                raise UsageError(
                    f"{flag} {v:g}: must be {need} and at most {high:g}",
                    hint=f"e.g. {flag} {low[2]}",
                )
        if 0 < self.health_every < HEALTH_EVERY_MIN:
            raise UsageError(
                f"--health-every {self.health_every:g}: 0 (off) or at least "
                f"{HEALTH_EVERY_MIN:g} seconds",
                hint="e.g. --health-every 2",
            )
        if not self.health_timeout > 0 or math.isinf(self.health_timeout):
            raise UsageError(f"health probe timeout {self.health_timeout:g}: must be positive")
        if self.api not in APIS:
            raise UsageError(f"--api {self.api}: unknown API", hint=f"one of {', '.join(APIS)}")
        if self.rate is not None:
            if self.duration is None and self.num_prompts is None:
                raise UsageError(
                    "--rate needs --duration S or --num-prompts N to know when to stop"
                )
        if self.duration is not None and self.rate is None:
            raise UsageError("--duration applies to --rate mode", hint="add --rate R")
        if self.dataset and self.random_input_len:
            raise UsageError("--dataset and --random-input-len exclude each other")

    def effective_num_prompts(self) -> int | None:
        if self.num_prompts is not None:
            return self.num_prompts
        if self.rate is not None:
            return None  # bounded by --duration
        return 10 if self.concurrency == 1 else 4 * self.concurrency
