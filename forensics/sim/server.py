"""The simulated SGLang server process: startup, HTTP API (aiohttp.web), failures, shutdown.

``python -m forensics.sim [flags]`` and ``forensics sim serve [flags]`` land in ``main``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from forensics.sim import failures
from forensics.sim.args import SimConfig, parse_args
from forensics.sim.engine import Engine, Req
from forensics.sim.logstyle import LogWriter
from forensics.sim.ranks import RankProcesses, scheduler_title
from forensics.sim.startup import InitFailure, Startup, server_args_fields, server_args_line

WARMUP_TEXT = "The capital city of France is"
HEALTH_CHECK_TIMEOUT_S = 20.0
# the least wall time a health check's 1-token generation gets, whatever the speed: a
# compressed clock does not compress the machine's scheduling delays (at --sim-speed 400 the
# 20 s became 50 ms, and a loaded machine's ready server answered /health 503: a launcher
# test's recheck saw `running`). Below the launcher's own probe timeout (5 s).
HEALTH_CHECK_MIN_WALL_S = 3.0


def health_check_timeout(speed: float) -> float:
    """Wall seconds a health check waits for its 1-token generation (SGLang's 20 s, at the
    simulator's speed, never under HEALTH_CHECK_MIN_WALL_S)."""
    return max(HEALTH_CHECK_TIMEOUT_S / speed, HEALTH_CHECK_MIN_WALL_S)


_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def count_prompt_tokens(text: str) -> int:
    return 1 + len(_TOKEN_RE.findall(text))  # + BOS


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class SimServer:
    def __init__(self, cfg: SimConfig, log: LogWriter, ranks: RankProcesses) -> None:
        self.cfg = cfg
        self.log = log
        self.style = cfg.style
        self.ranks = ranks
        self.status = "starting"  # starting | ready | shutting_down
        self.uvicorn_up = False
        self.engine: Engine | None = None
        self.startup = Startup(cfg, log)
        self.runner: Any = None
        self.started_at = time.time()

    # ------------------------------------------------------------------ lifecycle
    def die(self) -> None:
        """SGLang's kill_process_tree(include_parent): children, then SIGKILL ourselves."""
        self.ranks.stop(keep_orphan=self.cfg.orphan)
        os.kill(os.getpid(), signal.SIGKILL)

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self._on_sigterm)
        loop.add_signal_handler(signal.SIGINT, self._on_sigterm)

    def _on_sigterm(self) -> None:
        if not self.uvicorn_up:
            self.ranks.stop(keep_orphan=self.cfg.orphan)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        asyncio.get_running_loop().create_task(self.shutdown())

    async def shutdown(self) -> None:
        if self.status == "shutting_down":
            return
        self.status = "shutting_down"
        frame = failures.running_sigquit_frame(self.style)
        self.log.main(
            f"SIGTERM received. signum=15 frame={frame}. Draining requests and shutting down..."
        )
        eng = self.engine
        pending = [] if eng is None else [*eng.running, *eng.waiting]
        self.log.main(
            self.style.graceful_exit.format(n=len(pending), rids=[r.rid for r in pending])
        )
        self.log.uvicorn("INFO", "Shutting down")
        self.log.uvicorn("INFO", "Waiting for application shutdown.")
        self.log.uvicorn("INFO", "Application shutdown complete.")
        self.log.uvicorn("INFO", f"Finished server process [{os.getpid()}]")
        self.ranks.stop(keep_orphan=self.cfg.orphan)
        os._exit(0)

    async def run(self) -> None:
        self._install_signals()
        try:
            await self.startup.run()
        except InitFailure as exc:
            await self._init_failed(exc.code)
            return
        st = self.startup
        self.engine = Engine(
            self.cfg,
            self.log,
            max_total_tokens=st.max_total_tokens,
            eos_id=st.model.eos_id,
            on_runtime_trigger=self._runtime_trigger,
        )
        asyncio.get_running_loop().create_task(self.engine.run())
        await self._start_http()
        if not self.cfg.skip_server_warmup:
            await self._warmup()
        self.status = "ready"
        self.engine.ready = True
        self.log.main("The server is fired up and ready to roll!")
        await asyncio.Event().wait()

    async def _init_failed(self, code: int) -> None:
        await asyncio.sleep(0.3 / self.cfg.speed)
        self.log.main(self.style.sigquit_launch)
        for line in self.style.rank_dead:
            self.log.main(line.format(rank=0, code=code))
        self.die()

    async def _start_http(self) -> None:
        from aiohttp import web

        pid = os.getpid()
        self.log.uvicorn("INFO", f"Started server process [{pid}]")
        self.log.uvicorn("INFO", "Waiting for application startup.")
        self.log.uvicorn("INFO", "Application startup complete.")
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024 * 1024)
        self._routes(app)
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.cfg.host, self.cfg.port, reuse_address=True)
        bind_error: OSError | None = None
        if self.cfg.fail == "port-in-use":
            bind_error = OSError(errno.EADDRINUSE, "address already in use")
        else:
            try:
                await site.start()
            except OSError as exc:
                bind_error = exc
        if bind_error is not None:
            self.log.uvicorn(
                "ERROR",
                f"[Errno {errno.EADDRINUSE}] error while attempting to bind on address "
                f"('{self.cfg.host}', {self.cfg.port}): address already in use",
            )
            self.log.uvicorn("INFO", "Waiting for application shutdown.")
            self.log.uvicorn("INFO", "Application shutdown complete.")
            self.ranks.stop(keep_orphan=self.cfg.orphan)
            os._exit(3)
        self.uvicorn_up = True
        self.log.uvicorn(
            "INFO",
            f"Uvicorn running on http://{self.cfg.host}:{self.cfg.port} (Press CTRL+C to quit)",
        )

    async def _warmup(self) -> None:
        import aiohttp

        host = "127.0.0.1" if self.cfg.host in ("0.0.0.0", "::", "") else self.cfg.host
        base = f"http://{host}:{self.cfg.port}"
        timeout = aiohttp.ClientTimeout(total=600)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for _ in range(120):
                try:
                    async with session.get(base + self.style.warmup_info_path) as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(1.0)
            payload = {
                "text": WARMUP_TEXT,
                "sampling_params": {"temperature": 0, "max_new_tokens": 8},
            }
            for _ in range(max(1, self.cfg.dp_size) if False else 1):
                async with session.post(base + "/generate", json=payload) as resp:
                    await resp.read()

    # ------------------------------------------------------------------ runtime failures
    def _runtime_trigger(self) -> None:
        asyncio.get_running_loop().create_task(self._runtime_failure())

    async def _runtime_failure(self) -> None:
        cfg, st, eng = self.cfg, self.style, self.engine
        assert eng is not None
        eng.stalled = True
        if cfg.fail == "runtime-ima":
            overlap = st.spec_v2_overlap and cfg.speculative and cfg.topk == 1
            text = failures.runtime_ima(st, cfg.speculative, overlap)
            for dp, tp in self.startup.ranks:
                self.log.rank(tp, f"Scheduler hit an exception: {text}", dp=dp)
            await asyncio.sleep(0.2 / cfg.speed)
            self._parent_sigquit()
            return
        if cfg.fail == "runtime-nccl-timeout":
            victim = cfg.tp_size - 1
            for line in failures.nccl_timeout_lines(victim, seq=40000 + eng.forward_ct_decode):
                self.log.bare(line)
            pid = self.ranks.pids[victim] if victim < len(self.ranks.pids) else 0
            if pid and pid != self.ranks.orphan_pid:
                self.ranks.kill(pid)
            if st.subprocess_watchdog:
                await asyncio.sleep(0.5 / cfg.speed)
                self.log.main(
                    f"Subprocess scheduler_{victim} (pid={pid}) crashed with exit code -6. "
                    "Triggering SIGQUIT for cleanup..."
                )
                self._parent_sigquit()
                return
        # a hang (or an NCCL abort older SGLang does not notice): the scheduler watchdog fires
        await asyncio.sleep(cfg.watchdog_timeout / cfg.speed)
        await self._watchdog_fire()

    async def _watchdog_fire(self) -> None:
        cfg, st, eng = self.cfg, self.style, self.engine
        assert eng is not None
        wd = cfg.watchdog_timeout
        expr = f"self.watchdog_timeout={float(wd) if cfg.watchdog_from_cli else int(wd)}"
        reqs = eng.cur_batch
        dump = (
            f"self.cur_batch.batch_size()={len(reqs)}, self.cur_batch.reqs=["
            + ", ".join(f"Req(rid={r.rid}, input_ids=[...], output_ids=[...])" for r in reqs)
            + f"], self.token_to_kv_pool_allocator.available_size()={eng.max_total_tokens}, "
            "self.tree_cache.evictable_size()=0, "
        )
        text = st.watchdog.format(watchdog_expr=expr)
        if st.debug_dump_before:
            self.log.rank(0, f"Scheduler debug info: {dump}")
            self.log.rank(0, text)
        else:
            self.log.rank(0, text)
            self.log.rank(0, dump)
        self.log.raw("\n\n")
        await asyncio.sleep(5.0 / cfg.speed)
        self._parent_sigquit()

    def _parent_sigquit(self) -> None:
        st = self.style
        self.log.main(st.sigquit_running.format(signum=3, frame=failures.running_sigquit_frame(st)))
        self.die()

    # ------------------------------------------------------------------ HTTP plumbing
    @property
    def _aio(self):
        from aiohttp import web

        return web

    def _middleware_factory(self):
        from aiohttp import web

        @web.middleware
        async def mw(request, handler):
            try:
                resp = await handler(request)
            except web.HTTPException as exc:
                resp = web.json_response({"detail": exc.reason}, status=exc.status)
            if not request.get("sim_logged"):
                self._access(request, resp.status)
            return resp

        return mw

    @property
    def _middleware(self):
        return self._middleware_factory()

    def _access(self, request, status: int) -> None:
        request["sim_logged"] = True
        peer = request.transport.get_extra_info("peername") if request.transport else None
        client = f"{peer[0]}:{peer[1]}" if peer else "127.0.0.1:0"
        path = request.path_qs
        self.log.access(client, request.method, path, status)

    def _routes(self, app) -> None:
        st = self.style
        r = app.router
        r.add_get("/health", self.h_health)
        r.add_get("/health_generate", self.h_health_generate)
        r.add_get("/get_model_info", self.h_model_info)
        r.add_get("/get_server_info", self.h_server_info)
        if st.new_info_routes:
            r.add_get("/model_info", self.h_model_info)
            r.add_get("/server_info", self.h_server_info)
        if st.ready_route:
            r.add_get("/ready", self.h_ready)
        r.add_route("GET", "/flush_cache", self.h_flush)
        r.add_route("POST", "/flush_cache", self.h_flush)
        r.add_post("/generate", self.h_generate)
        r.add_put("/generate", self.h_generate)
        r.add_post("/v1/completions", self.h_completions)
        r.add_post("/v1/chat/completions", self.h_chat)
        r.add_get("/v1/models", self.h_models)
        if self.cfg.enable_metrics:
            r.add_get("/metrics", self.h_metrics)

    def _error(self, message: str, status: int = 400):
        web = self._aio
        self.log.main(f"[http_server] Error: {message}")
        return web.json_response({"error": {"message": message}}, status=status)

    # ------------------------------------------------------------------ health / info
    async def _probe(self) -> bool:
        eng = self.engine
        assert eng is not None
        req = Req(rid=f"HEALTH_CHECK_{time.time()}", prompt_tokens=1, max_new_tokens=1, ignore_eos=True, kind="probe")  # fmt: skip
        tic = time.strftime("%H:%M:%S")
        eng.submit(req)
        timeout = health_check_timeout(self.cfg.speed)
        try:
            await asyncio.wait_for(self._wait_done(req), timeout)
            return True
        except TimeoutError:
            with contextlib.suppress(ValueError):
                eng.waiting.remove(req)
            self.log.main(
                "Health check failed. Server couldn't get a response from detokenizer for last "
                f"{int(HEALTH_CHECK_TIMEOUT_S)} seconds. tic start time: {tic}. "
                f"last_heartbeat time: {time.strftime('%H:%M:%S', time.localtime(time.time() - (time.monotonic() - eng.last_forward_at)))}"
            )
            return False

    @staticmethod
    async def _wait_done(req: Req) -> None:
        while not req.done:
            await req.events.get()

    async def h_health(self, request):
        web = self._aio
        if not self.style.health_probe:
            return web.Response(status=200)
        return await self.h_health_generate(request)

    async def h_health_generate(self, request):
        web = self._aio
        if self.status == "shutting_down":
            self.log.main("Health check request received during shutdown. Returning 503.")
            return web.Response(status=503)
        if self.style.health_starting_503 and self.status != "ready":
            return web.Response(status=503)
        ok = await self._probe()
        return web.Response(status=200 if ok else 503)

    async def h_ready(self, request):
        web = self._aio
        return web.Response(status=200 if self.status == "ready" else 503)

    def _deprecated(self, request, new: str) -> None:
        if self.style.new_info_routes and request.path.startswith("/get_"):
            self.log.main(
                f"Endpoint '{request.path}' is deprecated and will be removed in a future "
                f"version. Please use '{new}' instead."
            )

    async def h_model_info(self, request):
        web = self._aio
        self._deprecated(request, "/model_info")
        cfg = self.cfg
        info: dict[str, Any] = {
            "model_path": cfg.model_path,
            "tokenizer_path": cfg.extra["tokenizer_path"],
            "is_generation": True,
        }
        if self.style.weight_version:
            arch = self.startup.model.arch
            info.update(
                preferred_sampling_params=None,
                weight_version="default",
                has_image_understanding=False,
                has_audio_understanding=False,
                model_type="deepseek_v3" if "Deepseek" in arch else arch.split("For")[0].lower(),
                architectures=[arch],
            )
        return web.json_response(info)

    def internal_state(self) -> dict[str, Any]:
        eng = self.engine
        st = dict(server_args_fields(self.cfg))
        if eng is None:
            return st
        st["last_gen_throughput"] = eng.last_gen_throughput
        if eng.avg_spec_accept_length is not None:
            st["avg_spec_accept_length"] = eng.avg_spec_accept_length
        st["memory_usage"] = {
            "weight": round(self.startup.model.weight_gb / self.cfg.tp_size, 2),
            "kvcache": round(
                eng.max_total_tokens * self.startup.model.kv_bytes_per_token / (1 << 30), 2
            ),
            "token_capacity": eng.max_total_tokens,
            "graph": 1.98 if self.cfg.cuda_graph else 0.0,
        }
        st["effective_max_running_requests_per_dp"] = eng.max_running
        return st

    def server_info(self) -> dict[str, Any]:
        eng = self.engine
        info: dict[str, Any] = dict(server_args_fields(self.cfg))
        info["max_total_num_tokens"] = eng.max_total_tokens if eng else 0
        info["max_req_input_len"] = (eng.max_total_tokens if eng else 0) - 5
        if self.style.server_info_internal_top:
            info.update(self.internal_state())
        else:
            info["internal_states"] = [self.internal_state()]
        info["version"] = self.style.version
        if eng is not None:
            info["sim"] = {
                **eng.modelled(),
                "style": self.style.name,
                "num_steps": self.cfg.num_steps,
                "topk": self.cfg.topk,
                "num_draft_tokens": self.cfg.num_draft_tokens,
                "cuda_graph": self.cfg.cuda_graph,
            }
        return info

    async def h_server_info(self, request):
        web = self._aio
        self._deprecated(request, "/server_info")
        return web.json_response(self.server_info())

    async def h_flush(self, request):
        web = self._aio
        eng = self.engine
        ok = eng.flush() if eng else False
        text = (
            "Cache flushed.\nPlease check backend logs for more details. (When there are running "
            "or waiting requests, the operation will not be performed.)\n"
        )
        return web.Response(text=text, status=200 if ok else 400)

    async def h_models(self, request):
        web = self._aio
        ctx = self.cfg.context_length or self.startup.model.context_len
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.cfg.served_model_name,
                        "object": "model",
                        "created": int(self.started_at),
                        "owned_by": "sglang",
                        "root": self.cfg.served_model_name,
                        "max_model_len": ctx,
                    }
                ],
            }
        )

    async def h_metrics(self, request):
        web = self._aio
        eng = self.engine
        assert eng is not None
        labels = f'engine_type="unified",model_name="{self.cfg.served_model_name}",pp_rank="0",tp_rank="0"'
        rows: list[tuple[str, str, str, float]] = [
            ("num_running_reqs", "gauge", "The number of running requests.", len(eng.running)),
            ("num_queue_reqs", "gauge", "The number of requests in the waiting queue.", len(eng.waiting)),
            ("num_used_tokens", "gauge", "The number of used tokens.", eng._used_tokens()),
            ("token_usage", "gauge", "The token usage.", eng._used_tokens() / eng.max_total_tokens),
            ("gen_throughput", "gauge", "The generation throughput (token/s).", eng.last_gen_throughput),
            ("spec_accept_length", "gauge", "The average acceptance length of speculative decoding.", eng.last_accept_len),
            ("prompt_tokens_total", "counter", "Number of prefill tokens processed.", eng.prompt_tokens_total),
            ("generation_tokens_total", "counter", "Number of generation tokens processed.", eng.generation_tokens_total),
            ("num_requests_total", "counter", "Number of requests processed.", eng.requests_total),
        ]  # fmt: skip
        if self.style.metrics_extended:
            rows += [
                ("spec_accept_rate", "gauge", "The average acceptance rate of speculative decoding.", eng.last_accept_rate),
                ("is_cuda_graph", "gauge", "Whether the batch is using CUDA graph.", float(self.cfg.cuda_graph)),
                ("max_total_num_tokens", "gauge", "Maximum total number of tokens in the KV cache pool.", eng.max_total_tokens),
                ("cuda_graph_passes_total", "counter", "Number of forward passes using CUDA graph.", eng.cuda_graph_passes),
            ]  # fmt: skip
        out = []
        for name, kind, help_, value in rows:
            full = name if not name.endswith("_total") or kind != "counter" else name
            out.append(f"# HELP sglang:{full} {help_}")
            out.append(f"# TYPE sglang:{full} {kind}")
            out.append(f"sglang:{full}{{{labels}}} {float(value)}")
        return web.Response(text="\n".join(out) + "\n", content_type="text/plain", charset="utf-8")

    # ------------------------------------------------------------------ generation
    def _log_receive(self, obj: dict[str, Any], rid: str) -> None:
        if not self.cfg.log_requests:
            return
        parts = [f"rid={rid!r}"]
        if self.cfg.log_requests_level >= 1:
            parts.append(f"sampling_params={obj.get('sampling_params', {})!r}")
        if self.cfg.log_requests_level >= 2:
            parts.insert(0, f"text={obj.get('text')!r}")
        parts.append(f"stream={bool(obj.get('stream'))!r}")
        self.log.main(f"Receive: obj=GenerateReqInput({', '.join(parts)})")

    def _log_finish(self, req: Req, out: dict[str, Any]) -> None:
        if not self.cfg.log_requests:
            return
        shown = dict(out)
        if self.cfg.log_requests_level < 2:
            shown.pop("text", None)
            shown.pop("output_ids", None)
        self.log.main(f"Finish: obj=GenerateReqInput(rid={req.rid!r}), out={shown!r}")

    def _check_accepting(self):
        if self.engine is None or self.status == "shutting_down":
            return self._error("The server is not accepting new requests.", 503)
        return None

    def _make_req(
        self, prompt_tokens: int, sp: dict[str, Any], rid: str | None, default_max: int
    ) -> Req:
        eng = self.engine
        assert eng is not None
        max_new = sp.get("max_new_tokens")
        if max_new is None:
            max_new = default_max
        max_new = int(max_new)
        if max_new < 0:
            raise ValueError(f"max_new_tokens must be at least 0, got {max_new}.")
        return Req(
            rid=str(rid) if rid else eng.new_rid(),
            prompt_tokens=prompt_tokens,
            max_new_tokens=max(1, max_new),
            ignore_eos=bool(sp.get("ignore_eos", False)),
        )

    def _out(self, req: Req, *, final: bool) -> dict[str, Any]:
        eng = self.engine
        assert eng is not None
        out: dict[str, Any] = {"text": req.text}
        if self.style.output_ids:
            out["output_ids"] = list(req.out_ids)
        out["meta_info"] = eng.meta_info(req, final=final)
        return out

    async def _read_json(self, request) -> dict[str, Any] | None:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
            return None
        return body if isinstance(body, dict) else None

    async def h_generate(self, request):
        web = self._aio
        if (err := self._check_accepting()) is not None:
            return err
        obj = await self._read_json(request)
        if obj is None:
            return self._error("Invalid request body: expected a JSON object.")
        text, ids = obj.get("text"), obj.get("input_ids")
        prompts: list[int]
        batch = isinstance(text, list) or (
            isinstance(ids, list) and ids and isinstance(ids[0], list)
        )
        if text is None and ids is None:
            return self._error("Either text or input_ids should be provided.")
        if isinstance(text, list):
            prompts = [count_prompt_tokens(str(t)) for t in text]
        elif isinstance(text, str):
            prompts = [count_prompt_tokens(text)]
        elif batch:
            prompts = [max(1, len(x)) for x in ids]
        else:
            prompts = [max(1, len(ids))]
        sp = obj.get("sampling_params") or {}
        if not isinstance(sp, dict):
            return self._error("sampling_params must be an object.")
        try:
            reqs = [self._make_req(n, sp, None if batch else obj.get("rid"), 128) for n in prompts]
        except (TypeError, ValueError) as exc:
            return self._error(str(exc))
        for req in reqs:
            self._log_receive(obj, req.rid)
            self.engine.submit(req)
        if obj.get("stream"):
            resp = web.StreamResponse(
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
            )
            await resp.prepare(request)
            self._access(request, 200)
            await self._stream_native(resp, reqs, batch)
            return resp
        for req in reqs:
            await self._wait_done(req)
        outs = []
        for i, req in enumerate(reqs):
            out = self._out(req, final=True)
            if batch:
                out["index"] = i
            self._log_finish(req, out)
            outs.append(out)
        return web.json_response(outs if batch else outs[0], dumps=dumps)

    async def _stream_native(self, resp, reqs: list[Req], batch: bool) -> None:
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(i: int, req: Req) -> None:
            while True:
                done = await req.events.get()
                await queue.put((i, req, done))
                if done:
                    return

        tasks = [asyncio.create_task(pump(i, r)) for i, r in enumerate(reqs)]
        remaining = len(reqs)
        try:
            while remaining:
                i, req, done = await queue.get()
                out = self._out(req, final=done)
                if batch:
                    out["index"] = i
                await resp.write(f"data: {dumps(out)}\n\n".encode())
                if done:
                    self._log_finish(req, out)
                    remaining -= 1
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            for t in tasks:
                t.cancel()

    # ------------------------------------------------------------------ OpenAI API
    @staticmethod
    def _finish(req: Req) -> tuple[str | None, Any]:
        fr = req.finish_reason
        if fr is None:
            return None, None
        if fr["type"] == "length":
            return "length", None
        return "stop", fr.get("matched")

    @staticmethod
    def _usage(req: Req) -> dict[str, Any]:
        return {
            "prompt_tokens": req.prompt_tokens,
            "total_tokens": req.prompt_tokens + len(req.out_ids),
            "completion_tokens": len(req.out_ids),
            "prompt_tokens_details": None,
            "reasoning_tokens": 0,
        }

    async def h_completions(self, request):
        return await self._openai(request, chat=False)

    async def h_chat(self, request):
        return await self._openai(request, chat=True)

    async def _openai(self, request, *, chat: bool):
        if (err := self._check_accepting()) is not None:
            return err
        obj = await self._read_json(request)
        if obj is None:
            return self._error("Invalid request body: expected a JSON object.")
        ctx = self.cfg.context_length or self.startup.model.context_len
        asked = _chat_prompt(obj, ctx) if chat else _completion_prompt(obj)
        if isinstance(asked, str):
            return self._error(asked)
        n_prompt, max_tokens, default_max = asked
        sp = {"max_new_tokens": max_tokens, "ignore_eos": obj.get("ignore_eos", False)}
        try:
            req = self._make_req(n_prompt, sp, obj.get("rid"), default_max)
        except (TypeError, ValueError) as exc:
            return self._error(str(exc))
        self.engine.submit(req)
        reply = _Reply(
            chat=chat,
            cid=("chatcmpl-" if chat else "cmpl-") + req.rid,
            created=int(time.time()),
            model=obj.get("model") or self.cfg.served_model_name,
        )
        if not obj.get("stream"):
            return await self._openai_whole(req, reply)
        include_usage = bool((obj.get("stream_options") or {}).get("include_usage"))
        return await self._openai_stream(request, req, reply, include_usage)

    async def _openai_whole(self, req: Req, reply: _Reply):
        await self._wait_done(req)
        reason, matched = self._finish(req)
        if reply.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": req.text, "reasoning_content": None, "tool_calls": None},
                "logprobs": None, "finish_reason": reason, "matched_stop": matched,
            }  # fmt: skip
        else:
            choice = {"index": 0, "text": req.text, "logprobs": None, "finish_reason": reason, "matched_stop": matched}  # fmt: skip
        obj_name = "chat.completion" if reply.chat else "text_completion"
        body = {"id": reply.cid, "object": obj_name, "created": reply.created, "model": reply.model,
                "choices": [choice], "usage": self._usage(req)}  # fmt: skip
        return self._aio.json_response(body, dumps=dumps)

    async def _openai_stream(self, request, req: Req, reply: _Reply, include_usage: bool):
        resp = self._aio.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        self._access(request, 200)
        chat = reply.chat
        try:
            if chat:
                await resp.write(reply.chunk({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None, "matched_stop": None}))  # fmt: skip
            sent = 0
            while True:
                done = await req.events.get()
                text = req.text
                delta, sent = text[sent:], len(text)
                if delta:
                    if chat:
                        c = {"index": 0, "delta": {"content": delta}, "logprobs": None, "finish_reason": None, "matched_stop": None}  # fmt: skip
                    else:
                        c = {"index": 0, "text": delta, "logprobs": None, "finish_reason": None, "matched_stop": None}  # fmt: skip
                    await resp.write(reply.chunk(c))
                if done:
                    break
            reason, matched = self._finish(req)
            if chat:
                c = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": reason, "matched_stop": matched}  # fmt: skip
            else:
                c = {"index": 0, "text": "", "logprobs": None, "finish_reason": reason, "matched_stop": matched}  # fmt: skip
            await resp.write(reply.chunk(c))
            if include_usage:
                await resp.write(reply.chunk(None, usage=self._usage(req)))
            await resp.write(b"data: [DONE]\n\n")
        except ConnectionResetError:
            pass
        return resp


