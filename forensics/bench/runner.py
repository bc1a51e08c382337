"""The benchmark client: streaming requests against an SGLang server, honest figures.

``run_bench(BenchConfig(...))`` drives one benchmark (single stream, fixed concurrency or
Poisson request rate) over SGLang's native ``/generate`` or the OpenAI-compatible endpoints,
and returns a :class:`BenchReport` (one :class:`RequestResult` per measured request plus the
summary figures, and the ``/health`` samples taken meanwhile). ``save_bench`` stores it in the
``bench`` / ``bench_requests`` / ``bench_health`` tables, attached to a run.

Rules this module keeps (see docs/bench.md):

* tokens come from ``meta_info.completion_tokens`` / ``usage``, never from the number of
  stream chunks (a chunk carries several tokens under speculative decoding); when a server
  gives neither, the count is estimated and the request flagged ``tokens_estimated`` (H08);
* a stream that ends without ``[DONE]`` and without a finish reason is ``truncated`` (H03);
* every network call has a deadline (connect, first token, idle, total, overall) (H05);
* a server that stops answering ends the run with the partial results kept (H02);
* while measuring, ``/health`` is sampled every ``health_every`` seconds (each probe with its
  own deadline) and the samples are kept with the results (H06).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import math
import random
import signal
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from forensics.errors import BodyTooLarge, InputNotFound, ParseError, UsageError
from forensics.urls import redact_url

if TYPE_CHECKING:
    import polars as pl

    from forensics.store import Store

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
# Numeric options: (flag, BenchConfig field, (bound, exclusive, an example)). NaN and inf are
# refused too: a --deadline of nan would never pass and a --duration of inf never ends.
BOUNDS: tuple[tuple[str, str, tuple[float, bool, str]], ...] = (
    ("--rate", "rate", (0, True, "2")),
    ("--duration", "duration", (0, True, "60")),
    ("--deadline", "deadline", (0, True, "600")),
    ("--connect-timeout", "connect_timeout", (0, True, "10")),
    ("--ttft-timeout", "ttft_timeout", (0, True, "300")),
    ("--idle-timeout", "idle_timeout", (0, True, "60")),
    ("--request-timeout", "request_timeout", (0, True, "900")),
    ("--temperature", "temperature", (0, False, "0")),
    ("--random-input-len", "random_input_len", (1, False, "512")),
    ("--max-failure-rate", "max_failure_rate", (0, False, "0.05")),
    ("--health-every", "health_every", (0, False, "2")),
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
        parts = urlsplit(self.url)
        shown = redact_url(self.url)
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
        for flag, value, low in BOUNDS:
            v = getattr(self, value)
            if v is None:
                continue
            if (
                v != v
                or v in (float("inf"), float("-inf"))
                or v < low[0]
                or (low[1] and v == low[0])
            ):
                need = f"more than {low[0]:g}" if low[1] else f"at least {low[0]:g}"
                raise UsageError(f"{flag} {v:g}: must be {need}", hint=f"e.g. {flag} {low[2]}")
        if 0 < self.health_every < HEALTH_EVERY_MIN:
            raise UsageError(
                f"--health-every {self.health_every:g}: 0 (off) or at least "
                f"{HEALTH_EVERY_MIN:g} seconds",
                hint="e.g. --health-every 2",
            )
        if not self.health_timeout > 0 or math.isinf(self.health_timeout):
            raise UsageError(f"health probe timeout {self.health_timeout:g}: must be positive")
        if self.max_failure_rate > 1:
            raise UsageError(
                f"--max-failure-rate {self.max_failure_rate:g}: a fraction of requests, 0 to 1",
                hint="e.g. --max-failure-rate 0.05 (5%)",
            )
        if self.api not in APIS:
            raise UsageError(f"--api {self.api}: unknown API", hint=f"one of {', '.join(APIS)}")
        if self.concurrency < 1:
            raise UsageError(f"--concurrency {self.concurrency}: must be at least 1")
        if self.num_prompts is not None and self.num_prompts < 1:
            raise UsageError(f"--num-prompts {self.num_prompts}: must be at least 1")
        if self.rate is not None:
            if self.rate <= 0:
                raise UsageError(f"--rate {self.rate}: must be positive")
            if self.duration is None and self.num_prompts is None:
                raise UsageError(
                    "--rate needs --duration S or --num-prompts N to know when to stop"
                )
        if self.duration is not None and self.rate is None:
            raise UsageError("--duration applies to --rate mode", hint="add --rate R")
        if self.max_new_tokens < 1:
            raise UsageError(f"--max-new-tokens {self.max_new_tokens}: must be at least 1")
        if self.warmup < 0:
            raise UsageError(f"--warmup {self.warmup}: must be 0 or more")
        if self.dataset and self.random_input_len:
            raise UsageError("--dataset and --random-input-len exclude each other")

    def effective_num_prompts(self) -> int | None:
        if self.num_prompts is not None:
            return self.num_prompts
        if self.rate is not None:
            return None  # bounded by --duration
        return 10 if self.concurrency == 1 else 4 * self.concurrency


# --------------------------------------------------------------------------------------
# Prompts
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prompt:
    text: str | None = None
    input_ids: tuple[int, ...] | None = None  # native API only (--random-input-len)
    approx_tokens: int = 0


# The built-in set: fixed topics, each prompt padded to the same length so runs compare.
_TOPICS = (
    "how a CPU cache hierarchy hides memory latency",
    "the history of the printing press and its effect on science",
    "how speculative decoding speeds up language-model inference",
    "why the sky is blue and sunsets are red",
    "how public-key cryptography lets strangers agree on a secret",
    "the water cycle and its role in shaping climate",
    "how a compiler turns source code into machine instructions",
    "the life cycle of a star from nebula to remnant",
    "how vaccines train the immune system",
    "the design of a distributed key-value store",
    "how GPS receivers compute their position",
    "the causes and consequences of the industrial revolution",
    "how transformers use attention to model language",
    "how a bicycle stays upright while moving",
    "the chemistry of baking bread",
    "how TCP recovers from lost packets",
)
_FILLER = (
    "Explain each step carefully, give concrete examples, define every term you use, "
    "and point out common misconceptions along the way. "
)
BUILTIN_PROMPT_WORDS = 120


def builtin_prompts() -> list[Prompt]:
    out = []
    for topic in _TOPICS:
        words = f"Write a detailed, well-structured essay about {topic}. ".split()
        filler = _FILLER.split()
        i = 0
        while len(words) < BUILTIN_PROMPT_WORDS:
            words.append(filler[i % len(filler)])
            i += 1
        out.append(Prompt(text=" ".join(words), approx_tokens=int(len(words) * 1.3)))
    return out


# Short common English words: about one token each in the usual BPE vocabularies.
_VOCAB = (
    "the of and to in is it that for on was with as at by be this are from or have an they "
    "which one you were all we there can been has more if will would what so when who no "
    "out up into just some could them than then now only its time new over also after"
).split()


def random_prompts(input_len: int, count: int, *, seed: int, ids: bool) -> list[Prompt]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        if ids:
            # Token ids in a range every real vocabulary covers; exact input length.
            out.append(
                Prompt(
                    input_ids=tuple(rng.randrange(1000, 20000) for _ in range(input_len)),
                    approx_tokens=input_len,
                )
            )
        else:
            text = " ".join(rng.choice(_VOCAB) for _ in range(input_len))
            out.append(Prompt(text=text, approx_tokens=input_len))
    return out


def load_dataset(path: str | Path) -> list[Prompt]:
    """JSONL with "prompt"/"text" per line, or ShareGPT-style conversations (JSON or JSONL)."""
    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputNotFound(
            f"{p}: no such dataset file", hint="pass a JSONL or ShareGPT JSON file"
        ) from None
    except IsADirectoryError:
        raise UsageError(f"{p}: is a folder, not a dataset file") from None
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{p}: the dataset is not UTF-8 text ({exc.reason} at byte {exc.start})",
            hint='pass a JSONL file with "prompt"/"text" or a ShareGPT JSON file',
        ) from None
    except OSError as exc:
        raise InputNotFound(
            f"{p}: cannot read the dataset ({exc.strerror or exc})", hint="check its mode"
        ) from None
    records: list[Any]
    stripped = raw.lstrip()
    if stripped.startswith("["):
        try:
            records = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ParseError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        lines = list(range(1, len(records) + 1))
    else:
        records, lines = [], []
        for no, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ParseError(
                    f"{p}:{no}: not a JSON object ({exc.msg})",
                    hint='one object per line with "prompt" or "text"',
                ) from None
            lines.append(no)
    prompts = []
    for no, rec in zip(lines, records):
        text = _prompt_of(rec)
        if text is None:
            raise ParseError(
                f"{p}:{no}: no prompt in this record",
                hint='give "prompt" or "text", or ShareGPT "conversations"',
            )
        if text.strip():
            prompts.append(Prompt(text=text, approx_tokens=int(len(text.split()) * 1.3)))
    if not prompts:
        raise UsageError(f"{p}: the dataset holds no prompts")
    return prompts


def _prompt_of(rec: Any) -> str | None:
    if isinstance(rec, str):
        return rec
    if not isinstance(rec, dict):
        return None
    for key in ("prompt", "text"):
        if isinstance(rec.get(key), str):
            return rec[key]
    conv = rec.get("conversations") or rec.get("messages")
    if isinstance(conv, list):
        for turn in conv:
            if not isinstance(turn, dict):
                continue
            who = turn.get("from", turn.get("role"))
            value = turn.get("value", turn.get("content"))
            if who in ("human", "user") and isinstance(value, str):
                return value
    return None


def make_prompts(cfg: BenchConfig, count: int) -> list[Prompt]:
    if cfg.dataset:
        return load_dataset(cfg.dataset)
    if cfg.random_input_len:
        return random_prompts(
            cfg.random_input_len, max(count, 1), seed=cfg.seed, ids=cfg.api == "native"
        )
    return builtin_prompts()


# --------------------------------------------------------------------------------------
# Server-sent events (WHATWG-style, incremental)
# --------------------------------------------------------------------------------------
class SSEError(Exception):
    """The byte stream is not valid server-sent events (bad UTF-8, a line or event over
    MAX_SSE_EVENT bytes)."""


async def read_capped(resp: Any, cap: int, what: str) -> bytes:
    """A response body of at most ``cap`` bytes; BodyTooLarge past it (nothing more is read)."""
    parts: list[bytes] = []
    n = 0
    while True:
        chunk = await resp.content.read(min(65536, cap + 1 - n))
        if not chunk:
            return b"".join(parts)
        n += len(chunk)
        if n > cap:
            raise BodyTooLarge(
                f"{what}: the answer is over {cap:,} bytes; not read further",
                hint="is this an SGLang server? check the URL",
            )
        parts.append(chunk)


@dataclass
class SSEEvent:
    data: str
    event: str = ""
    id: str | None = None


class SSEParser:
    """Incremental event-stream parser following the WHATWG rules.

    Handles ``data:`` with or without the space, comments, ``event:``/``id:``/``retry:``
    lines, LF / CRLF / lone-CR line ends (also a CRLF split between two reads), a UTF-8 BOM,
    multi-line ``data:``, and events split anywhere across reads. One deliberate leniency:
    at end of stream a pending event without its blank-line terminator is still dispatched
    (servers that forget the last blank line still said ``[DONE]``).
    """

    __slots__ = ("_buf", "_data", "_size", "_event", "_id", "_bom_checked", "_skip_lf")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[str] = []
        self._size = 0  # characters in _data: an event that never ends is cut at MAX_SSE_EVENT
        self._event = ""
        self._id: str | None = None
        self._bom_checked = False
        self._skip_lf = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        events = self._feed(chunk)
        if len(self._buf) > MAX_SSE_EVENT:
            self._buf = b""
            raise SSEError(f"an event-stream line over {MAX_SSE_EVENT >> 20} MiB without its end")
        return events

    def _feed(self, chunk: bytes) -> list[SSEEvent]:
        buf = self._buf + chunk if self._buf else chunk
        if not self._bom_checked:
            if len(buf) < 3 and b"\xef\xbb\xbf".startswith(buf):
                self._buf = buf
                return []
            if buf.startswith(b"\xef\xbb\xbf"):
                buf = buf[3:]
            self._bom_checked = True
        if self._skip_lf and buf:
            if buf[:1] == b"\n":
                buf = buf[1:]
            self._skip_lf = False
        events: list[SSEEvent] = []
        if b"\r" not in buf:  # the common case: LF only
            *lines, rest = buf.split(b"\n")
            for line in lines:
                self._line(line, events)
            self._buf = rest
            return events
        start, n = 0, len(buf)
        while start < n:
            i_n = buf.find(b"\n", start)
            i_r = buf.find(b"\r", start)
            if i_n == -1 and i_r == -1:
                break
            if i_r == -1 or (i_n != -1 and i_n < i_r):
                self._line(buf[start:i_n], events)
                start = i_n + 1
            else:
                self._line(buf[start:i_r], events)
                if i_r + 1 < n:
                    start = i_r + 2 if buf[i_r + 1] == 0x0A else i_r + 1
                else:
                    start = n
                    self._skip_lf = True
        self._buf = buf[start:]
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: the last line and the last event, even without terminators."""
        events: list[SSEEvent] = []
        if self._buf:
            buf, self._buf = self._buf, b""
            if not self._bom_checked and buf.startswith(b"\xef\xbb\xbf"):
                buf = buf[3:]
            self._line(buf, events)
        if self._data:
            self._line(b"", events)
        return events

    def _line(self, raw: bytes, events: list[SSEEvent]) -> None:
        if not raw:
            if self._data:
                events.append(SSEEvent("\n".join(self._data), self._event, self._id))
            self._data = []
            self._size = 0
            self._event = ""
            return
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SSEError(f"invalid UTF-8 in the event stream ({exc.reason})") from None
        if line[0] == ":":
            return  # comment / keep-alive
        name, sep, value = line.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._size += len(value) + 1
            if self._size > MAX_SSE_EVENT:
                raise SSEError(f"an event over {MAX_SSE_EVENT >> 20} MiB without its blank line")
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        # "retry" and unknown fields are ignored, as the standard says


