"""The benchmark itself: warmup, cache flush, the measured window (single stream, fixed
concurrency or Poisson arrivals), /health sampling, stops (deadline, Ctrl-C, server death)
and the report. Never hangs: every wait has a deadline (H05)."""

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from forensics.bench.client import RequestResult, conn_detail, payload, read_capped, request
from forensics.bench.config import (
    DEADLINE_GRACE_S,
    ENDPOINTS,
    MAX_JSON_BODY,
    MAX_SMALL_BODY,
    BenchConfig,
)
from forensics.bench.health import HealthSample, health_error_kinds, health_summary
from forensics.bench.prompts import Prompt, make_prompts
from forensics.bench.report import BenchReport
from forensics.bench.stats import summarize
from forensics.errors import BodyTooLarge, UsageError
from forensics.urls import redact_url


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
        # what the run found, for its report
        self.info_before: dict[str, Any] | None = None
        self.info_after: dict[str, Any] | None = None
        self.flushed = "skipped"  # ok | unsupported | failed: ... | skipped
        self.warmup_failed = 0
        self.started_at = dt.datetime.now()
        self.duration = 0.0

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
            return conn_detail(exc)
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
            error = next((k for t, k in health_error_kinds() if isinstance(exc, t)), "error")
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
        body = payload(self.cfg, prompt, self.model)
        task = asyncio.current_task()
        assert task is not None
        self.inflight[task] = res
        self._emit()
        try:
            await request(session, self.url, self.cfg, body, res, self.t_origin)
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
        deadline_at = time.perf_counter() + cfg.deadline if cfg.deadline else None
        prompts = make_prompts(cfg, cfg.effective_num_prompts() or 64)
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        timeout = aiohttp.ClientTimeout(
            total=None, connect=cfg.connect_timeout, sock_connect=cfg.connect_timeout
        )
        self.started_at = dt.datetime.now()
        try:
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
                main = asyncio.create_task(self._body(session, prompts))
                try:
                    await self._wait_body(main, deadline_at)
                finally:
                    # never leave the session with _body() still running: a Ctrl-C that
                    # cancels this task would let it call a closed session and print a
                    # traceback ("Session is closed") after the run
                    if not main.done():
                        main.cancel()
                        with contextlib.suppress(asyncio.CancelledError, Exception):
                            await main
        finally:
            await self.stop_sampling()  # _body() stops it; this covers a cancelled _body()
            for sig in installed:
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(sig)
        if not self.duration and self.t_origin:
            self.duration = time.perf_counter() - self.t_origin
        return self._report()

    async def _body(self, session: Any, prompts: list[Prompt]) -> None:
        """Server info, warmup, cache flush, the measured window, server info again."""
        cfg = self.cfg
        self.info_before = await self.server_info(session)
        if cfg.api != "native" and self.model is None:
            models = await self._get_json(session, "/v1/models")
            with contextlib.suppress(Exception):
                self.model = models["data"][0]["id"]
        if not await self._warmup(session, prompts):
            return
        if cfg.flush_cache:
            self.flushed = await self.flush(session)
        self.prog.phase = "measure"
        self.started_at = dt.datetime.now()
        self.t_origin = time.perf_counter()
        self._emit()
        if cfg.health_every > 0:
            self.sampler = asyncio.create_task(self.sample_health(session))
        try:
            await self.measure(session, prompts)
        finally:
            self.duration = time.perf_counter() - self.t_origin
            await self.stop_sampling()
        if self.health_task is not None:
            with contextlib.suppress(Exception):
                await self.health_task
        if not self.server_dead and self.stop_reason != "deadline":
            self.info_after = await self.server_info(session)

    async def _warmup(self, session: Any, prompts: list[Prompt]) -> bool:
        """The unmeasured requests (a failed one is counted); False when a stop came."""
        for w in range(self.cfg.warmup):
            if self.stop.is_set():
                return False
            try:
                await self._one(session, -1 - w, prompts[w % len(prompts)], False)
            except _WarmupFailed:
                self.warmup_failed += 1
            except asyncio.CancelledError:
                if not self.stop.is_set():
                    raise
                return False
        return not self.stop.is_set()

    def _report(self) -> BenchReport:
        cfg = self.cfg
        results = sorted(self.results, key=lambda r: r.index)
        rep = BenchReport(
            config=cfg,
            bench_id=uuid.uuid4().hex[:12],
            started_at=self.started_at,
            duration_s=self.duration,
            results=results,
            summary=summarize(results, self.duration),
            interrupted=self.stop_reason == "interrupt",
            deadline_hit=self.stop_reason == "deadline",
            server_dead=self.server_dead,
            death=self.death,
            flush=self.flushed,
            warmup_failed=self.warmup_failed,
            health=health_summary(self.health_samples, cfg.health_every, cfg.health_timeout),
            health_samples=list(self.health_samples),
            warnings=list(self.warnings),
        )
        info = self.info_after or self.info_before
        if info is not None:
            rep.server_info = info
            rep.server_version = str(info.get("version")) if info.get("version") else None
        if self.info_after is not None:
            al = server_accept_length(self.info_after)
            if al is not None:
                rep.accept_len_server = al
                rep.accept_len_server_scope = "window" if self.flushed == "ok" else "lifetime"
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
