"""The simulated scheduler: batches requests into rounds paced by the performance model.

Requests join at round boundaries (a prefill forward first, which yields the first token), then
share decode rounds. Each round lasts ``perf.round_cost_s(spec, batch size)``; rounds are
scheduled against absolute deadlines so a client sees the modelled speed without drift. Every
``--decode-log-interval`` rounds a ``Decode batch`` line is printed with the style's fields.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from forensics.sim import perf
from forensics.sim.args import SimConfig
from forensics.sim.logstyle import LogWriter

WORDS = (
    " the", " of", " and", " to", " in", " a", " is", " that", " for", " it", " as", " with",
    " was", " on", " be", " by", " this", " are", " from", " or", " which", " an", " at", " not",
    " model", " token", " draft", " tree", " verify", " accept", " graph", " batch", " server",
    " simulated", " output", ".", ",", " Paris", " France", " capital", " city", " river",
)  # fmt: skip
MAX_LAG_S = 0.05  # a late round may catch up this much; beyond it the schedule restarts


@dataclass
class Req:
    rid: str
    prompt_tokens: int
    max_new_tokens: int
    ignore_eos: bool
    kind: str = "user"  # user | warmup | probe
    out_ids: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    finish_reason: dict[str, Any] | None = None
    verify_ct: int = 0
    accepted_drafts: int = 0
    histogram: list[int] = field(default_factory=list)
    decode_s: float = 0.0
    rounds: int = 0
    created: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    finished_at: float | None = None
    events: asyncio.Queue = field(default_factory=asyncio.Queue)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def text(self) -> str:
        return "".join(self.pieces)


class Engine:
    def __init__(
        self,
        cfg: SimConfig,
        log: LogWriter,
        *,
        max_total_tokens: int,
        eos_id: int,
        on_runtime_trigger: Callable[[], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.log = log
        self.style = cfg.style
        self.params = perf.PerfParams(base_tok_s=cfg.base_tok_s)
        self.spec = perf.SpecConfig(
            algorithm=cfg.spec_algorithm,
            num_steps=cfg.num_steps or 0,
            topk=cfg.topk or 1,
            num_draft_tokens=cfg.num_draft_tokens or 1,
            cuda_graph=cfg.cuda_graph,
            cuda_graph_max_bs=cfg.cuda_graph_max_bs,
            quality=perf.drafter_quality(cfg.draft_model_path, cfg.drafter_quality),
        )
        self.rng = random.Random(cfg.seed)
        self.max_total_tokens = max(1, max_total_tokens)
        self.max_running = cfg.max_running_requests or 1024
        self.eos_id = eos_id
        self.on_runtime_trigger = on_runtime_trigger
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self._wake = asyncio.Event()
        self.ready = False
        self.stalled = False
        self.dead = False
        self.triggered = False
        self.cur_batch: list[Req] = []
        # counters
        self.forward_ct_decode = 0
        self.traffic_rounds = 0
        self.last_forward_at = time.monotonic()
        self._reset_window()
        self.last_decode_log = time.monotonic()
        self.last_prefill_log = time.monotonic()
        self.cum_accept_tokens = 0
        self.cum_verify = 0
        self.last_gen_throughput = 0.0
        self.last_accept_len = 0.0
        self.last_accept_rate = 0.0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_total = 0
        self.cuda_graph_passes = 0

    # ---------------------------------------------------------------- public
    def new_rid(self) -> str:
        return uuid.UUID(int=self.rng.getrandbits(128)).hex

    def submit(self, req: Req) -> None:
        self.waiting.append(req)
        self._wake.set()

    def modelled(self) -> dict[str, Any]:
        """The model's expectations, for /server_info's "sim" section and the final chunk."""
        return {
            "simulator": True,
            "modelled_tok_s": round(perf.expected_tok_s(self.spec, 1, self.params), 3),
            "expected_accept_len": round(perf.expected_accept_len(self.spec), 4),
            "round_cost_s": round(perf.round_cost_s(self.spec, 1, self.params), 6),
            "drafter_quality": self.spec.quality,
            "base_tok_s": self.params.base_tok_s,
        }

    @property
    def avg_spec_accept_length(self) -> float | None:
        if not self.spec.speculative or self.cum_verify == 0:
            return None
        return self.cum_accept_tokens / self.cum_verify

    def flush(self) -> bool:
        if self.waiting or self.running:
            self.log.rank(
                0,
                "Cache not flushed because there are pending requests. "
                f"#queue-req: {len(self.waiting)}, #running-req: {len(self.running)}",
            )
            return False
        self._reset_window()
        self.cum_accept_tokens = 0
        self.cum_verify = 0
        self.log.rank(0, "Cache flushed successfully!")
        return True

    # ---------------------------------------------------------------- loop
    def _reset_window(self) -> None:
        self.win_accept_tokens = 0
        self.win_forward = 0
        self.win_drafts = 0
        self.win_gen_tokens = 0

    def _should_trigger(self) -> bool:
        runtime_fail = self.cfg.fail in ("runtime-ima", "runtime-nccl-timeout")
        return (
            self.ready
            and not self.triggered
            and (runtime_fail or self.cfg.hang == "runtime")
            and self.forward_ct_decode_traffic >= self.cfg.fail_after
        )

    @property
    def forward_ct_decode_traffic(self) -> int:
        return self.traffic_rounds

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        t_next = loop.time()
        while True:
            if not self.waiting and not self.running:
                self._wake.clear()
                await self._wake.wait()
                t_next = loop.time()
            if self.stalled or self.dead:
                await asyncio.Event().wait()  # no progress, ever
            if self._should_trigger():
                self.triggered = True
                self.cur_batch = list(self.running) or list(self.waiting)
                if self.on_runtime_trigger is not None:
                    self.on_runtime_trigger()
                continue
            now = loop.time()
            if t_next < now - MAX_LAG_S:
                t_next = now
            room = self.max_running - len(self.running)
            if self.waiting and room > 0:
                batch = [self.waiting.popleft() for _ in range(min(room, len(self.waiting)))]
                t_next += await self._prefill(batch, t_next)
            elif self.running:
                t_next += await self._decode_round(t_next)

    async def _sleep_until(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        delay = deadline - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)

    async def _prefill(self, batch: list[Req], start: float) -> float:
        new_tokens = sum(r.prompt_tokens for r in batch)
        now = time.monotonic()
        used = self._used_tokens() + new_tokens
        elapsed = max(now - self.last_prefill_log, 1e-6)
        self.last_prefill_log = now
        self.log.rank(
            0,
            self.style.prefill.format(
                new_seq=len(batch),
                new_token=new_tokens,
                cached=0,
                usage=used / self.max_total_tokens,
                running=len(self.running),
                queue=len(self.waiting),
                input_tps=new_tokens / elapsed,
            ),
        )
        cost = perf.prefill_cost_s(new_tokens, self.params)
        await self._sleep_until(start + cost)
        if self.stalled or self.dead:
            return cost
        self._count_traffic(batch)
        for req in batch:
            self.prompt_tokens_total += req.prompt_tokens
            self.requests_total += 1
            req.first_token_at = time.monotonic()
            self._emit(req, 1)
            if not req.done:
                self.running.append(req)
            self._notify(req)
        return cost

    async def _decode_round(self, start: float) -> float:
        bs = len(self.running)
        cost = perf.round_cost_s(self.spec, bs, self.params)
        await self._sleep_until(start + cost)
        if self.stalled or self.dead:
            return cost
        self._count_traffic(self.running)
        graphs = self.spec.cuda_graph and bs <= self.spec.cuda_graph_max_bs
        if graphs:
            self.cuda_graph_passes += 1
        for req in self.running:
            accepted = perf.draw_accepted(self.rng, self.spec) if self.spec.speculative else 0
            req.rounds += 1
            req.decode_s += cost
            if self.spec.speculative:
                req.verify_ct += 1
                req.accepted_drafts += accepted
                depth = perf.tree_depth(self.spec)
                if not req.histogram:
                    req.histogram = [0] * (depth + 1)
                req.histogram[accepted] += 1
                self.win_accept_tokens += accepted + 1
                self.win_forward += 1
                self.win_drafts += accepted
                self.cum_accept_tokens += accepted + 1
                self.cum_verify += 1
            self._emit(req, accepted + 1)
            self._notify(req)
        self.forward_ct_decode += 1
        if self.forward_ct_decode % self.cfg.decode_log_interval == 0:
            self._log_decode(bs, graphs)
        self.running = [r for r in self.running if not r.done]
        return cost

    def _count_traffic(self, reqs: list[Req]) -> None:
        self.last_forward_at = time.monotonic()
        if self.ready and any(r.kind != "warmup" for r in reqs):
            self.traffic_rounds += 1

    def _emit(self, req: Req, n: int) -> None:
        for _ in range(n):
            if req.done:
                return
            if not req.ignore_eos and self.rng.random() < self.cfg.eos_rate:
                req.out_ids.append(self.eos_id)
                req.finish_reason = {"type": "stop", "matched": self.eos_id}
            else:
                idx = self.rng.randrange(len(WORDS))
                req.out_ids.append(1000 + idx)
                req.pieces.append(WORDS[idx])
                if len(req.out_ids) >= req.max_new_tokens:
                    req.finish_reason = {"type": "length", "length": req.max_new_tokens}
            self.generation_tokens_total += 1
            self.win_gen_tokens += 1
        if req.done:
            req.finished_at = time.monotonic()

    def _notify(self, req: Req) -> None:
        req.events.put_nowait(req.done)

    def _used_tokens(self) -> int:
        return sum(r.prompt_tokens + len(r.out_ids) for r in self.running)

    def _log_decode(self, bs: int, graphs: bool) -> None:
        now = time.monotonic()
        gen = self.win_gen_tokens / max(now - self.last_decode_log, 1e-6)
        self.last_decode_log = now
        self.last_gen_throughput = gen
        spec = ""
        if self.spec.speculative and self.win_forward:
            accept_len = self.win_accept_tokens / self.win_forward
            formula = self.style.accept_rate_formula
            if formula == "ndt":
                rate = self.win_accept_tokens / (
                    self.win_forward * max(1, self.spec.num_draft_tokens)
                )
            elif formula == "strict":
                denom = (
                    self.spec.num_draft_tokens - 1
                    if self.spec.num_draft_tokens > 1
                    else self.spec.num_steps
                )
                rate = self.win_drafts / (self.win_forward * max(1, denom))
            elif formula == "steps1":
                rate = accept_len / max(1, self.spec.num_steps + 1)
            else:
                rate = 0.0
            self.last_accept_len, self.last_accept_rate = accept_len, rate
            spec = self.style.decode_spec.format(accept_len=accept_len, accept_rate=rate)
        tokens = self._used_tokens()
        self.log.rank(
            0,
            self.style.decode.format(
                running=bs,
                tokens=tokens,
                usage=tokens / self.max_total_tokens,
                spec=spec,
                cuda_graph=graphs,
                gen=gen,
                queue=len(self.waiting),
            ),
        )
        self._reset_window()

    # ---------------------------------------------------------------- per-request output
    def meta_info(self, req: Req, *, final: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": req.finish_reason if final else None,
            "prompt_tokens": req.prompt_tokens,
        }
        if self.style.weight_version:
            meta["weight_version"] = "default"
        meta["completion_tokens"] = len(req.out_ids)
        meta["cached_tokens"] = 0
        if self.style.reasoning_tokens:
            meta["reasoning_tokens"] = 0
        if not final:
            return meta
        meta["e2e_latency"] = round((req.finished_at or time.monotonic()) - req.created, 6)
        if self.spec.speculative:
            meta.update(self._spec_meta(req))
        meta["sim"] = {
            "simulator": True,
            "decode_s": round(req.decode_s, 6),
            "rounds": req.rounds,
            "accepted_drafts": req.accepted_drafts,
            "realized_tok_s": round(req.rounds and (len(req.out_ids) - 1) / req.decode_s, 3)
            if req.decode_s > 0
            else None,
            **self.modelled(),
        }
        return meta

    def _spec_meta(self, req: Req) -> dict[str, Any]:
        family = self.style.spec_meta
        vct = req.verify_ct
        if family == "verify_ct":
            return {"spec_verify_ct": vct}
        ndt1 = max(1, self.spec.num_draft_tokens - 1)
        proposed = vct * ndt1
        rate = req.accepted_drafts / proposed if proposed else 0.0
        length = len(req.out_ids) / vct if vct else 0.0
        hist = req.histogram or [0] * (perf.tree_depth(self.spec) + 1)
        if family == "v059":
            if vct == 0:
                return {}
            return {
                "spec_accept_rate": rate,
                "spec_accept_length": length,
                "spec_verify_ct": vct,
                "spec_accept_token_num": req.accepted_drafts,
                "spec_draft_token_num": proposed,
                "spec_accept_histogram": hist,
            }
        return {
            "spec_accept_rate": rate,
            "spec_accept_length": length,
            "spec_num_correct_drafts": req.accepted_drafts,
            "spec_num_proposed_drafts": proposed,
            "spec_verify_ct": vct,
            "spec_correct_drafts_histogram": hist,
        }