# --------------------------------------------------------------------------------------
# One request
# --------------------------------------------------------------------------------------
@dataclass
class RequestResult:
    index: int
    ok: bool = False
    reason: str | None = None  # one of REASONS when not ok, "cancelled" when cut by a stop
    detail: str | None = None
    status: int | None = None
    prompt_tokens: int | None = None
    output_tokens: int = 0
    tokens_estimated: bool = False
    chunks: int = 0
    start_s: float = 0.0  # offset from the benchmark start
    ttft_s: float | None = None
    e2e_s: float | None = None
    tpot_s: float | None = None
    itl_mean_s: float | None = None
    tok_s: float | None = None  # output_tokens / e2e
    accept_len: float | None = None
    verify_ct: float | None = None
    finish_reason: str | None = None
    body: str | None = None  # first bytes of an HTTP error body
    meta: dict[str, Any] | None = field(default=None, repr=False)  # final meta_info (native)
    itls: list[float] = field(default_factory=list, repr=False)
    # internal progress, for requests cut by a stop
    _t0: float = field(default=0.0, repr=False)


class _Stream:
    """What the stream said so far (API-specific interpretation of each event)."""

    def __init__(self, api: str):
        self.api = api
        self.tokens: int | None = None  # server-reported count (cumulative)
        self.text_len = 0
        self.content_chunks = 0
        self.done = False
        self.finish: str | None = None
        self.final_meta: dict[str, Any] | None = None
        self.usage: dict[str, Any] | None = None
        self.error: str | None = None
        self.spec: dict[str, Any] | None = None

    def event(self, ev: SSEEvent) -> int:
        """Interpret one event; return how many new tokens it carried (0 if none/unknown)."""
        data = ev.data
        if data == "[DONE]":
            self.done = True
            return 0
        if not data.strip():
            return 0
        if ev.event == "error":
            self.error = data[:500]
            return 0
        if ev.event not in ("", "message"):
            return 0
        try:
            obj = json.loads(data)
        except json.JSONDecodeError as exc:
            raise SSEError(f"event data is not JSON ({exc.msg}): {data[:120]!r}") from None
        if not isinstance(obj, dict):
            raise SSEError(f"event data is not a JSON object: {data[:120]!r}")
        if "error" in obj and obj["error"]:
            err = obj["error"]
            self.error = (err.get("message") if isinstance(err, dict) else str(err)) or str(err)
            return 0
        if self.api == "native":
            return self._native(obj)
        return self._openai(obj)

    def _native(self, obj: dict[str, Any]) -> int:
        meta = obj.get("meta_info")
        if not isinstance(meta, dict):
            raise SSEError("a /generate event without meta_info")
        text = obj.get("text")
        new_text = isinstance(text, str) and len(text) != self.text_len
        if isinstance(text, str):
            self.text_len = len(text)
        ct = meta.get("completion_tokens")
        new = 0
        if isinstance(ct, int):
            prev = self.tokens or 0
            new = max(ct - prev, 0)
            self.tokens = max(ct, prev)
        elif new_text:
            self.content_chunks += 1
            new = 1
        fr = meta.get("finish_reason")
        if fr:
            self.finish = fr.get("type", "stop") if isinstance(fr, dict) else str(fr)
            self.final_meta = meta
            if self.finish == "abort":
                msg = fr.get("message") if isinstance(fr, dict) else None
                self.error = f"request aborted by the server: {msg or 'no message'}"
        if new and isinstance(ct, int) and new_text:
            self.content_chunks += 1
        return new

    def _openai(self, obj: dict[str, Any]) -> int:
        usage = obj.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.usage = usage
        ext = obj.get("sglext")
        if isinstance(ext, dict) and isinstance(ext.get("spec_tokens_details"), dict):
            self.spec = ext["spec_tokens_details"]
        new = 0
        for ch in obj.get("choices") or ():
            if not isinstance(ch, dict):
                continue
            if self.api == "openai":
                delta = ch.get("delta") or {}
                piece = delta.get("content") or delta.get("reasoning_content") or ""
            else:
                piece = ch.get("text") or ""
            if piece:
                self.text_len += len(piece)
                self.content_chunks += 1
                new = 1  # at least one token; the count comes from usage
            if ch.get("finish_reason"):
                self.finish = str(ch["finish_reason"])
                if self.finish == "abort":
                    self.error = "request aborted by the server"
        return new

    def completion_tokens(self) -> tuple[int, bool]:
        """(tokens, estimated)."""
        if self.api == "native":
            if self.tokens is not None:
                return self.tokens, False
            return self.content_chunks, True
        if self.usage is not None:
            return int(self.usage["completion_tokens"]), False
        return self.content_chunks, True

    def accept(self, tokens: int) -> tuple[float | None, float | None]:
        """(accept length, verify rounds) from the final chunk's spec fields (§5.1)."""
        meta = self.final_meta if self.api == "native" else self.spec
        if not meta or tokens <= 0:
            return None, None
        ct = meta.get("spec_verify_ct")
        al = meta.get("spec_accept_length")
        if isinstance(ct, int | float) and ct > 0:
            # 0.4.2-0.5.3 give only the verify count; later versions define
            # spec_accept_length as exactly completion_tokens / verify_ct.
            return (float(al) if isinstance(al, int | float) and al > 0 else tokens / ct), float(ct)
        if isinstance(al, int | float) and al > 0:
            return float(al), tokens / float(al)
        return None, None


