"""The startup sequence of a simulated SGLang server, per style (reference §2.1).

≤ 0.5.13 (styles 0.4.6, 0.5.9): target load → target KV pool → target graphs → draft load →
draft KV pool → draft graphs → capacity line. ≥ 0.5.14 (style 0.5.23): target weights → draft
weights → KV pools → target verify graphs → draft decode/extend graphs → capacity line.
Durations are modelled seconds divided by ``--sim-speed``; the ``elapsed=`` values printed are the
real elapsed times, so the log stays consistent with its own timestamps.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from forensics.sim import failures
from forensics.sim.args import SimConfig
from forensics.sim.logstyle import LogWriter, shard_frame, tqdm_frame

GPU_TOTAL_GB = 139.80  # an H200 as torch reports it
GPU_START_AVAIL_GB = 139.17


@dataclass(frozen=True)
class ModelSpec:
    arch: str
    weight_gb: float  # whole checkpoint
    shards: int
    context_len: int
    kv_bytes_per_token: int  # per rank for MLA, whole model for MHA (split over TP)
    mla: bool
    eos_id: int
    draft_eagle3: str
    draft_eagle: str
    draft_weight_gb: float


# First keyword found in the model path wins; the last row is the default.
MODELS: tuple[tuple[str, ModelSpec], ...] = (
    ("kimi", ModelSpec("DeepseekV3ForCausalLM", 594.6, 64, 262144, 70272, True, 163586,
                       "LlamaForCausalLMEagle3", "DeepseekV3ForCausalLMNextN", 2.31)),
    ("deepseek", ModelSpec("DeepseekV3ForCausalLM", 671.0, 163, 163840, 70272, True, 1,
                           "LlamaForCausalLMEagle3", "DeepseekV3ForCausalLMNextN", 2.31)),
    ("qwen", ModelSpec("Qwen3ForCausalLM", 16.38, 5, 40960, 147456, False, 151645,
                       "LlamaForCausalLMEagle3", "Qwen2ForCausalLMEagle", 0.76)),
    ("", ModelSpec("LlamaForCausalLM", 14.99, 4, 131072, 131072, False, 128009,
                   "LlamaForCausalLMEagle3", "LlamaForCausalLMEagle", 0.80)),
)  # fmt: skip


def model_spec(model_path: str) -> ModelSpec:
    low = model_path.lower()
    for key, spec in MODELS:
        if key in low:
            return spec
    return MODELS[-1][1]


def capture_bs_list(max_bs: int) -> list[int]:
    sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8))
    out = [b for b in sizes if b <= max_bs]
    return out or [1]


# --------------------------------------------------------------------------- server_args


def server_args_fields(cfg: SimConfig) -> list[tuple[str, Any]]:
    """ServerArgs fields in declaration order (a representative subset), resolved values."""
    e = cfg.extra
    cg_key = "cuda_graph_max_bs_decode" if cfg.style.split_cuda_graph_flags else "cuda_graph_max_bs"
    return [
        ("model_path", cfg.model_path),
        ("tokenizer_path", e["tokenizer_path"]),
        ("tokenizer_mode", "auto"),
        ("skip_tokenizer_init", False),
        ("load_format", "auto"),
        ("trust_remote_code", cfg.trust_remote_code),
        ("dtype", e["dtype"]),
        ("kv_cache_dtype", e["kv_cache_dtype"]),
        ("quantization", None),
        ("context_length", cfg.context_length),
        ("device", "cuda"),
        ("served_model_name", cfg.served_model_name),
        ("chat_template", None),
        ("is_embedding", False),
        ("revision", None),
        ("host", cfg.host),
        ("port", cfg.port),
        ("mem_fraction_static", cfg.mem_fraction_static),
        ("max_running_requests", cfg.max_running_requests),
        ("max_total_tokens", None),
        ("chunked_prefill_size", cfg.chunked_prefill_size),
        ("max_prefill_tokens", 16384),
        ("schedule_policy", "fcfs"),
        ("schedule_conservativeness", 1.0),
        ("page_size", e["page_size"]),
        ("tp_size", cfg.tp_size),
        ("stream_interval", 1),
        ("random_seed", cfg.random_seed),
        ("watchdog_timeout", cfg.watchdog_timeout),
        ("dist_timeout", None),
        ("base_gpu_id", 0),
        ("log_level", e["log_level"]),
        ("log_level_http", None),
        ("log_requests", cfg.log_requests),
        ("log_requests_level", cfg.log_requests_level),
        ("enable_metrics", cfg.enable_metrics),
        ("decode_log_interval", cfg.decode_log_interval),
        ("enable_cache_report", e["enable_cache_report"]),
        ("dp_size", cfg.dp_size),
        ("load_balance_method", "round_robin"),
        ("ep_size", 1),
        ("dist_init_addr", None),
        ("nnodes", 1),
        ("node_rank", 0),
        ("attention_backend", e["attention_backend"]),
        ("speculative_algorithm", cfg.spec_algorithm),
        ("speculative_draft_model_path", cfg.draft_model_path if cfg.speculative else None),
        ("speculative_num_steps", cfg.num_steps),
        ("speculative_eagle_topk", cfg.topk),
        ("speculative_num_draft_tokens", cfg.num_draft_tokens),
        ("speculative_accept_threshold_single", 1.0),
        ("speculative_accept_threshold_acc", 1.0),
        ("speculative_token_map", e["speculative_token_map"]),
        ("disable_radix_cache", e["disable_radix_cache"]),
        ("disable_cuda_graph", not cfg.cuda_graph),
        ("disable_cuda_graph_padding", False),
        ("disable_overlap_schedule", cfg.speculative and not cfg.style.spec_v2_overlap),
        ("enable_dp_attention", e["enable_dp_attention"]),
        ("enable_torch_compile", False),
        (cg_key, cfg.cuda_graph_max_bs),
        ("cuda_graph_bs", None),
        ("skip_server_warmup", cfg.skip_server_warmup),
    ]


def server_args_line(cfg: SimConfig) -> str:
    fields = server_args_fields(cfg)
    if cfg.style.server_args_dict:
        return "server_args={" + ", ".join(f"{k!r}: {v!r}" for k, v in fields) + "}"
    return "server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in fields) + ")"


# --------------------------------------------------------------------------- the sequence


class InitFailure(Exception):
    """A scheduler died during startup; the server prints the SIGQUIT chain and dies."""

    def __init__(self, code: int = 1) -> None:
        super().__init__(code)
        self.code = code


class Startup:
    """Prints the startup lines of every rank, paced by ``--sim-speed``."""

    def __init__(self, cfg: SimConfig, log: LogWriter) -> None:
        self.cfg = cfg
        self.log = log
        self.style = cfg.style
        self.model = model_spec(cfg.model_path)
        self.tp = cfg.tp_size
        self.ranks = [(dp, tp) for dp in range(cfg.dp_size) for tp in range(cfg.tp_size)]
        self.avail = {
            r: GPU_START_AVAIL_GB - 0.02 * (r[0] * cfg.tp_size + r[1]) for r in self.ranks
        }
        self.max_total_tokens = 0
        self.draft_tokens = 0

    # -- helpers
    async def pause(self, modelled_s: float) -> None:
        await asyncio.sleep(max(0.0, modelled_s) / self.cfg.speed)

    def each(self, msg_for, *, rank0_only: bool = False) -> None:
        for dp, tp in self.ranks:
            if rank0_only and tp != 0:
                continue
            self.log.rank(tp, msg_for((dp, tp)), dp=dp)

    async def hang_forever(self) -> None:
        await asyncio.Event().wait()

    async def fail_init(self, traceback_for) -> None:
        """Each rank logs ``Scheduler hit an exception`` with its traceback; then init fails."""
        for dp, tp in self.ranks:
            self.log.rank(tp, f"Scheduler hit an exception: {traceback_for((dp, tp))}", dp=dp)
        raise InitFailure(1)

    # -- phases
    async def run(self) -> None:
        cfg = self.cfg
        await self.pause(1.0)
        await self.dist_init()
        if self.style.startup_order == "target_first":
            await self.load_target()
            await self.kv_pool(draft=False)
            if cfg.cuda_graph:
                await self.capture_target()
            if cfg.speculative:
                await self.load_draft()
                await self.kv_pool(draft=True)
                if cfg.cuda_graph:
                    await self.capture_draft()
        else:
            await self.load_target()
            if cfg.speculative:
                await self.load_draft()
            await self.kv_pool(draft=False)
            if cfg.speculative:
                await self.kv_pool(draft=True)
            if cfg.cuda_graph:
                await self.capture_target()
                if cfg.speculative:
                    await self.capture_draft()
        self.capacity()

    async def dist_init(self) -> None:
        t0 = time.monotonic()
        self.each(lambda r: "Init torch distributed begin.")
        if self.tp > 1:
            self.each(lambda r: "sglang is using nccl==2.27.3")
        await self.pause(1.5 + 0.3 * self.tp)
        usage = 0.43 if self.tp == 1 else 0.97
        for r in self.ranks:
            self.avail[r] -= usage
        el = time.monotonic() - t0
        self.each(lambda r: self.style.dist_end.format(elapsed=el, usage=usage))

    async def _shard_bar(self, total: int, modelled_s: float, stop_at: int | None = None) -> None:
        desc = "Loading safetensors checkpoint shards"
        newline = self.style.shard_bar_newline
        t0 = time.monotonic()
        per = modelled_s / max(1, total)
        for n in range(total + 1):
            if n:
                await self.pause(per)
            frame = shard_frame(desc, n, total, time.monotonic() - t0)
            self.log.raw("\r" + frame + ("\n" if newline else ""))
            if stop_at is not None and n >= stop_at:
                return
        if not newline:
            self.log.raw("\n")

    async def load_target(self) -> None:
        t0 = time.monotonic()
        self.each(lambda r: f"Load weight begin. avail mem={self.avail[r]:.2f} GB")
        per_rank = min(self.model.weight_gb / self.tp, 0.55 * GPU_TOTAL_GB)
        load_s = 20.0 + 1.2 * per_rank
        fail = self.cfg.fail == "load-oom"
        hang = self.cfg.hang == "load"
        stop = max(1, int(self.model.shards * 0.4)) if (fail or hang) else None
        await self._shard_bar(self.model.shards, load_s, stop_at=stop)
        if hang:
            self.log.raw("\n" if not self.style.shard_bar_newline else "")
            await self.hang_forever()
        if fail:
            if not self.style.shard_bar_newline:
                self.log.raw("\n")
            await self.fail_init(lambda r: failures.load_oom(self.style, free_gib=1.21))
        for r in self.ranks:
            self.avail[r] -= per_rank
        el = time.monotonic() - t0
        self.each(
            lambda r: self.style.load_end.format(
                elapsed=el, cls=self.model.arch, dtype="torch.bfloat16",
                avail=self.avail[r], usage=per_rank,
            )
        )  # fmt: skip

    async def load_draft(self) -> None:
        t0 = time.monotonic()
        self.each(lambda r: f"Load weight begin. avail mem={self.avail[r]:.2f} GB")
        await self._shard_bar(1, 4.0)
        cls = (
            self.model.draft_eagle3
            if self.cfg.spec_algorithm == "EAGLE3"
            else self.model.draft_eagle
        )
        w = self.model.draft_weight_gb
        for r in self.ranks:
            self.avail[r] -= w
        el = time.monotonic() - t0
        self.each(
            lambda r: self.style.load_end.format(
                elapsed=el, cls=cls, dtype="torch.bfloat16", avail=self.avail[r], usage=w
            )
        )

    async def kv_pool(self, *, draft: bool) -> None:
        await self.pause(2.0 if not draft else 0.5)
        cfg = self.cfg
        r0 = self.ranks[0]
        if not draft:
            reserve = GPU_TOTAL_GB * (1.0 - cfg.mem_fraction_static)
            kv_gb = self.avail[r0] - reserve
            if cfg.fail == "kv-oom" or kv_gb <= 0.5:
                await self.fail_init(lambda r: failures.kv_oom(self.style, cfg.mem_fraction_static))
            kv_gb *= 0.97 if cfg.speculative else 1.0
            per_token = self.model.kv_bytes_per_token
            if not self.model.mla:
                per_token = max(1, per_token // self.tp)
            self.max_total_tokens = int(kv_gb * (1 << 30) / per_token)
            self._kv_line(self.max_total_tokens, kv_gb)
        else:
            tokens = self.max_total_tokens
            kv_gb = tokens * 4096 / (1 << 30)
            self._kv_line(tokens, kv_gb)
        for r in self.ranks:
            self.avail[r] -= kv_gb
        self.each(lambda r: f"Memory pool end. avail mem={self.avail[r]:.2f} GB")

    def _kv_line(self, tokens: int, kv_gb: float) -> None:
        if self.model.mla and kv_gb > 0.5:
            text = self.style.kv_mla.format(dtype="torch.bfloat16", tokens=tokens, kv=kv_gb)
        else:
            text = self.style.kv_mha.format(
                dtype="torch.bfloat16", tokens=tokens, k=kv_gb / 2, v=kv_gb / 2
            )
        self.each(lambda r: text)

    async def _capture_bar(
        self, bs_list: list[int], modelled_s: float, *, stop_at: int | None
    ) -> None:
        """tqdm over the batch sizes, largest first, on TP0 only; ``\\r`` frames, one line."""
        r0 = self.ranks[0]
        t0 = time.monotonic()
        order = list(reversed(bs_list))
        total = len(order)
        per = modelled_s / max(1, total)
        self.log.raw("\r" + tqdm_frame("", 0, total, 0.0))
        for i, bs in enumerate(order):
            desc = self.style.capture_bar_desc.format(bs=bs, avail=self.avail[r0])
            self.log.raw("\r" + tqdm_frame(desc, i, total, time.monotonic() - t0))
            if stop_at is not None and i >= stop_at:
                return
            await self.pause(per)
        self.log.raw("\r" + tqdm_frame(desc, total, total, time.monotonic() - t0) + "\n")

    async def _capture(self, begin: str, end: str, *, ntok: int, usage: float, modelled_s: float,
                       rank0_only: bool, kind: str = "decode", target: bool = False) -> None:  # fmt: skip
        cfg = self.cfg
        bs_list = capture_bs_list(cfg.cuda_graph_max_bs)
        bs_text = "[" + ", ".join(map(str, bs_list)) + "]"
        t0 = time.monotonic()
        self.each(
            lambda r: begin.format(kind=kind, ntok=ntok, bs_list=bs_text, avail=self.avail[r]),
            rank0_only=rank0_only,
        )
        if target and self.style.capture_bs_line:
            self.log.rank(0, f"Capture cuda graph bs {bs_list}")
        fail = target and cfg.fail in ("capture-oom", "capture-error")
        hang = target and cfg.hang == "capture"
        stop = min(len(bs_list) - 1, 2) if (fail or hang) else None
        await self._capture_bar(bs_list, modelled_s, stop_at=stop)
        if hang:
            await self.hang_forever()
        if fail:
            self.log.raw("\n")
            oom = cfg.fail == "capture-oom"
            await self.fail_init(lambda r: failures.capture_failure(self.style, oom, free_gib=0.31))
        for r in self.ranks:
            self.avail[r] -= usage
        el = time.monotonic() - t0
        self.each(
            lambda r: end.format(
                kind=kind, bs_list=bs_text, elapsed=el, usage=usage, avail=self.avail[r]
            ),
            rank0_only=rank0_only,
        )

    async def capture_target(self) -> None:
        cfg = self.cfg
        n = len(capture_bs_list(cfg.cuda_graph_max_bs))
        ntok = cfg.num_draft_tokens if cfg.speculative else 1
        await self._capture(
            self.style.capture_target_begin,
            self.style.capture_target_end,
            ntok=ntok,
            usage=1.29,
            modelled_s=1.5 * n * (1 + ntok / 16),
            rank0_only=False,
            kind="verify" if cfg.speculative else "decode",
            target=True,
        )

    async def capture_draft(self) -> None:
        cfg = self.cfg
        n = len(capture_bs_list(cfg.cuda_graph_max_bs))
        st = self.style
        if (cfg.num_steps or 0) > 1 or st.draft_capture_single_step:
            await self._capture(
                st.capture_draft_begin, st.capture_draft_end, ntok=cfg.topk or 1, usage=0.41,
                modelled_s=0.6 * n, rank0_only=st.draft_capture_rank0_only,
            )  # fmt: skip
        if st.capture_extend_begin and st.capture_extend_end:
            await self._capture(
                st.capture_extend_begin, st.capture_extend_end, ntok=cfg.num_draft_tokens or 1,
                usage=0.28, modelled_s=0.5 * n, rank0_only=st.draft_capture_rank0_only,
            )  # fmt: skip

    def capacity(self) -> None:
        cfg = self.cfg
        ctx = cfg.context_length or self.model.context_len
        text = lambda r: self.style.capacity.format(  # noqa: E731
            total=self.max_total_tokens,
            chunk=cfg.chunked_prefill_size,
            prefill=16384,
            running=cfg.max_running_requests or 4096,
            ctx=ctx,
            avail=self.avail[r],
        )
        self.each(text, rank0_only=not self.style.capacity_all_ranks)