@dataclass(frozen=True)
class _Reply:
    """What every chunk of one OpenAI-style reply repeats."""

    chat: bool
    cid: str
    created: int
    model: str

    def chunk(self, choice: dict[str, Any] | None, usage: dict[str, Any] | None = None) -> bytes:
        """One SSE event; ``choice`` None: the closing usage chunk (no choices)."""
        obj_name = "chat.completion.chunk" if self.chat else "text_completion"
        body = {"id": self.cid, "object": obj_name, "created": self.created, "model": self.model,
                "choices": [] if choice is None else [choice], "usage": usage}  # fmt: skip
        return f"data: {dumps(body)}\n\n".encode()


def _chat_prompt(obj: dict[str, Any], ctx: int) -> tuple[int, Any, int] | str:
    """(prompt tokens, max_tokens asked, default max) of a chat request, or the error text."""
    msgs = obj.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return "messages must be a non-empty list."
    n_prompt = 2 + sum(
        4 + count_prompt_tokens(str(m.get("content", "")) if isinstance(m, dict) else str(m))
        for m in msgs
    )
    return n_prompt, obj.get("max_completion_tokens", obj.get("max_tokens")), ctx - n_prompt


def _completion_prompt(obj: dict[str, Any]) -> tuple[int, Any, int] | str:
    """(prompt tokens, max_tokens asked, default max) of a completion request, or the error."""
    prompt = obj.get("prompt")
    if prompt is None:
        return "prompt is required."
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
        n_prompt = len(prompt)
    elif isinstance(prompt, list):
        n_prompt = count_prompt_tokens(str(prompt[0]) if prompt else "")
    else:
        n_prompt = count_prompt_tokens(str(prompt))
    return n_prompt, obj.get("max_tokens", 16), 16


# ---------------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    cfg = parse_args(argv)
    log = LogWriter(cfg.style, cfg.tp_size, cfg.dp_size)
    for line in cfg.bare_warnings:
        log.bare(line)
    log.main(server_args_line(cfg))
    ranks = RankProcesses()
    titles = [
        scheduler_title(cfg.style.name, log.rank_tag(tp, dp))
        for dp in range(cfg.dp_size)
        for tp in range(cfg.tp_size)
    ] + ["sglang::detokenizer"]
    ranks.spawn(titles, orphan_index=0 if cfg.orphan else None, port=(cfg.host, cfg.port))
    server = SimServer(cfg, log, ranks)
    try:
        asyncio.run(server.run())
    except KeyboardInterrupt:
        pass
    finally:
        ranks.stop(keep_orphan=cfg.orphan)