def _payload(cfg: BenchConfig, prompt: Prompt, model: str | None) -> dict[str, Any]:
    if cfg.api == "native":
        body: dict[str, Any] = {
            "sampling_params": {
                "max_new_tokens": cfg.max_new_tokens,
                "temperature": cfg.temperature,
                "ignore_eos": cfg.ignore_eos,
            },
            "stream": True,
        }
        if prompt.input_ids is not None:
            body["input_ids"] = list(prompt.input_ids)
        else:
            body["text"] = prompt.text
        return body
    body = {
        "model": model or "default",
        "temperature": cfg.temperature,
        "max_tokens": cfg.max_new_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": cfg.ignore_eos,
    }
    if cfg.api == "openai":
        body["messages"] = [{"role": "user", "content": prompt.text or ""}]
        body["max_completion_tokens"] = cfg.max_new_tokens
    else:
        body["prompt"] = prompt.text or ""
    return body


async def _request(
    session: Any,
    url: str,
    cfg: BenchConfig,
    body: dict[str, Any],
    res: RequestResult,
    t_origin: float,
) -> RequestResult:
    """Send one streaming request and fill ``res``; never raises except on cancellation."""
    import aiohttp

    loop = asyncio.get_running_loop()
    t0 = time.perf_counter()
    res._t0 = t0
    res.start_s = t0 - t_origin
    total_at = loop.time() + cfg.request_timeout
    st = _Stream(cfg.api)
    parser = SSEParser()
    phase = "ttft"
    t_last: float | None = None
    last_tokens = 0
    gaps: list[tuple[float, int]] = []  # (gap, new tokens) after the first token

    def deadline_for(ph: str) -> float:
        lim = cfg.ttft_timeout if ph == "ttft" else cfg.idle_timeout
        if ph == "ttft":
            return min(total_at, loop.time() + lim - (time.perf_counter() - t0))
        return min(total_at, loop.time() + lim)

    def handle(events: list[SSEEvent]) -> None:
        nonlocal phase, t_last, last_tokens
        now = time.perf_counter()
        for ev in events:
            new = st.event(ev)
            res.chunks += 1
            if new <= 0:
                continue
            if res.ttft_s is None:
                res.ttft_s = now - t0
                phase = "idle"
            elif t_last is not None:
                gaps.append((now - t_last, new))
            t_last = now
            last_tokens += new

    try:
        async with asyncio.timeout_at(deadline_for("ttft")) as tmo:
            try:
                resp = await session.post(url, json=body)
            except aiohttp.ClientConnectorError as exc:
                res.reason, res.detail = "conn_error", _conn_detail(exc)
                return res
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                res.reason, res.detail = "conn_error", f"connection lost before a response ({exc})"
                return res
            async with resp:
                res.status = resp.status
                if resp.status != 200:
                    tmo.reschedule(min(total_at, loop.time() + cfg.idle_timeout))
                    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                        raw = await resp.content.read(MAX_BODY)
                        res.body = raw.decode("utf-8", "replace")
                    res.reason = "http_error"
                    res.detail = f"HTTP {resp.status} {resp.reason or ''}".strip()
                    return res
                try:
                    while True:
                        tmo.reschedule(deadline_for(phase))
                        chunk = await resp.content.readany()
                        if not chunk:
                            break
                        handle(parser.feed(chunk))
                    handle(parser.close())
                except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
                    res.detail = f"stream cut: {type(exc).__name__}"
                except aiohttp.ClientOSError as exc:
                    res.detail = f"stream cut: {exc}"
    except TimeoutError:
        res.reason = "timeout"
        if loop.time() >= total_at - 1e-3:
            res.detail = f"no complete answer within --request-timeout {cfg.request_timeout:g}s"
        elif phase == "ttft":
            res.detail = f"no first token within --ttft-timeout {cfg.ttft_timeout:g}s"
        else:
            res.detail = f"stream idle longer than --idle-timeout {cfg.idle_timeout:g}s"
    except SSEError as exc:
        res.reason, res.detail = "protocol_error", str(exc)
    except aiohttp.ClientError as exc:
        res.reason, res.detail = "conn_error", f"{type(exc).__name__}: {exc}"
    end = time.perf_counter()
    res.e2e_s = end - t0
    tokens, estimated = st.completion_tokens()
    res.output_tokens = tokens
    res.tokens_estimated = estimated
    res.finish_reason = st.finish
    if res.reason is None:
        if st.error:
            res.reason, res.detail = "server_error", st.error[:500]
        elif not (st.done or st.finish):
            res.reason = "truncated"
            res.detail = res.detail or "stream ended without [DONE] or a finish reason"
        elif tokens <= 0:
            res.reason, res.detail = "empty_output", "the server answered with no tokens"
        elif cfg.api != "native" and st.usage is None and not st.done:
            res.reason, res.detail = "truncated", "no usage chunk and no [DONE]"
    if res.reason is not None:
        return res
    res.ok = True
    if res.ttft_s is None:  # tokens only visible in the final usage chunk
        res.ttft_s = res.e2e_s
    res.tok_s = tokens / res.e2e_s if res.e2e_s > 0 else None
    if tokens > 1:
        res.tpot_s = (res.e2e_s - res.ttft_s) / (tokens - 1)
        res.itls = _itls(gaps, tokens, scale=cfg.api != "native")
        if res.itls:
            res.itl_mean_s = sum(res.itls) / len(res.itls)
    res.accept_len, res.verify_ct = st.accept(tokens)
    res.meta = st.final_meta
    if isinstance(st.usage, dict) and isinstance(st.usage.get("prompt_tokens"), int):
        res.prompt_tokens = st.usage["prompt_tokens"]
    elif st.final_meta and isinstance(st.final_meta.get("prompt_tokens"), int):
        res.prompt_tokens = st.final_meta["prompt_tokens"]
    return res


