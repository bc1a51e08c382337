"""One streaming request: its payload, the exchange with its deadlines, and what it measured
(:class:`RequestResult`): tokens from the server's counts, never from chunks (H08); a stream
without [DONE] or a finish reason is ``truncated`` (H03)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from forensics.bench.config import MAX_BODY, BenchConfig
from forensics.bench.prompts import Prompt
from forensics.bench.sse import SSEError, SSEEvent, SSEParser
from forensics.bench.stream import StreamState
from forensics.errors import BodyTooLarge


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


def payload(cfg: BenchConfig, prompt: Prompt, model: str | None) -> dict[str, Any]:
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


async def request(
    session: Any,
    url: str,
    cfg: BenchConfig,
    body: dict[str, Any],
    res: RequestResult,
    t_origin: float,
) -> RequestResult:
    """Send one streaming request and fill ``res``; never raises except on cancellation."""
    call = _Call(cfg, res, t_origin)
    if await call.send(session, url, body):
        call.finish()
    return res


class _Call:
    """One request in flight: its clock, its phase (waiting for the first token, then for
    the next), the gaps between tokens, and what the stream said."""

    def __init__(self, cfg: BenchConfig, res: RequestResult, t_origin: float):
        self.cfg, self.res = cfg, res
        self.loop = asyncio.get_running_loop()
        self.t0 = time.perf_counter()
        res._t0 = self.t0
        res.start_s = self.t0 - t_origin
        self.total_at = self.loop.time() + cfg.request_timeout
        self.st = StreamState(cfg.api)
        self.parser = SSEParser()
        self.phase = "ttft"
        self.t_last: float | None = None
        self.gaps: list[tuple[float, int]] = []  # (gap, new tokens) after the first token

    def deadline(self) -> float:
        """When the current wait ends: the phase's own limit, within --request-timeout."""
        if self.phase == "ttft":
            spent = time.perf_counter() - self.t0
            return min(self.total_at, self.loop.time() + self.cfg.ttft_timeout - spent)
        return min(self.total_at, self.loop.time() + self.cfg.idle_timeout)

    def handle(self, events: list[SSEEvent]) -> None:
        now = time.perf_counter()
        for ev in events:
            new = self.st.event(ev)
            self.res.chunks += 1
            if new <= 0:
                continue
            if self.res.ttft_s is None:
                self.res.ttft_s = now - self.t0
                self.phase = "idle"
            elif self.t_last is not None:
                self.gaps.append((now - self.t_last, new))
            self.t_last = now

    async def send(self, session: Any, url: str, body: dict[str, Any]) -> bool:
        """The exchange. False when it ended before a stream (no connection, an HTTP error:
        ``res`` says why); True when the stream was read, to its end or until it failed."""
        import aiohttp

        res = self.res
        try:
            async with asyncio.timeout_at(self.deadline()) as tmo:
                try:
                    resp = await session.post(url, json=body)
                except aiohttp.ClientConnectorError as exc:
                    res.reason, res.detail = "conn_error", conn_detail(exc)
                    return False
                except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                    res.reason = "conn_error"
                    res.detail = f"connection lost before a response ({exc})"
                    return False
                async with resp:
                    res.status = resp.status
                    if resp.status != 200:
                        tmo.reschedule(min(self.total_at, self.loop.time() + self.cfg.idle_timeout))
                        await self._http_error(resp)
                        return False
                    await self._read(resp, tmo)
        except TimeoutError:
            res.reason, res.detail = "timeout", self._timeout_detail()
        except SSEError as exc:
            res.reason, res.detail = "protocol_error", str(exc)
        except aiohttp.ClientError as exc:
            res.reason, res.detail = "conn_error", f"{type(exc).__name__}: {exc}"
        return True

    async def _http_error(self, resp: Any) -> None:
        import aiohttp

        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            raw = await resp.content.read(MAX_BODY)
            self.res.body = raw.decode("utf-8", "replace")
        self.res.reason = "http_error"
        self.res.detail = f"HTTP {resp.status} {resp.reason or ''}".strip()

    async def _read(self, resp: Any, tmo: Any) -> None:
        """The event stream to its end; a cut stream is noted (the verdict comes later)."""
        import aiohttp

        try:
            while True:
                tmo.reschedule(self.deadline())
                chunk = await resp.content.readany()
                if not chunk:
                    break
                self.handle(self.parser.feed(chunk))
            self.handle(self.parser.close())
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
            self.res.detail = f"stream cut: {type(exc).__name__}"
        except aiohttp.ClientOSError as exc:
            self.res.detail = f"stream cut: {exc}"

    def _timeout_detail(self) -> str:
        cfg = self.cfg
        if self.loop.time() >= self.total_at - 1e-3:
            return f"no complete answer within --request-timeout {cfg.request_timeout:g}s"
        if self.phase == "ttft":
            return f"no first token within --ttft-timeout {cfg.ttft_timeout:g}s"
        return f"stream idle longer than --idle-timeout {cfg.idle_timeout:g}s"

    def _failure(self, tokens: int) -> tuple[str, str] | None:
        """Why a stream that was read is still a failed request (None: it is not)."""
        st = self.st
        if st.error:
            return "server_error", st.error[:500]
        if not (st.done or st.finish):
            return "truncated", self.res.detail or "stream ended without [DONE] or a finish reason"
        if tokens <= 0:
            return "empty_output", "the server answered with no tokens"
        if self.cfg.api != "native" and st.usage is None and not st.done:
            return "truncated", "no usage chunk and no [DONE]"
        return None

    def finish(self) -> None:
        """The request's figures, once its stream is over."""
        res, st = self.res, self.st
        res.e2e_s = time.perf_counter() - self.t0
        tokens, res.tokens_estimated = st.completion_tokens()
        res.output_tokens = tokens
        res.finish_reason = st.finish
        if res.reason is None:
            failure = self._failure(tokens)
            if failure is not None:
                res.reason, res.detail = failure
        if res.reason is not None:
            return
        res.ok = True
        if res.ttft_s is None:  # tokens only visible in the final usage chunk
            res.ttft_s = res.e2e_s
        res.tok_s = tokens / res.e2e_s if res.e2e_s > 0 else None
        if tokens > 1:
            res.tpot_s = (res.e2e_s - res.ttft_s) / (tokens - 1)
            res.itls = _itls(self.gaps, tokens, scale=self.cfg.api != "native")
            if res.itls:
                res.itl_mean_s = sum(res.itls) / len(res.itls)
        res.accept_len, res.verify_ct = st.accept(tokens)
        res.meta = st.final_meta
        if isinstance(st.usage, dict) and isinstance(st.usage.get("prompt_tokens"), int):
            res.prompt_tokens = st.usage["prompt_tokens"]
        elif st.final_meta and isinstance(st.final_meta.get("prompt_tokens"), int):
            res.prompt_tokens = st.final_meta["prompt_tokens"]


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


def conn_detail(exc: Exception) -> str:
    os_err = getattr(exc, "os_error", None)
    if isinstance(os_err, ConnectionRefusedError):
        why = "connection refused (nothing listens there: the server is down or not up yet)"
    else:
        why = getattr(os_err, "strerror", None) or str(os_err or exc)
    return f"cannot connect: {why}"