def _itls(gaps: list[tuple[float, int]], tokens: int, *, scale: bool) -> list[float]:
    """Inter-token latencies: each gap spread evenly over the tokens it delivered.

    For the OpenAI APIs a chunk's token count is unknown (only the total is), so the
    tokens after the first are spread evenly over the chunks that carried them.
    """
    if not gaps:
        return []
    factor = 1.0
    if scale:
        counted = sum(n for _, n in gaps)
        if counted <= 0 or tokens <= 1:
            return []
        factor = (tokens - 1) / counted
    out: list[float] = []
    for gap, n in gaps:
        k = n * factor
        if k <= 0:
            continue
        per = gap / k
        whole = max(int(round(k)), 1)
        out.extend([per] * whole)
    return out


def _conn_detail(exc: Exception) -> str:
    os_err = getattr(exc, "os_error", None)
    if isinstance(os_err, ConnectionRefusedError):
        why = "connection refused (nothing listens there: the server is down or not up yet)"
    else:
        why = getattr(os_err, "strerror", None) or str(os_err or exc)
    return f"cannot connect: {why}"


# --------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------
# /health while measuring (H06)
# --------------------------------------------------------------------------------------
@dataclass
class HealthSample:
    t_s: float  # when the probe was sent, seconds from the start of the measured window
    status: int | None  # the HTTP status; None when no answer came
    latency_ms: float  # until the answer, or until the probe gave up
    error: str | None = None  # timeout | conn_error | disconnected | error (no status)


# The probe's exceptions, by kind (first match wins; TimeoutError covers aiohttp's own).
def _health_error_kinds() -> tuple[tuple[type[BaseException], str], ...]:
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


# --------------------------------------------------------------------------------------
# The benchmark
# --------------------------------------------------------------------------------------
@dataclass
class Progress:
    done: int = 0
    failed: int = 0
    in_flight: int = 0
    tokens: int = 0
    elapsed_s: float = 0.0
    total: int | None = None
    phase: str = "warmup"

    @property
    def tok_s(self) -> float | None:
        return self.tokens / self.elapsed_s if self.elapsed_s > 0 and self.tokens else None


@dataclass
class BenchReport:
    config: BenchConfig
    bench_id: str
    started_at: dt.datetime
    duration_s: float
    results: list[RequestResult]
    summary: dict[str, Any]
    interrupted: bool = False
    deadline_hit: bool = False
    server_dead: bool = False
    death: str | None = None  # what the health check saw
    flush: str = "skipped"  # ok | unsupported | failed: ... | skipped
    accept_len_server: float | None = None
    accept_len_server_scope: str | None = None  # window (after flush) | lifetime
    accept_len_log: float | None = None  # the run's Decode batch lines in the bench window
    accept_len_log_lines: int = 0
    server_version: str | None = None
    server_info: dict[str, Any] | None = None
    warmup_failed: int = 0
    run_id: str | None = None
    run_name: str | None = None
    health: dict[str, Any] = field(default_factory=dict)  # health_summary()
    health_samples: list[HealthSample] = field(default_factory=list)
    via: str | None = None  # "ssh HOST": the requests went through an SSH tunnel
    warnings: list[str] = field(default_factory=list)  # answers past their byte cap

    @property
    def failure_rate(self) -> float:
        n = self.summary["completed"] + self.summary["failed"]
        return self.summary["failed"] / n if n else 0.0

    def as_dict(self) -> dict[str, Any]:
        cfg = asdict(self.config)
        out = {
            "bench_id": self.bench_id,
            "run_id": self.run_id,
            "run_name": self.run_name,
            "url": self.config.url,
            "via": self.via,
            "api": self.config.api,
            "mode": self.config.mode,
            "concurrency": self.config.concurrency,
            "rate": self.config.rate,
            "num_prompts": len(self.results),
            "started_at": self.started_at.isoformat(timespec="milliseconds"),
            "duration_s": self.duration_s,
            "interrupted": self.interrupted,
            "deadline_hit": self.deadline_hit,
            "server_dead": self.server_dead,
            "death": self.death,
            "flush_cache": self.flush,
            "accept_len_server": self.accept_len_server,
            "accept_len_server_scope": self.accept_len_server_scope,
            "accept_len_log": self.accept_len_log,
            "accept_len_log_lines": self.accept_len_log_lines,
            "server_version": self.server_version,
            "warmup_failed": self.warmup_failed,
            "failure_rate": self.failure_rate,
            "config": cfg,
        }
        out.update(self.summary)
        out["health"] = {**self.health, "samples": [asdict(h) for h in self.health_samples]}
        if self.warnings:
            out["warnings"] = self.warnings
        return out


class _Runner:
    def __init__(self, cfg: BenchConfig, progress: Callable[[Progress], None] | None):
        self.cfg = cfg
        self.base = cfg.url.rstrip("/")
        self.shown = redact_url(self.base)  # what messages say (no password)
        self.url = self.base + ENDPOINTS[cfg.api]
        self.warnings: list[str] = []
        self.on_progress = progress
        self.prog = Progress(total=cfg.effective_num_prompts())
        self.results: list[RequestResult] = []
        self.inflight: dict[asyncio.Task[Any], RequestResult] = {}
        self.stop = asyncio.Event()
        self.stop_reason: str | None = None
        self.consecutive = 0
        self.health_task: asyncio.Task[Any] | None = None
        self.server_dead = False
        self.death: str | None = None
        self.model: str | None = cfg.model
        self.t_origin = 0.0
        self.health_samples: list[HealthSample] = []
        self.sampler: asyncio.Task[Any] | None = None

    # -- small HTTP helpers (all with deadlines) ------------------------------------------
    async def _get_json(self, session: Any, path: str, timeout: float = 10.0) -> Any:
        import aiohttp

        try:
            async with asyncio.timeout(timeout):
                async with session.get(self.base + path) as r:
                    if r.status != 200:
                        return None
                    return json.loads(await read_capped(r, MAX_JSON_BODY, self.shown + path))
        except BodyTooLarge as exc:
            self.warnings.append(str(exc))
            return None
        except (aiohttp.ClientError, TimeoutError, ValueError, OSError):
            return None

    async def server_info(self, session: Any) -> dict[str, Any] | None:
        for path in ("/server_info", "/get_server_info"):
            info = await self._get_json(session, path)
            if isinstance(info, dict):
                return info
        return None

    async def flush(self, session: Any) -> str:
        import aiohttp

        try:
            async with asyncio.timeout(30):
                async with session.post(self.base + "/flush_cache") as r:
                    await read_capped(r, MAX_SMALL_BODY, self.shown + "/flush_cache")
                    if r.status == 200:
                        return "ok"
                    if r.status in (404, 405):
                        return "unsupported"
                    return f"failed: HTTP {r.status}"
        except BodyTooLarge:
            return f"failed: body over {MAX_SMALL_BODY:,} bytes"
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return f"failed: {type(exc).__name__}"

    async def health(self, session: Any) -> str | None:
        """None when the server answers /health at all; else what was seen."""
        import aiohttp

        try:
            async with asyncio.timeout(max(5.0, self.cfg.connect_timeout)):
                async with session.get(self.base + "/health") as r:
                    await read_capped(r, MAX_SMALL_BODY, self.shown + "/health")
                    return None
        except BodyTooLarge as exc:
            return str(exc)
        except aiohttp.ClientConnectorError as exc:
            return _conn_detail(exc)
        except TimeoutError:
            return "/health did not answer within 5 s"
        except (aiohttp.ClientError, OSError) as exc:
            return f"/health failed: {type(exc).__name__}"

    # -- /health sampling (H06) ----------------------------------------------------------
    async def probe_health(self, session: Any) -> HealthSample:
        """One GET /health within ``health_timeout``; never raises (except cancellation)."""
        t0 = time.perf_counter()
        status: int | None = None
        error: str | None = None
        try:
            async with asyncio.timeout(self.cfg.health_timeout):
                async with session.get(self.base + "/health") as r:
                    await read_capped(r, MAX_SMALL_BODY, self.shown + "/health")
                    status = r.status  # an endless body is no answer: status stays None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = next((k for t, k in _health_error_kinds() if isinstance(exc, t)), "error")
        return HealthSample(
            t_s=round(t0 - self.t_origin, 4),
            status=status,
            latency_ms=round((time.perf_counter() - t0) * 1000, 3),
            error=error,
        )

    async def sample_health(self, session: Any) -> None:
        """Probe /health at 0, every, 2*every, ... seconds into the window, one at a time: a
        probe that outlasts the interval skips the ticks it covered (no pile-up on a sick
        server). Runs until cancelled; the samples taken stay in ``health_samples``."""
        every = self.cfg.health_every
        tick = 0
        while True:
            self.health_samples.append(await self.probe_health(session))
            now = time.perf_counter() - self.t_origin
            tick = max(tick + 1, math.ceil(now / every))
            await asyncio.sleep(max(tick * every - now, 0))

    async def stop_sampling(self) -> None:
        """Cancel the sampler at once: a probe in flight is dropped, never waited for."""
        task, self.sampler = self.sampler, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})

    # -- lifecycle ---------------------------------------------------------------------
    async def _wait_body(self, main: asyncio.Task[None], deadline_at: float | None) -> None:
        """Wait for the benchmark body; past the deadline stop it, then cut what still waits."""
        remaining = deadline_at - time.perf_counter() if deadline_at else None
        done, _ = await asyncio.wait({main}, timeout=remaining)
        if not done:
            self.request_stop("deadline")
            # the requests are cancelled; give the bookkeeping a moment, then cut
            # whatever still waits (a /server_info or /flush_cache that never
            # answers): the deadline bounds the whole benchmark
            done, _ = await asyncio.wait({main}, timeout=DEADLINE_GRACE_S)
            if not done:
                main.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await main
        elif main.exception() is not None:
            raise main.exception()  # type: ignore[misc]

    def request_stop(self, reason: str) -> None:
        if reason == "interrupt" and self.stop_reason == "interrupt":
            raise KeyboardInterrupt  # a second Ctrl-C: stop waiting
        if self.stop_reason is None:
            self.stop_reason = reason
        self.stop.set()
        for task in list(self.inflight):
            task.cancel()

    def _emit(self) -> None:
        if self.on_progress is not None:
            self.prog.in_flight = len(self.inflight)
            if self.t_origin:
                self.prog.elapsed_s = time.perf_counter() - self.t_origin
            with contextlib.suppress(Exception):
                self.on_progress(self.prog)

    async def _one(self, session: Any, index: int, prompt: Prompt, measured: bool) -> None:
        res = RequestResult(index=index)
        body = _payload(self.cfg, prompt, self.model)
        task = asyncio.current_task()
        assert task is not None
        self.inflight[task] = res
        self._emit()
        try:
            await _request(session, self.url, self.cfg, body, res, self.t_origin)
        except asyncio.CancelledError:
            res.reason = "timeout" if self.stop_reason == "deadline" else "cancelled"
            res.detail = f"stopped by {self.stop_reason or 'cancellation'}"
            if res._t0:
                res.e2e_s = time.perf_counter() - res._t0
            self.inflight.pop(task, None)
            if measured:
                self.results.append(res)
            raise
        self.inflight.pop(task, None)
        if not measured:
            if not res.ok:
                raise _WarmupFailed(res)
            return
        self.results.append(res)
        self.prog.done += 1
        if res.ok:
            self.prog.tokens += res.output_tokens
        else:
            self.prog.failed += 1
        self._emit()
        if res.reason in ("conn_error", "truncated"):
            self.consecutive += 1
            if self.consecutive >= self.cfg.dead_after and self.health_task is None:
                self.health_task = asyncio.create_task(self._check_health(session))
        else:
            self.consecutive = 0

    async def _check_health(self, session: Any) -> None:
        seen = await self.health(session)
        self.health_task = None
        if seen is None:
            self.consecutive = 0
            return
        self.server_dead = True
        off = time.perf_counter() - self.t_origin
        self.death = (
            f"{self.cfg.dead_after} requests in a row failed and {self.shown}/health "
            f"says: {seen} (at {off:.1f}s into the benchmark)"
        )
        self.request_stop("server death")

    async def _spawn(self, session: Any, index: int, prompt: Prompt) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self._one(session, index, prompt, True)

    async def measure(self, session: Any, prompts: list[Prompt]) -> None:
        cfg = self.cfg
        total = cfg.effective_num_prompts()
        counter = iter(range(total if total is not None else 1 << 62))

        def next_index() -> int | None:
            if self.stop.is_set():
                return None
            return next(counter, None)

        if cfg.rate is None:

            async def worker() -> None:
                while (i := next_index()) is not None:
                    await self._spawn(session, i, prompts[i % len(prompts)])

            workers = [asyncio.create_task(worker()) for _ in range(cfg.concurrency)]
            await asyncio.gather(*workers, return_exceptions=True)
            return
        rng = random.Random(cfg.seed)
        t_end = time.perf_counter() + cfg.duration if cfg.duration else None
        tasks: list[asyncio.Task[Any]] = []
        while True:
            gap = rng.expovariate(cfg.rate)
            if t_end is not None and time.perf_counter() + gap >= t_end:
                # wait out the remaining window without launching
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), max(t_end - time.perf_counter(), 0))
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), gap)
            i = next_index()
            if i is None:
                break
            if cfg.concurrency > 1 and len(self.inflight) >= cfg.concurrency:
                # --rate with --concurrency caps requests in flight (bench_serving's max-concurrency)
                while len(self.inflight) >= cfg.concurrency and not self.stop.is_set():
                    await asyncio.sleep(0.005)
            tasks.append(asyncio.create_task(self._spawn(session, i, prompts[i % len(prompts)])))
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def run(self, handle_signals: bool) -> BenchReport:
        import aiohttp

        cfg = self.cfg
        loop = asyncio.get_running_loop()
        installed: list[int] = []
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(sig, self.request_stop, "interrupt")
                    installed.append(sig)
        t_wall0 = time.perf_counter()
        deadline_at = t_wall0 + cfg.deadline if cfg.deadline else None
        n = cfg.effective_num_prompts() or 64
        prompts = make_prompts(cfg, n)
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        timeout = aiohttp.ClientTimeout(
            total=None, connect=cfg.connect_timeout, sock_connect=cfg.connect_timeout
        )
        info_before: dict[str, Any] | None = None
        info_after: dict[str, Any] | None = None
        flush = "skipped"
        warmup_failed = 0
        started_at = dt.datetime.now()
        duration = 0.0
        try:
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

                async def body() -> None:
                    nonlocal info_before, info_after, flush, warmup_failed, started_at, duration
                    info_before = await self.server_info(session)
                    if cfg.api != "native" and self.model is None:
                        models = await self._get_json(session, "/v1/models")
                        with contextlib.suppress(Exception):
                            self.model = models["data"][0]["id"]
                    for w in range(cfg.warmup):
                        if self.stop.is_set():
                            return
                        try:
                            await self._one(session, -1 - w, prompts[w % len(prompts)], False)
                        except _WarmupFailed:
                            warmup_failed += 1
                        except asyncio.CancelledError:
                            if not self.stop.is_set():
                                raise
                            return
                    if self.stop.is_set():
                        return
                    if cfg.flush_cache:
                        flush = await self.flush(session)
                    self.prog.phase = "measure"
                    started_at = dt.datetime.now()
                    self.t_origin = time.perf_counter()
                    self._emit()
                    if cfg.health_every > 0:
                        self.sampler = asyncio.create_task(self.sample_health(session))
                    try:
                        await self.measure(session, prompts)
                    finally:
                        duration = time.perf_counter() - self.t_origin
                        await self.stop_sampling()
                    if self.health_task is not None:
                        with contextlib.suppress(Exception):
                            await self.health_task
                    if not self.server_dead and self.stop_reason != "deadline":
                        info_after = await self.server_info(session)

                main = asyncio.create_task(body())
                try:
                    await self._wait_body(main, deadline_at)
                finally:
                    # never leave the session with body() still running: a Ctrl-C that
                    # cancels this task would let it call a closed session and print a
                    # traceback ("Session is closed") after the run
                    if not main.done():
                        main.cancel()
                        with contextlib.suppress(asyncio.CancelledError, Exception):
                            await main
        finally:
            await self.stop_sampling()  # body() stops it; this covers a cancelled body()
            for sig in installed:
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(sig)
        if not duration and self.t_origin:
            duration = time.perf_counter() - self.t_origin
        results = sorted(self.results, key=lambda r: r.index)
        summary = summarize(results, duration)
        rep = BenchReport(
            config=cfg,
            bench_id=uuid.uuid4().hex[:12],
            started_at=started_at,
            duration_s=duration,
            results=results,
            summary=summary,
            interrupted=self.stop_reason == "interrupt",
            deadline_hit=self.stop_reason == "deadline",
            server_dead=self.server_dead,
            death=self.death,
            flush=flush,
            warmup_failed=warmup_failed,
            health=health_summary(self.health_samples, cfg.health_every, cfg.health_timeout),
            health_samples=list(self.health_samples),
            warnings=list(self.warnings),
        )
        info = info_after or info_before
        if info is not None:
            rep.server_info = info
            rep.server_version = str(info.get("version")) if info.get("version") else None
        if info_after is not None:
            al = server_accept_length(info_after)
            if al is not None:
                rep.accept_len_server = al
                rep.accept_len_server_scope = "window" if flush == "ok" else "lifetime"
        return rep


class _WarmupFailed(Exception):
    def __init__(self, res: RequestResult):
        self.res = res


def server_accept_length(info: dict[str, Any]) -> float | None:
    """avg_spec_accept_length from /server_info (0.4.4-0.4.6 top level, 0.4.7+ per DP rank)."""
    cands: list[Any] = []
    dec = info.get("decode")
    if isinstance(dec, list) and dec and isinstance(dec[0], dict):
        cands.append(dec[0].get("avg_spec_accept_length"))
        states = dec[0].get("internal_states")
        if isinstance(states, list) and states and isinstance(states[0], dict):
            cands.append(states[0].get("avg_spec_accept_length"))
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        cands.append(states[0].get("avg_spec_accept_length"))
    cands.append(info.get("avg_spec_accept_length"))
    for c in cands:
        if isinstance(c, int | float) and not isinstance(c, bool) and c > 0:
            return float(c)
    return None


def run_bench(
    cfg: BenchConfig,
    *,
    progress: Callable[[Progress], None] | None = None,
    handle_signals: bool = False,
) -> BenchReport:
    """Run one benchmark to completion (or stop) and return its report. Never hangs."""
    cfg.validate()
    if cfg.concurrency > 256:
        _check_fd_limit(cfg.concurrency)
    runner = _Runner(cfg, progress)
    return asyncio.run(runner.run(handle_signals))


def _check_fd_limit(concurrency: int) -> None:
    """H09: a client that runs out of file descriptors fails in confusing ways."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = concurrency + 64
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard == resource.RLIM_INFINITY or hard >= need:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
            return
        raise UsageError(
            f"--concurrency {concurrency} needs ~{need} open files; the limit is {soft}",
            hint=f"ulimit -n {need}, or lower --concurrency",
        )


# --------------------------------------------------------------------------------------
# Storage, runs, baseline
# --------------------------------------------------------------------------------------
def resolve_target(target: str, port: int | None = None) -> str:
    """A URL as given, or ``HOST[:PORT]`` / a configured host name -> ``http://host:port``.

    The port is the one in TARGET, else ``port`` (e.g. the run's), else SGLang's 30000.
    """
    if "@" in target and "://" not in target:
        target = "http://" + target  # user:password@host[:port]: basic auth over http
    if "://" in target:
        return target.rstrip("/")
    name, sep, p = target.rpartition(":") if target.count(":") == 1 else (target, "", "")
    if not sep:
        name = target
    elif not p.isdigit():
        raise UsageError(f"{target}: bad port {p!r}", hint="HOST:PORT or http://HOST:PORT")
    host = name
    try:
        from forensics.hosts import load_config

        cfg = load_config()["hosts"].get(name)
    except ImportError:
        cfg = None
    if cfg is not None:
        host = cfg.host
    if not host:
        raise UsageError(f"{target}: no host", hint="forensics bench http://HOST:PORT")
    final_port = int(p) if sep else (port or 30000)
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{final_port}"


@dataclass
class Target:
    """Where a benchmark goes. ``url``: what the user means (shown and stored). ``ssh_host``:
    a configured host whose loopback serves it, reached through an SSH tunnel
    (``SSHHost.forward``) to ``remote_port``; None to connect to ``url`` directly."""

    url: str
    ssh_host: str | None = None
    remote_port: int | None = None


def resolve_bench_target(
    target: str, port: int | None = None, store: Store | None = None, *, direct: bool = False
) -> Target:
    """TARGET of ``forensics bench`` -> a ``Target``.

    A URL is used as given. A configured host name (``gpu8``, ``gpu8:30001``) is reached
    through SSH at the host's 127.0.0.1 (SGLang listens there by default) unless ``direct``.
    The name of a launch (``forensics launch --name NAME``) means its host and port. Anything
    else is ``HOST[:PORT]``.
    """
    from forensics.hosts import load_config

    hosts = load_config()["hosts"]
    name = target.rpartition(":")[0] if target.count(":") == 1 else target
    if "://" not in target and name in hosts:
        url = resolve_target(target, port)
        return Target(url, None if direct else name, urlsplit(url).port)
    if "://" not in target and port is None and not set(target) & {":", "/"} and store:
        from forensics.launcher import find_launch_exact

        row = find_launch_exact(store, target)
        if row is not None:
            lport = int(row.get("port") or urlsplit(row.get("health_url") or "").port or 30000)
            if row.get("host") in (None, "", "local"):
                return Target(f"http://127.0.0.1:{lport}")
            url = resolve_target(f"{row['host']}:{lport}")
            return Target(url, None if direct else row["host"], lport)
    return Target(resolve_target(target, port))


def run_port(store: Store, run_id: str) -> int | None:
    import polars as pl

    from forensics.runs import runs_table

    df = runs_table(store, classify=False)
    if df.is_empty() or "port" not in df.columns:
        return None
    hit = df.filter(pl.col("run_id") == run_id)
    if hit.is_empty() or hit["port"][0] is None:
        return None
    return int(hit["port"][0])


def find_run_for_url(store: Store, url: str) -> tuple[str, str] | None:
    """The latest run whose port matches the URL's port (host preferred); (run_id, name)."""
    import polars as pl

    from forensics.runs import runs_table

    df = runs_table(store, classify=False)
    if df.is_empty() or "port" not in df.columns:
        return None
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    cand = df.filter(pl.col("port").cast(pl.Int64, strict=False) == port)
    if cand.is_empty():
        return None
    host = (parts.hostname or "").lower()
    wildcard = {"", "0.0.0.0", "::", "127.0.0.1", "localhost", "::1"}
    if "host" in cand.columns:
        same = cand.filter(pl.col("host").cast(pl.Utf8).str.to_lowercase() == host)
        if not same.is_empty():
            cand = same
        elif host not in wildcard:
            loose = cand.filter(
                pl.col("host").is_null() | pl.col("host").cast(pl.Utf8).is_in(list(wildcard))
            )
            cand = loose if not loose.is_empty() else cand
    if "started_at" in cand.columns:
        cand = cand.sort("started_at", nulls_last=False)
    row = cand.row(-1, named=True)
    return str(row["run_id"]), str(row.get("name") or row["run_id"])


def resolve_run(store: Store, match: str) -> tuple[str, str]:
    from forensics.runs import find_run

    row = find_run(store, match, classify=False, what=f"--run {match}")
    return str(row["run_id"]), str(row.get("name") or row["run_id"])


def _round(v: float | None) -> int | None:
    return None if v is None else int(round(v))


def bench_frames(rep: BenchReport) -> tuple[pl.DataFrame, pl.DataFrame]:
    import polars as pl

    s = rep.summary
    row = {
        "bench_id": rep.bench_id,
        "run_id": rep.run_id,
        "url": rep.config.url,
        "via": rep.via,
        "api": rep.config.api,
        "mode": rep.config.mode,
        "concurrency": rep.config.concurrency,
        "rate": rep.config.rate,
        "num_prompts": len(rep.results),
        "max_new_tokens": rep.config.max_new_tokens,
        # the benchmark's shape, as imported results have it (forensics/bench_results.py):
        # tokens per prompt the server counted (median), tokens per answer asked for
        "input_len": _round(
            percentile([r.prompt_tokens for r in rep.results if r.ok and r.prompt_tokens], 50)
        ),
        "output_len": rep.config.max_new_tokens,
        "completed": s["completed"],
        "failed": s["failed"],
        "output_tokens": s["output_tokens"],
        "output_tok_s": s["output_tok_s"],
        "req_tok_s_median": s["req_tok_s_median"],
        "req_tok_s_p10": s["req_tok_s_p10"],
        "req_tok_s_p90": s["req_tok_s_p90"],
        "decode_tok_s_median": s["decode_tok_s_median"],
        "tokens_estimated": s["tokens_estimated"],
    }
    for k in ("ttft_s", "itl_s", "tpot_s", "e2e_s"):
        for st in ("mean", "p50", "p90", "p99"):
            row[f"{k}_{st}"] = s[f"{k}_{st}"]
    row.update(
        {
            "accept_len_client": s["accept_len_client"],
            "accept_len_server": rep.accept_len_server,
            "accept_len_server_scope": rep.accept_len_server_scope,
            "accept_len_log": rep.accept_len_log,
            "accept_len_log_lines": rep.accept_len_log_lines,
            "server_version": rep.server_version,
            "flush_cache": rep.flush,
            "started_at": rep.started_at,
            "duration_s": rep.duration_s,
            "interrupted": rep.interrupted,
            "deadline_hit": rep.deadline_hit,
            "server_dead": rep.server_dead,
            "death": rep.death,
            "failures": json.dumps(s["failures"], ensure_ascii=False),
        }
    )
    # H06: the /health summary; parts written before these columns existed read as nulls
    row.update({f"health_{k}": rep.health.get(k) for k in HEALTH_FIELDS})
    schema = {
        "bench_id": pl.Utf8,
        "run_id": pl.Utf8,
        "url": pl.Utf8,
        "via": pl.Utf8,
        "api": pl.Utf8,
        "mode": pl.Utf8,
        "concurrency": pl.Int64,
        "rate": pl.Float64,
        "num_prompts": pl.Int64,
        "max_new_tokens": pl.Int64,
        "input_len": pl.Int64,
        "output_len": pl.Int64,
        "completed": pl.Int64,
        "failed": pl.Int64,
        "output_tokens": pl.Int64,
        "tokens_estimated": pl.Int64,
        "accept_len_server_scope": pl.Utf8,
        "accept_len_log": pl.Float64,
        "accept_len_log_lines": pl.Int64,
        "server_version": pl.Utf8,
        "flush_cache": pl.Utf8,
        "started_at": pl.Datetime("us"),
        "interrupted": pl.Boolean,
        "deadline_hit": pl.Boolean,
        "server_dead": pl.Boolean,
        "death": pl.Utf8,
        "failures": pl.Utf8,
        "health_count": pl.Int64,
        "health_non_200": pl.Int64,
        "health_timeouts": pl.Int64,
        "health_errors": pl.Int64,
    }
    full_schema = {k: schema.get(k, pl.Float64) for k in row}
    bench = pl.DataFrame([row], schema=full_schema)
    reqs = pl.DataFrame(
        [
            {
                "bench_id": rep.bench_id,
                "index": r.index,
                "ok": r.ok,
                "reason": r.reason,
                "detail": r.detail,
                "status": r.status,
                "prompt_tokens": r.prompt_tokens,
                "output_tokens": r.output_tokens,
                "tokens_estimated": r.tokens_estimated,
                "chunks": r.chunks,
                "start_s": r.start_s,
                "ttft_s": r.ttft_s,
                "e2e_s": r.e2e_s,
                "tpot_s": r.tpot_s,
                "itl_mean_s": r.itl_mean_s,
                "tok_s": r.tok_s,
                "accept_len": r.accept_len,
                "verify_ct": r.verify_ct,
                "finish_reason": r.finish_reason,
            }
            for r in rep.results
        ],
        schema={
            "bench_id": pl.Utf8,
            "index": pl.Int64,
            "ok": pl.Boolean,
            "reason": pl.Utf8,
            "detail": pl.Utf8,
            "status": pl.Int64,
            "prompt_tokens": pl.Int64,
            "output_tokens": pl.Int64,
            "tokens_estimated": pl.Boolean,
            "chunks": pl.Int64,
            "start_s": pl.Float64,
            "ttft_s": pl.Float64,
            "e2e_s": pl.Float64,
            "tpot_s": pl.Float64,
            "itl_mean_s": pl.Float64,
            "tok_s": pl.Float64,
            "accept_len": pl.Float64,
            "verify_ct": pl.Float64,
            "finish_reason": pl.Utf8,
        },
    )
    return bench, reqs


def health_frame(rep: BenchReport) -> pl.DataFrame:
    """The `bench_health` rows: one per /health sample of the benchmark."""
    import polars as pl

    return pl.DataFrame(
        [{"bench_id": rep.bench_id, **asdict(h)} for h in rep.health_samples],
        schema={
            "bench_id": pl.Utf8,
            "t_s": pl.Float64,
            "status": pl.Int64,
            "latency_ms": pl.Float64,
            "error": pl.Utf8,
        },
    )


def _location(source: dict[str, Any]) -> str:
    """How to name a stored source for `ingest`: a local path, NAME:/path or ssh://."""
    host, path = source.get("host") or "local", source["path"]
    if host == "local":
        return path
    if "@" in host:
        return f"ssh://{host}{path}"
    return f"{host}:{path}"


def accept_len_from_log(store: Store, rep: BenchReport) -> None:
    """The server's own accept length for the benchmark's window, from its log.

    Re-ingests the attached run's log (incremental: only the new bytes) and averages the
    ``accept len`` of its Decode batch lines stamped inside the benchmark (log clock = this
    machine's clock for a local run; for a remote host the two clocks must agree).
    """
    from forensics.ingest import ingest

    if not rep.run_id or ":" not in rep.run_id:
        return
    sid = rep.run_id.rpartition(":")[0]
    source = store.sources().get(sid)
    if source is None:
        return
    ingest(store, [_location(source)])
    rep.accept_len_log, rep.accept_len_log_lines = log_accept_len(
        store, rep.run_id, rep.started_at, rep.duration_s
    )


def log_accept_len(
    store: Store, run_id: str, started_at: dt.datetime, duration_s: float, decode: Any = None
) -> tuple[float | None, int | None]:
    """Mean ``accept len`` of the run's Decode batch lines stamped inside a benchmark's
    window (whole seconds, as the log prints them), and how many there were.
    ``decode``: the decode table when the caller already read it."""
    import polars as pl

    sid, _, idx = run_id.rpartition(":")
    dec = store.table("decode") if decode is None else decode
    if dec.is_empty() or not sid:
        return None, None
    t0 = started_at.replace(microsecond=0)
    t1 = started_at + dt.timedelta(seconds=duration_s + 1)
    win = dec.filter(
        (pl.col("source_id") == sid)
        & (pl.col("run_index") == int(idx))
        & pl.col("ts").is_between(t0, t1)
        & pl.col("accept_len").is_not_null()
    )
    if win.is_empty():
        return None, None
    return float(win["accept_len"].cast(pl.Float64).mean()), len(win)


def save_bench(store: Store, rep: BenchReport) -> str:
    """Store the benchmark: one `bench` row, one `bench_requests` row per request and one
    `bench_health` row per /health sample, in one transaction."""
    bench, reqs = bench_frames(rep)
    with store.transaction() as tx:
        tx.append("bench", bench)
        tx.append("bench_requests", reqs)
        tx.append("bench_health", health_frame(rep))
    return rep.bench_id


def latest_by_run(store: Store) -> pl.DataFrame:
    """The latest benchmark of each run: run_id, bench_tok_s, bench_accept_len, bench_at (and
    its shape); read by the runs table (:func:`forensics.runs.latest_bench`)."""
    from forensics.runs import latest_bench

    return latest_bench(store)


def set_baseline(
    store: Store,
    *,
    run: str | None = None,
    tok_s: float | None = None,
    experiment: str | None = None,
) -> dict:
    """Mark the baseline of an experiment (:func:`forensics.baseline.set_baseline`)."""
    from forensics.baseline import set_baseline as store_baseline

    return store_baseline(store, run=run, tok_s=tok_s, experiment=experiment)


def get_baseline(store: Store, run_id: str | None = None) -> dict[str, Any] | None:
    """The baseline a benchmark of ``run_id`` is compared with: its experiment's
    (:func:`forensics.baseline.for_run`). Without a run, the stored baseline when there is
    exactly one (a benchmark attached to no run belongs to no experiment)."""
    from forensics import baseline

    if run_id:
        b = baseline.for_run(store, run_id)
        return b.as_dict() if b else None
    values = baseline.stored(store)
    return values[0] if len(values) == 1 else None


def baseline_text(tok_s: float | None, baseline: dict[str, Any] | None) -> str:
    """'82.3 tok/s, 0.91× baseline' (or without the ratio when there is no baseline)."""
    if tok_s is None:
        return "— tok/s"
    text = f"{tok_s:.1f} tok/s"
    if baseline and baseline.get("tok_s"):
        text += f", {tok_s / float(baseline['tok_s']):.2f}× baseline"
    return text


def iter_failures(rep: BenchReport) -> Iterable[tuple[str, int, str]]:
    """(reason, count, first detail) for reporting."""
    f = rep.summary["failures"]
    for reason, count in sorted(f["reasons"].items(), key=lambda kv: -kv[1]):
        yield reason, count, f["first_detail"].get(reason, "")
