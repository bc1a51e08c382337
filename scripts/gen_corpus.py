"""Generate the labeled corpus of SGLang failure logs under forensics/data/corpus/ (deterministic).

    .venv/bin/python scripts/gen_corpus.py          # writes forensics/data/corpus/gen/*.log + labels.csv

Every example is a whole log or a fragment of one, built from SGLang's format strings for one
of five output styles (0.4.3, 0.4.6, 0.5.2, 0.5.9, 0.5.23; reference §2, §4) and one failure
scenario, with its label (phase, hung, signature). Models, tp sizes, numbers, paths and
messages vary; messy variants are cut to the last screen, reduced to the traceback, have ranks
interleaved, lines cut mid-field, ANSI colours, CRLF, or other prefixes (Python logging,
glog-style, container). The held-out split is by *family* (scenario x style), never by
line: no family of the test split is seen in training. Hand-written examples under
forensics/data/corpus/hand/ are listed in labels.csv as the `hand` split.
"""

from __future__ import annotations

import csv
import random
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "forensics" / "data" / "corpus"
STYLES = ["0.4.3", "0.4.6", "0.5.2", "0.5.9", "0.5.23"]
PER_FAMILY = 3

MODELS = [
    (
        "meta-llama/Llama-3.1-8B-Instruct",
        "LlamaForCausalLM",
        "LlamaForCausalLMEagle3",
        "/data/eagle3/llama31-8b-eagle3",
    ),
    (
        "/models/Qwen3-32B",
        "Qwen3ForCausalLM",
        "LlamaForCausalLMEagle3",
        "/data/drafts/qwen3-32b-eagle3",
    ),
    (
        "/data/models/Kimi-K2.5",
        "DeepseekV3ForCausalLM",
        "LlamaForCausalLMEagle3",
        "/data/eagle3/output_10k_sglang/4",
    ),
    (
        "deepseek-ai/DeepSeek-V3",
        "DeepseekV3ForCausalLM",
        "DeepseekV3ForCausalLMNextN",
        "deepseek-ai/DeepSeek-V3",
    ),
    (
        "/mnt/ckpt/Llama-3.3-70B-Instruct",
        "LlamaForCausalLM",
        "LlamaForCausalLMEagle",
        "/mnt/ckpt/eagle-llama3.3-70b",
    ),
]
SITES = [
    "/usr/local/lib/python3.10/dist-packages",
    "/opt/conda/lib/python3.11/site-packages",
    "/root/.venv/lib/python3.12/site-packages",
    "/sgl-workspace/sglang/python",
]


class Log:
    """Lines of one log: (seconds, rank or None for main, message) or raw unprefixed text."""

    def __init__(self, rng: random.Random, style: str, cfg: dict):
        self.rng, self.style, self.cfg = rng, style, cfg
        self.t = rng.randint(0, 20000)
        self.items: list[tuple[str, float, int | None, str]] = []

    def tick(self, lo: float = 0.0, hi: float = 2.0) -> None:
        self.t += self.rng.uniform(lo, hi)

    def main(self, msg: str) -> None:
        self.items.append(("log", self.t, None, msg))

    def sched(self, msg: str, ranks: list[int] | None = None) -> None:
        for r in ranks if ranks is not None else range(self.cfg["tp"]):
            self.items.append(("log", self.t + r * 0.01, r, msg))

    def raw(self, text: str) -> None:
        for ln in text.split("\n"):
            self.items.append(("raw", self.t, None, ln))

    def render(self, prefix: str = "sglang") -> list[str]:
        out = []
        date = self.cfg["date"]
        for kind, t, rank, msg in self.items:
            if kind == "raw":
                out.append(msg)
                continue
            h, rem = divmod(int(t), 3600)
            m, s = divmod(rem, 60)
            clock = f"{(8 + h) % 24:02d}:{m:02d}:{s:02d}"
            ms = int((t % 1) * 1000)
            tag = ""
            if rank is not None and (self.style in ("0.4.3", "0.4.6") or self.cfg["tp"] > 1):
                tag = f" TP{rank}"
            if prefix == "sglang":
                frac = f".{ms:03d}" if self.style == "0.5.23" else ""
                out.append(f"[{date} {clock}{frac}{tag}] {msg}")
            elif prefix == "pylog":
                name = (
                    "sglang.srt.managers.scheduler"
                    if rank is not None
                    else "sglang.srt.entrypoints.http_server"
                )
                lvl = "ERROR" if ("exception" in msg or "rror" in msg) else "INFO"
                out.append(f"{date} {clock},{ms:03d} [{lvl}] {name}: {msg}")
            elif prefix == "glog":
                lvl = "ERROR" if "exception" in msg else "INFO"
                src = "scheduler.py" if rank is not None else "http_server.py"
                out.append(
                    f"{date} {clock} {lvl} {4000 + (rank or 0)} [{src}:{100 + len(msg) % 900}] {msg}"
                )
            elif prefix == "bare":
                out.append(msg)
        return out


def new_cfg(rng: random.Random, style: str) -> dict:
    model, cls, dcls, draft = rng.choice(MODELS)
    tp = rng.choice([1, 1, 2, 4, 8]) if "Kimi" not in model else 8
    steps = rng.choice([1, 2, 3, 4, 5])
    topk = rng.choice([1, 2, 4, 8])
    ndt = steps + 1 if topk == 1 else rng.choice([4, 5, 8, 16])
    year = {"0.4.3": 2025, "0.4.6": 2025, "0.5.2": 2025, "0.5.9": 2026, "0.5.23": 2026}[style]
    return {
        "model": model,
        "cls": cls,
        "dcls": dcls,
        "draft": draft,
        "tp": tp,
        "steps": steps,
        "topk": topk,
        "ndt": ndt,
        "mem": round(rng.uniform(0.7, 0.92), 2),
        "port": rng.choice([30000, 30000, 30001, 8000, 31000]),
        "date": f"{year}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        "site": rng.choice(SITES),
        "spec": rng.random() < 0.85,
        "avail": round(rng.uniform(60, 139), 2),
        "max_bs": rng.choice([16, 32, 48, 80, 160]),
    }


def server_args(log: Log) -> None:
    c = log.cfg
    spec = (
        (
            f", speculative_algorithm='EAGLE3', speculative_draft_model_path='{c['draft']}', "
            f"speculative_num_steps={c['steps']}, speculative_eagle_topk={c['topk']}, "
            f"speculative_num_draft_tokens={c['ndt']}"
        )
        if c["spec"]
        else ", speculative_algorithm=None"
    )
    if log.style == "0.5.23":
        sp = (
            (
                f", 'speculative_algorithm': 'EAGLE3', 'speculative_draft_model_path': '{c['draft']}', "
                f"'speculative_num_steps': {c['steps']}, 'speculative_eagle_topk': {c['topk']}, "
                f"'speculative_num_draft_tokens': {c['ndt']}"
            )
            if c["spec"]
            else ""
        )
        log.main(
            f"server_args={{'model_path': '{c['model']}', 'tokenizer_path': '{c['model']}', "
            f"'host': '127.0.0.1', 'port': {c['port']}, 'mem_fraction_static': {c['mem']}, "
            f"'tp_size': {c['tp']}, 'watchdog_timeout': 300{sp}, 'cuda_graph_max_bs_decode': {c['max_bs']}}}"
        )
    else:
        log.main(
            f"server_args=ServerArgs(model_path='{c['model']}', tokenizer_path='{c['model']}', "
            f"tokenizer_mode='auto', host='127.0.0.1', port={c['port']}, "
            f"mem_fraction_static={c['mem']}, tp_size={c['tp']}, watchdog_timeout=300{spec}, "
            f"disable_cuda_graph=False, cuda_graph_max_bs={c['max_bs']})"
        )


def mem(log: Log, drop: float = 0.0) -> float:
    log.cfg["avail"] = max(1.0, round(log.cfg["avail"] - drop, 2))
    return log.cfg["avail"]


def load(log: Log, draft: bool, end: bool = True, shards: float = 1.0) -> None:
    c, s = log.cfg, log.style
    log.sched(f"Load weight begin. avail mem={mem(log):.2f} GB")
    n = log.rng.randint(2, 64) if not draft else 1
    done = max(0, int(n * shards))
    if log.rng.random() < 0.7:
        log.raw(
            f"Loading safetensors checkpoint shards: {100 * done // n:3d}% Completed | {done}/{n} "
            f"[00:{log.rng.randint(1, 59):02d}<00:{log.rng.randint(0, 59):02d}, "
            f"{log.rng.uniform(0.5, 9):.2f}it/s]"
        )
    log.tick(3, 60 if not draft else 5)
    if not end:
        return
    cls = c["dcls"] if draft else c["cls"]
    u = round(log.rng.uniform(0.5, 3) if draft else log.rng.uniform(14, 70) / c["tp"], 2)
    a = mem(log, u)
    if s == "0.4.3":
        log.sched(f"Load weight end. type={cls}, dtype=torch.bfloat16, avail mem={a:.2f} GB")
    elif s in ("0.4.6", "0.5.2"):
        log.sched(
            f"Load weight end. type={cls}, dtype=torch.bfloat16, avail mem={a:.2f} GB, mem usage={u:.2f} GB."
        )
    else:
        log.sched(
            f"Load weight end. elapsed={log.rng.uniform(2, 90):.2f} s, type={cls}, "
            f"{'quant=fp8, ' if log.rng.random() < 0.3 else ''}avail mem={a:.2f} GB, mem usage={u:.2f} GB."
        )


def kv(log: Log, draft: bool) -> None:
    tokens = log.rng.randint(20000, 900000)
    size = round(log.rng.uniform(2, 40) / (4 if draft else 1), 2)
    log.sched(
        f"KV Cache is allocated. #tokens: {tokens}, K size: {size / 2:.2f} GB, V size: {size / 2:.2f} GB"
    )
    log.sched(f"Memory pool end. avail mem={mem(log, size):.2f} GB")
    log.tick()


def capture(log: Log, which: str, end: bool = True, frac: float = 1.0) -> None:
    s, c = log.style, log.cfg
    bss = [
        b for b in [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 64, 80, 96, 128, 160] if b <= c["max_bs"]
    ]
    m = mem(log)
    if s == "0.5.23":
        role = {
            "target": "target verify" if c["spec"] else "target decode",
            "draft": "draft decode",
            "extend": "draft extend",
        }[which]
        log.sched(
            f"Capture {role} CUDA graph begin. backend=full, num_tokens_per_req={c['ndt']}, avail mem={m:.2f} GB"
        )
    elif s == "0.4.3":
        log.sched("Capture cuda graph begin. This can take up to several minutes.")
    else:
        name = {
            "target": "cuda graph",
            "draft": "draft cuda graph",
            "extend": "draft extend cuda graph",
        }[which]
        if s == "0.4.6" and which == "extend":
            return
        log.sched(
            f"Capture {name} begin. This can take up to several minutes. avail mem={m:.2f} GB"
        )
        if s in ("0.5.2", "0.5.9") and which == "target":
            log.main(f"Capture cuda graph bs {bss}")
    done = max(0, int(len(bss) * frac))
    if s != "0.4.3" or done:
        frames = []
        for i in range(1, done + 1 if end else done + 1):
            bs = bss[-min(i, len(bss))]
            pct = 100 * i // len(bss)
            lab = (
                f"Capturing batches (bs={bs} avail_mem={m - i * 0.05:.2f} GB)"
                if s != "0.4.6"
                else f"Capturing batches (avail_mem={m - i * 0.05:.2f} GB)"
            )
            frames.append(
                f"{lab}: {pct:3d}%|{'#' * (pct // 10):10s}| {i}/{len(bss)} [00:0{i % 10}<00:0{(len(bss) - i) % 10}, {log.rng.uniform(1, 9):.2f}it/s]"
            )
        if frames:
            log.raw("\r".join(frames[-4:]))
    log.tick(2, 40)
    if not end:
        return
    t = log.rng.uniform(3, 90)
    u = round(log.rng.uniform(0.2, 3), 2)
    a = mem(log, u)
    if s == "0.5.23":
        role = {
            "target": "target verify" if c["spec"] else "target decode",
            "draft": "draft decode",
            "extend": "draft extend",
        }[which]
        log.sched(
            f"Capture {role} CUDA graph end. bs={bss}, elapsed={t:.2f} s, mem usage={u:.2f} GB, avail mem={a:.2f} GB."
        )
    elif s == "0.4.3":
        log.sched(f"Capture cuda graph end. Time elapsed: {t:.2f} s")
    else:
        name = {
            "target": "cuda graph",
            "draft": "draft cuda graph",
            "extend": "draft extend cuda graph",
        }[which]
        log.sched(
            f"Capture {name} end. Time elapsed: {t:.2f} s. mem usage={u:.2f} GB. avail mem={a:.2f} GB."
        )


def capacity(log: Log) -> None:
    extra = f", available_gpu_mem={mem(log):.2f} GB" if log.style not in ("0.4.3", "0.4.6") else ""
    ranks = None if log.style in ("0.4.3", "0.4.6") else [0]
    log.sched(
        f"max_total_num_tokens={log.rng.randint(20000, 900000)}, chunked_prefill_size=8192, "
        f"max_prefill_tokens=16384, max_running_requests=48, context_len=131072{extra}",
        ranks,
    )


def uvicorn(log: Log) -> None:
    pid = log.rng.randint(1000, 99999)
    log.tick(0.5, 3)
    log.main(f"INFO:     Started server process [{pid}]")
    log.main("INFO:     Waiting for application startup.")
    log.main("INFO:     Application startup complete.")
    log.main(
        f"INFO:     Uvicorn running on http://127.0.0.1:{log.cfg['port']} (Press CTRL+C to quit)"
    )


def warmup_ready(log: Log) -> None:
    log.tick()
    path = "/model_info" if log.style in ("0.5.9", "0.5.23") else "/get_model_info"
    log.main(f'INFO:     127.0.0.1:{log.rng.randint(30000, 60000)} - "GET {path} HTTP/1.1" 200 OK')
    log.sched(
        "Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0",
        [0],
    )
    log.main(
        f'INFO:     127.0.0.1:{log.rng.randint(30000, 60000)} - "POST /generate HTTP/1.1" 200 OK'
    )
    log.main("The server is fired up and ready to roll!")


STEPS_OLD = [
    "args",
    "dist",
    "load_t",
    "kv_t",
    "cap_t",
    "load_d",
    "kv_d",
    "cap_d",
    "cap_e",
    "capacity",
    "uvicorn",
    "ready",
]
STEPS_NEW = [
    "args",
    "dist",
    "load_t",
    "load_d",
    "kv_t",
    "kv_d",
    "cap_t",
    "cap_d",
    "cap_e",
    "capacity",
    "uvicorn",
    "ready",
]


def startup(log: Log, until: str | None = None, partial: bool = False) -> None:
    """Run the startup steps up to (not including) `until`; `partial`: begin `until` too."""
    order = STEPS_NEW if log.style == "0.5.23" else STEPS_OLD
    spec = log.cfg["spec"]
    for step in order:
        if step == until and not partial:
            return
        p = step == until
        if step in ("load_d", "kv_d", "cap_d", "cap_e") and not spec:
            if p:
                return
            continue
        if step == "cap_d" and log.cfg["steps"] == 1 and log.style in ("0.5.9", "0.5.23") and not p:
            continue
        if step == "args":
            server_args(log)
        elif step == "dist":
            log.tick()
            log.sched("Init torch distributed begin.")
            if p:
                return
            log.tick(0.5, 8)
            if log.cfg["tp"] > 1 and log.style != "0.4.3":
                log.sched("sglang is using nccl==2.21.5", [0])
            if log.style in ("0.5.9", "0.5.23"):
                log.sched(
                    f"Init torch distributed ends. elapsed={log.rng.uniform(0.3, 9):.2f} s, mem usage={log.rng.uniform(0.1, 1.2):.2f} GB"
                )
            elif log.style != "0.4.3":
                log.sched(
                    f"Init torch distributed ends. mem usage={log.rng.uniform(0.1, 1.2):.2f} GB"
                )
        elif step in ("load_t", "load_d"):
            load(log, step == "load_d", end=not p, shards=log.rng.uniform(0.1, 0.9))
        elif step in ("kv_t", "kv_d"):
            if p:
                return
            kv(log, step == "kv_d")
        elif step in ("cap_t", "cap_d", "cap_e"):
            which = {"cap_t": "target", "cap_d": "draft", "cap_e": "extend"}[step]
            if log.style == "0.4.3" and which == "extend":
                if p:
                    return
                continue
            capture(log, which, end=not p, frac=log.rng.uniform(0.1, 0.9))
        elif step == "capacity":
            if p:
                return
            capacity(log)
        elif step == "uvicorn":
            uvicorn(log)
        elif step == "ready":
            warmup_ready(log)
        if p:
            return


def serve(log: Log, n: int | None = None) -> None:
    c = log.cfg
    n = n if n is not None else log.rng.randint(3, 25)
    it = 0
    for _ in range(n):
        log.tick(0.5, 10)
        r = log.rng.random()
        if r < 0.25:
            log.sched(
                f"Prefill batch. #new-seq: 1, #new-token: {log.rng.randint(5, 4000)}, #cached-token: "
                f"{log.rng.randint(0, 500)}, token usage: 0.0{log.rng.randint(0, 9)}, #running-req: 0, #queue-req: 0",
                [0],
            )
        elif r < 0.35:
            log.main(
                f'INFO:     127.0.0.1:{log.rng.randint(30000, 60000)} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
            )
        else:
            it += 40
            acc = f", accept len: {log.rng.uniform(1.2, 4.5):.2f}" if c["spec"] else ""
            if log.style in ("0.5.9", "0.5.23") and c["spec"]:
                acc += f", accept rate: {log.rng.uniform(0.2, 0.9):.2f}"
            log.sched(
                f"Decode batch{' [' + str(it) + ']' if log.style == '0.5.23' else ''}. #running-req: "
                f"{log.rng.randint(1, 8)}, #token: {log.rng.randint(100, 90000)}, token usage: "
                f"0.{log.rng.randint(1, 40):02d}{acc}, cuda graph: True, gen throughput (token/s): "
                f"{log.rng.uniform(20, 300):.2f}, #queue-req: 0",
                [0],
            )


# --------------------------------------------------------------------------------------
# Tracebacks
# --------------------------------------------------------------------------------------
def frames(log: Log, chain: list[tuple[str, str, str]]) -> str:
    site = log.cfg["site"]
    out = ["Traceback (most recent call last):"]
    for f, fn, src in chain:
        full = f if f.startswith("/") else f"{site}/{f}"
        out.append(f'  File "{full}", line {log.rng.randint(40, 3000)}, in {fn}')
        out.append(f"    {src}")
    return "\n".join(out)


SCHED = "sglang/srt/managers/scheduler.py"
MR = "sglang/srt/model_executor/model_runner.py"
TPW = "sglang/srt/managers/tp_worker.py"
INIT = [
    (
        SCHED,
        "run_scheduler_process",
        "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)",
    ),
    (SCHED, "__init__", "self.tp_worker = TpWorkerClass("),
    (TPW, "__init__", "self.model_runner = ModelRunner("),
    (MR, "__init__", "self.initialize(min_per_gpu_memory)"),
]
DRAFT_INIT = [
    (
        SCHED,
        "run_scheduler_process",
        "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)",
    ),
    (SCHED, "__init__", "self.draft_worker = EAGLEWorker("),
    ("sglang/srt/speculative/eagle_worker.py", "__init__", "super().__init__("),
    (TPW, "__init__", "self.model_runner = ModelRunner("),
    (MR, "__init__", "self.initialize(min_per_gpu_memory)"),
]
LOADF = [
    (MR, "initialize", "self.load_model()"),
    (MR, "load_model", "self.model = get_model("),
    ("sglang/srt/model_loader/__init__.py", "get_model", "return loader.load_model("),
    (
        "sglang/srt/model_loader/loader.py",
        "load_model",
        "model.load_weights(self._get_all_weights(model_config, model))",
    ),
    ("sglang/srt/models/llama.py", "load_weights", "weight_loader(param, loaded_weight)"),
    ("sglang/srt/layers/linear.py", "weight_loader", "param_data.copy_(loaded_weight)"),
]
KVF = [
    (MR, "initialize", "self.init_memory_pool("),
    (MR, "init_memory_pool", "raise RuntimeError("),
]
DISTF = [
    (MR, "initialize", "self.init_torch_distributed()"),
    (MR, "init_torch_distributed", "initialize_model_parallel("),
    (
        "sglang/srt/distributed/parallel_state.py",
        "initialize_model_parallel",
        "_TP = init_model_parallel_group(",
    ),
    (
        "sglang/srt/distributed/device_communicators/pynccl.py",
        "__init__",
        "self.comm = self.nccl.ncclCommInitRank(",
    ),
    (
        "sglang/srt/distributed/device_communicators/pynccl_wrapper.py",
        "NCCL_CHECK",
        'raise RuntimeError(f"NCCL error: {error_str}")',
    ),
]
CAPF = [
    (MR, "initialize", "self.init_cuda_graphs()"),
    (MR, "init_cuda_graphs", "self.cuda_graph_runner = CudaGraphRunner(self)"),
    ("sglang/srt/model_executor/cuda_graph_runner.py", "__init__", "self.capture()"),
    (
        "sglang/srt/model_executor/cuda_graph_runner.py",
        "capture",
        ") = self.capture_one_batch_size(bs, forward)",
    ),
    ("sglang/srt/model_executor/cuda_graph_runner.py", "capture_one_batch_size", "run_once()"),
    (
        "sglang/srt/model_executor/cuda_graph_runner.py",
        "run_once",
        "logits_output = forward(input_ids, forward_batch.positions, forward_batch)",
    ),
]
RUNF = [
    (SCHED, "run_scheduler_process", "scheduler.event_loop_overlap()"),
    ("torch/utils/_contextlib.py", "decorate_context", "return func(*args, **kwargs)"),
    (SCHED, "event_loop_normal", "result = self.run_batch(batch)"),
    (SCHED, "run_batch", ") = self.draft_worker.forward_batch_generation(batch)"),
    (
        "sglang/srt/speculative/eagle_worker.py",
        "forward_batch_generation",
        "logits_output, verify_output, model_worker_batch, can_run_cuda_graph = self.verify(",
    ),
    ("sglang/srt/speculative/eagle_worker.py", "verify", "res = spec_info.verify("),
    ("sglang/srt/speculative/eagle_utils.py", "verify", "accept_index_cpu = accept_index.tolist()"),
]
RUNF2 = [
    (SCHED, "run_scheduler_process", "scheduler.event_loop_normal()"),
    (SCHED, "event_loop_normal", "self.process_batch_result(batch, result)"),
    (SCHED, "process_batch_result", "self.process_batch_result_decode(batch, result)"),
    (
        "sglang/srt/managers/scheduler_output_processor_mixin.py",
        "process_batch_result_decode",
        "next_token_ids = next_token_ids.tolist()",
    ),
]
ARGF = [
    ("sglang/launch_server.py", "<module>", "server_args = prepare_server_args(sys.argv[1:])"),
    (
        "sglang/srt/server_args.py",
        "prepare_server_args",
        "server_args = ServerArgs.from_cli_args(raw_args)",
    ),
    (
        "sglang/srt/server_args.py",
        "from_cli_args",
        "return cls(**{attr: getattr(args, attr) for attr in attrs})",
    ),
    ("<string>", "__init__", ""),
    ("sglang/srt/server_args.py", "__post_init__", "self._handle_speculative_decoding()"),
    ("sglang/srt/server_args.py", "_handle_speculative_decoding", "raise ValueError("),
]
TOKF = [
    ("sglang/launch_server.py", "<module>", "launch_server(server_args)"),
    (
        "sglang/srt/entrypoints/http_server.py",
        "launch_server",
        "tokenizer_manager, template_manager, scheduler_info = _launch_subprocesses(",
    ),
    (
        "sglang/srt/entrypoints/engine.py",
        "_launch_subprocesses",
        "tokenizer_manager = TokenizerManager(server_args, port_args)",
    ),
    (
        "sglang/srt/managers/tokenizer_manager.py",
        "__init__",
        "self.model_config = ModelConfig.from_server_args(server_args)",
    ),
    ("sglang/srt/configs/model_config.py", "__init__", "self.hf_config = get_config("),
    ("sglang/srt/hf_transformers_utils.py", "get_config", "config = AutoConfig.from_pretrained("),
]


def child_tb(
    log: Log, chain, exc: str, ranks: list[int] | None = None, component: str = "Scheduler"
) -> None:
    """`Scheduler hit an exception:` + traceback, per rank, then the sigquit chain."""
    style = log.style
    for r in ranks if ranks is not None else [0]:
        body = frames(log, chain) + "\n" + exc
        if style == "0.4.3" and log.rng.random() < 0.3:
            log.sched(body.split("\n", 1)[0], [r])
            log.raw(body.split("\n", 1)[1])
        else:
            head, rest = body.split("\n", 1)
            log.sched(f"{component} hit an exception: {head}", [r])
            log.raw(rest + "\n")
    log.tick(0, 1)
    word = "proces" if style == "0.4.3" else "process"
    log.main(f"Received sigquit from a child {word}. It usually means the child failed.")


CAPTURE_HINT = {
    "0.4.3": "Possible solutions:\n1. disable cuda graph by --disable-cuda-graph\n2. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n3. disable torch compile by not using --enable-torch-compile\n4. set --cuda-graph-max-bs to a smaller value (e.g., 32)\nOpen an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ",
    "0.4.6": "Possible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n3. disable torch compile by not using --enable-torch-compile\n4. disable cuda graph by --disable-cuda-graph. (Not recommonded. Huge perf loss)\nOpen an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ",
    "other": "Possible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n3. disable torch compile by not using --enable-torch-compile\n4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\nOpen an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ",
    "0.5.23": "Possible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge performance loss)\nOpen an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ",
}
CUDA_TAIL = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
)


def oom_text(rng: random.Random) -> str:
    a = rng.choice([1.0, 2.5, 7.81, 300.0, 0.5, 12.0])
    name = rng.choice(["torch.OutOfMemoryError", "torch.cuda.OutOfMemoryError"])
    return (
        f"{name}: CUDA out of memory. Tried to allocate {a:.2f} GiB. GPU {rng.randint(0, 7)} has a total "
        f"capacity of 139.80 GiB of which {rng.uniform(0.01, 3):.2f} GiB is free. Including non-PyTorch memory, "
        f"this process has {rng.uniform(60, 139):.2f} GiB memory in use."
    )


def exc_cuda(rng: random.Random, kind: str) -> str:
    cls = rng.choice(["torch.AcceleratorError", "RuntimeError"])
    if kind == "illegal":
        return f"{cls}: CUDA error: an illegal memory access was encountered\n" + CUDA_TAIL
    if kind == "assert":
        return f"{cls}: CUDA error: device-side assert triggered\n" + CUDA_TAIL
    if kind == "capture":
        return (
            f"{cls}: CUDA error: operation failed due to a previous error during capture\n"
            "Search for `cudaErrorStreamCaptureInvalidated' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\n"
            + CUDA_TAIL
        )
    return oom_text(rng)


# --------------------------------------------------------------------------------------
# Scenarios: name -> (phase, hung, signature, builder)
# --------------------------------------------------------------------------------------
def sc_ok(log: Log) -> None:
    startup(log)
    serve(log)
    r = log.rng.random()
    if r < 0.3:
        log.raw("/tmp/triton/kernel.py:41:12: error: operation scheduled before its operands")
        serve(log, 3)
    elif r < 0.5:
        log.main(
            "Received output for rid='a1b2c3d4e5' but the state was deleted in TokenizerManager."
        )
        serve(log, 3)
    elif r < 0.65:
        log.raw("'--disable-cuda-graph' is deprecated and will be removed in a future release.")
    if log.rng.random() < 0.4:
        log.tick()
        log.main("SIGTERM received. signum=15 frame=None. Draining requests and shutting down...")
        log.main(
            "Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[]."
        )


def sc_ok_http_error(log: Log) -> None:
    startup(log)
    serve(log, 4)
    log.main(
        "[http_server] Error: The input (140000 tokens) is longer than the model's context length (131072 tokens)."
    )
    serve(log, 5)


def sc_arg_error(log: Log) -> None:
    prog = "sglang serve" if log.style in ("0.5.23",) else "launch_server.py"
    flag = log.rng.choice(
        [
            f"argument --speculative-algorithm: invalid choice: 'EAGLE{log.rng.randint(4, 9)}' (choose from 'EAGLE', 'EAGLE3', 'NEXTN', 'STANDALONE')",
            f"unrecognized arguments: --speculative-num-step {log.rng.randint(1, 6)}",
            "argument --tp-size/--tp: invalid int value: 'auto'",
            "the following arguments are required: --model-path",
            "argument --mem-fraction-static: expected one argument",
        ]
    )
    log.raw(
        f"usage: {prog} [-h] --model-path MODEL_PATH [--tokenizer-path TOKENIZER_PATH]\n"
        f"{' ' * (8 + len(prog))}[--host HOST] [--port PORT] [--tp-size TP_SIZE]\n{prog}: error: {flag}"
    )


def sc_invalid_args(log: Log) -> None:
    if log.rng.random() < 0.4:
        log.raw(
            "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
        )
    msg = log.rng.choice(
        [
            "ValueError: speculative_eagle_topk > 1 with page_size > 1 is unstable and produces incorrect results for paged attention backends. This combination is only supported for the 'flashinfer' backend.",
            f"ValueError: Unknown speculative algorithm name: EAGLE{log.rng.randint(4, 9)}",
            "ValueError: trtllm_mha backend only supports topk = 1 for speculative decoding.",
            "ValueError: Currently standalone speculative decoding does not support dp attention.",
        ]
    )
    log.raw(frames(log, ARGF) + "\n" + msg)


def sc_import(log: Log) -> None:
    mod = log.rng.choice(
        ["sgl_kernel", "flashinfer", "vllm", "triton", "sglang.srt.layers.moe.ep_moe"]
    )
    chain = [
        (
            "sglang/launch_server.py",
            "<module>",
            "from sglang.srt.entrypoints.http_server import launch_server",
        ),
        (
            "sglang/srt/entrypoints/http_server.py",
            "<module>",
            "from sglang.srt.entrypoints.engine import _launch_subprocesses",
        ),
        ("sglang/srt/layers/activation.py", "<module>", f"from {mod} import silu_and_mul"),
    ]
    if log.rng.random() < 0.5:
        chain.insert(
            0,
            (
                "/usr/lib/python3.10/runpy.py",
                "_run_module_as_main",
                "return _run_code(code, main_globals, None,",
            ),
        )
    exc = log.rng.choice(
        [
            f"ModuleNotFoundError: No module named '{mod}'",
            f"ImportError: cannot import name 'silu_and_mul' from '{mod}' (unknown location)",
        ]
    )
    log.raw(frames(log, chain) + "\n" + exc)


def sc_undef(log: Log) -> None:
    chain = [
        (
            "sglang/launch_server.py",
            "<module>",
            "from sglang.srt.entrypoints.http_server import launch_server",
        ),
        (
            "sglang/srt/layers/quantization/fp8_kernel.py",
            "<module>",
            "from sgl_kernel import sgl_per_token_group_quant_fp8",
        ),
        ("sgl_kernel/__init__.py", "<module>", "from sgl_kernel import common_ops"),
    ]
    sym = log.rng.choice(
        [
            "_ZN3c104cuda9SetDeviceEi",
            "_ZNK3c1010TensorImpl4sizeEl",
            "cudaGetDriverEntryPointByVersion",
        ]
    )
    log.raw(
        frames(log, chain)
        + f"\nImportError: {log.cfg['site']}/sgl_kernel/common_ops.abi3.so: undefined symbol: {sym}"
    )


def sc_model_path(log: Log) -> None:
    server_args(log)
    bad = log.rng.choice(
        [
            "/data/models/Llama-3-70B-Instrct",
            "/data/eagle3/output_10k_sglang/44",
            "meta-llama/Llama-3.1-8B-Instrukt",
        ]
    )
    exc = log.rng.choice(
        [
            f"OSError: {bad} is not a local folder and is not a valid model identifier listed on 'https://huggingface.co/models'",
            f"huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '{bad}'. Use `repo_type` argument if needed.",
            f"OSError: Can't load the configuration of '{bad}'. If you were trying to load it from 'https://huggingface.co/models', make sure you don't have a local directory with the same name.",
        ]
    )
    log.raw(frames(log, TOKF) + "\n" + exc)


def sc_missing_binary(log: Log) -> None:
    log.raw(
        log.rng.choice(
            [
                "nohup: failed to run command 'python3.11': No such file or directory",
                "bash: line 1: python3.12: command not found",
                "/opt/venv/bin/python3: can't open file '/root/sglang/launch_server.py': [Errno 2] No such file or directory",
            ]
        )
    )


def sc_kv_oom(log: Log) -> None:
    startup(log, "kv_d" if log.rng.random() < 0.3 and log.cfg["spec"] else "kv_t")
    msg = {
        "0.4.3": "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        "0.4.6": "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        "0.5.2": "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        "0.5.9": f"RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: self.server_args.mem_fraction_static={log.cfg['mem']}",
        "0.5.23": f"RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static={log.cfg['mem']}",
    }[log.style]
    child_tb(log, INIT + KVF, msg, ranks=list(range(min(log.cfg["tp"], 2))))
    if log.style in ("0.5.9",) and log.rng.random() < 0.5:
        log.main("Rank 0 scheduler is dead. Please check if there are relevant logs.")
        log.main("Exit code: -9" if log.rng.random() < 0.2 else "Exit code: 1")


def sc_weight_oom(log: Log) -> None:
    draft = log.cfg["spec"] and log.rng.random() < 0.4
    if draft:
        startup(log, "load_d", partial=True)
        chain = DRAFT_INIT + LOADF
    else:
        startup(log, "load_t", partial=True)
        chain = INIT + LOADF
    child_tb(log, chain, oom_text(log.rng), ranks=[0])


def sc_load_nccl(log: Log) -> None:
    log.cfg["tp"] = max(2, log.cfg["tp"])
    startup(log, "dist", partial=True)
    err = log.rng.choice(
        [
            "unhandled system error (run with NCCL_DEBUG=INFO for details)",
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
            "internal error - please report this issue to the NCCL developers",
        ]
    )
    child_tb(log, INIT + DISTF, f"RuntimeError: NCCL error: {err}", ranks=[log.rng.randint(0, 1)])


def sc_sched_killed_load(log: Log) -> None:
    startup(log, "load_t", partial=True)
    log.tick(20, 200)
    if log.style in ("0.5.23",):
        log.raw(
            frames(
                log,
                [
                    ("sglang/launch_server.py", "<module>", "launch_server(server_args)"),
                    (
                        "sglang/srt/entrypoints/engine.py",
                        "_wait_for_scheduler_ready",
                        "raise RuntimeError(",
                    ),
                ],
            )
            + f"\nRuntimeError: Rank {log.rng.randint(0, 7)} scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check."
        )
    else:
        log.main(
            f"Rank {log.rng.randint(0, 3)} scheduler is dead. Please check if there are relevant logs."
        )
        log.main("Exit code: -9")


def sc_load_unknown(log: Log) -> None:
    draft = log.cfg["spec"] and log.rng.random() < 0.5
    startup(log, "load_d" if draft else "load_t", partial=True)
    exc = log.rng.choice(
        [
            "safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer",
            f"KeyError: 'model.layers.{log.rng.randint(0, 80)}.self_attn.qkv_proj.weight'",
            f"AssertionError: Attempted to load weight (torch.Size([{log.rng.randint(100, 9000)}, 4096])) into parameter (torch.Size([{log.rng.randint(100, 9000)}, 4096]))",
        ]
    )
    child_tb(log, (DRAFT_INIT if draft else INIT) + LOADF, exc, ranks=[0])


def sc_load_hang(log: Log) -> None:
    startup(log, log.rng.choice(["load_t", "dist"]), partial=True)


def sc_capture_failed(log: Log, cause: str) -> None:
    which = log.rng.choice(["cap_t", "cap_d"]) if log.cfg["spec"] else "cap_t"
    startup(log, which, partial=True)
    inner = exc_cuda(log.rng, cause)
    first = inner.split("\n", 1)[0].split(": ", 1)[1]
    rest = inner.split("\n", 1)[1] if "\n" in inner else ""
    hint = CAPTURE_HINT.get(log.style, CAPTURE_HINT["other"])
    word = "CUDA" if log.style == "0.5.23" else "cuda"
    exc = (
        f"Exception: Capture {word} graph failed: {first}\n" + (rest + "\n" if rest else "") + hint
    )
    chain = INIT + CAPF
    if which == "cap_d":
        chain = DRAFT_INIT[:3] + [
            (
                "sglang/srt/speculative/eagle_worker.py",
                "init_cuda_graphs",
                "self.cuda_graph_runner = EAGLEDraftCudaGraphRunner(self)",
            ),
            (
                "sglang/srt/speculative/eagle_draft_cuda_graph_runner.py",
                "__init__",
                "raise Exception(",
            ),
        ]
    child_tb(log, chain, exc, ranks=list(range(min(log.cfg["tp"], log.rng.choice([1, 2])))))


def sc_capture_oom_raw(log: Log) -> None:
    """A capture OOM without SGLang's wrapper (fork / torch.compile path)."""
    startup(log, "cap_t", partial=True)
    child_tb(
        log,
        INIT
        + CAPF
        + [("torch/nn/modules/module.py", "_call_impl", "return forward_call(*args, **kwargs)")],
        oom_text(log.rng),
        ranks=[0],
    )


def sc_capture_hang(log: Log) -> None:
    startup(log, log.rng.choice(["cap_t", "cap_d", "cap_e"]), partial=True)


def sc_warmup(log: Log) -> None:
    startup(log, "ready")
    chain = [
        ("sglang/srt/entrypoints/http_server.py", "_wait_and_warmup", "res = requests.post("),
        ("requests/api.py", "post", 'return request("post", url, data=data, json=json, **kwargs)'),
        ("requests/adapters.py", "send", "raise ReadTimeout(e, request=request)"),
    ]
    body = (
        frames(log, chain)
        + "\nrequests.exceptions.ReadTimeout: HTTPConnectionPool(host='127.0.0.1', "
        + f"port={log.cfg['port']}): Read timed out. (read timeout=600)"
    )
    log.tick(30, 600)
    log.main("Initialization failed. warmup error: " + body.split("\n", 1)[0])
    log.raw(body.split("\n", 1)[1])


def sc_warmup_crash(log: Log) -> None:
    """The warm-up request crashes the scheduler before ready: capture (warmup) phase."""
    startup(log, "ready")
    child_tb(log, RUNF, exc_cuda(log.rng, log.rng.choice(["illegal", "assert"])), ranks=[0])


def sc_runtime_cuda(log: Log, kind: str) -> None:
    startup(log)
    serve(log)
    ranks = list(range(min(log.cfg["tp"], log.rng.choice([1, 2, 4]))))
    child_tb(log, log.rng.choice([RUNF, RUNF2]), exc_cuda(log.rng, kind), ranks=ranks)


def sc_runtime_unknown(log: Log) -> None:
    startup(log)
    serve(log)
    exc = log.rng.choice(
        [
            f"IndexError: index {log.rng.randint(1, 300)} is out of bounds for dimension 0 with size {log.rng.randint(1, 64)}",
            "AssertionError: accept_length must be positive",
            f"KeyError: 'req-{log.rng.randint(1000, 9999)}'",
        ]
    )
    child_tb(log, log.rng.choice([RUNF, RUNF2]), exc, ranks=[0])


def sc_watchdog(log: Log) -> None:
    startup(log)
    serve(log)
    log.tick(300, 320)
    if log.style in ("0.5.9", "0.5.23"):
        log.sched("Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", [0])
    else:
        log.sched("Watchdog timeout (self.watchdog_timeout=300)", [0])
    log.raw("\n")
    log.tick(5, 6)
    log.main("Received sigquit from a child process. It usually means the child failed.")


def sc_nccl_timeout(log: Log) -> None:
    log.cfg["tp"] = max(2, log.cfg["tp"])
    startup(log)
    serve(log)
    log.tick(600, 1800)
    seq = log.rng.randint(1000, 900000)
    log.raw(
        f"[rank{log.rng.randint(0, 7)}]:[E{log.rng.randint(100, 999)} 10:12:04.{log.rng.randint(100000, 999999)} "
        f"ProcessGroupNCCL.cpp:632] [Rank {log.rng.randint(0, 7)}] Watchdog caught collective operation timeout: "
        f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={log.rng.randint(1000, 99999)}, Timeout(ms)=600000) "
        f"ran for {600000 + log.rng.randint(1, 999)} milliseconds before timing out."
    )
    if log.style in ("0.5.23",):
        log.main(
            f"Subprocess scheduler_{log.rng.randint(0, 7)} (pid={log.rng.randint(1000, 99999)}) crashed with exit code -6. Triggering SIGQUIT for cleanup..."
        )


def sc_detok(log: Log) -> None:
    startup(log)
    serve(log)
    log.tick(20, 60)
    t = f"{log.rng.randint(0, 23):02d}:{log.rng.randint(0, 59):02d}:{log.rng.randint(0, 59):02d}"
    for _ in range(log.rng.randint(1, 3)):
        log.main(
            f"Health check failed. Server couldn't get a response from detokenizer for last 20 seconds. tic start time: {t}. last_heartbeat time: {t}"
        )
        log.tick(10, 20)


def sc_runtime_killed(log: Log) -> None:
    startup(log)
    serve(log)
    log.main(
        f"Subprocess scheduler_{log.rng.randint(0, 7)} (pid={log.rng.randint(1000, 99999)}) crashed with exit code -9. Triggering SIGQUIT for cleanup..."
    )
    log.main(
        f"SIGQUIT received. signum=3, frame=<frame at 0x7f{log.rng.randint(10**9, 10**10):x}>. It usually means one child failed."
    )


def sc_port(log: Log) -> None:
    startup(log, "ready")
    log.main(
        f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {log.cfg['port']}): address already in use"
    )
    log.main("INFO:     Waiting for application shutdown.")
    log.main("INFO:     Application shutdown complete.")


def sc_port_wait(log: Log) -> None:
    server_args(log)
    p = log.rng.randint(20000, 40000)
    for i in range(log.rng.randint(1, 4)):
        log.main(
            f"port {p} is in use. Waiting for {i + 1} seconds for nccl_port to be available. nccl_port is used by a process already. process.name()='python3' process.cmdline()=['python3', '-m', 'sglang.launch_server'] process.status()='sleeping' process.pid={log.rng.randint(1000, 99999)}"
        )
        log.tick(1, 1)
    log.raw(
        frames(
            log,
            [
                ("sglang/launch_server.py", "<module>", "launch_server(server_args)"),
                ("sglang/srt/utils/network.py", "wait_port_available", "raise ValueError("),
            ],
        )
        + f"\nValueError: nccl_port at {p} is not available in 30 seconds. See the above logs for details."
    )


def sc_dist_port(log: Log) -> None:
    log.cfg["tp"] = max(2, log.cfg["tp"])
    startup(log, "dist", partial=True)
    p = log.rng.choice([29500, 5000, log.rng.randint(20000, 60000)])
    child_tb(
        log,
        INIT
        + DISTF[:2]
        + [("torch/distributed/rendezvous.py", "_create_c10d_store", "return TCPStore(")],
        f"torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: {p}, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
        ranks=[0],
    )


def sc_orphan(log: Log) -> None:
    log.cfg["tp"] = max(2, log.cfg["tp"])
    if log.rng.random() < 0.6:
        startup(log, "load_t")
        gb = log.rng.uniform(10, 70)
        child_tb(
            log,
            INIT
            + [
                (MR, "initialize", "min_per_gpu_memory = self.init_torch_distributed()"),
                (MR, "init_torch_distributed", "raise ValueError("),
            ],
            f"ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes. min_per_gpu_memory={gb:.3f}, local_gpu_memory={gb + 60:.3f}, local_gpu_memory * 0.9={(gb + 60) * 0.9:.3f}",
            ranks=[log.rng.randint(0, 1)],
        )
    else:
        startup(log, "dist", partial=True)
        child_tb(
            log,
            INIT
            + DISTF[:2]
            + [("torch/cuda/__init__.py", "set_device", "torch._C._cuda_setDevice(device)")],
            "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable\n"
            + CUDA_TAIL,
            ranks=[0],
        )


SCENARIOS = {
    "ok_serve": ("ok", False, "", sc_ok),
    "ok_http_error": ("ok", False, "", sc_ok_http_error),
    "arg_error": ("pre-exec", False, "arg_error", sc_arg_error),
    "invalid_args": ("pre-exec", False, "invalid_server_args", sc_invalid_args),
    "import_error": ("pre-exec", False, "import_error", sc_import),
    "undefined_symbol": ("pre-exec", False, "undefined_symbol", sc_undef),
    "model_path": ("pre-exec", False, "model_path_not_found", sc_model_path),
    "missing_binary": ("pre-exec", False, "missing_binary", sc_missing_binary),
    "kv_oom": ("load", False, "kv_pool_oom", sc_kv_oom),
    "weight_oom": ("load", False, "weight_load_oom", sc_weight_oom),
    "load_nccl": ("load", False, "nccl_error", sc_load_nccl),
    "sched_killed_load": ("load", False, "scheduler_died", sc_sched_killed_load),
    "load_unknown": ("load", False, "unknown", sc_load_unknown),
    "load_hang": ("load", True, "stalled_load", sc_load_hang),
    "capture_oom": ("capture", False, "capture_failed", lambda g: sc_capture_failed(g, "oom")),
    "capture_invalidated": (
        "capture",
        False,
        "capture_failed",
        lambda g: sc_capture_failed(g, "capture"),
    ),
    "capture_illegal": (
        "capture",
        False,
        "capture_failed",
        lambda g: sc_capture_failed(g, "illegal"),
    ),
    "capture_oom_raw": ("capture", False, "capture_failed", sc_capture_oom_raw),
    "capture_hang": ("capture", True, "stalled_capture", sc_capture_hang),
    "warmup_failed": ("capture", False, "warmup_failed", sc_warmup),
    "warmup_crash": ("capture", False, "illegal_memory_access|device_side_assert", sc_warmup_crash),
    "runtime_illegal": (
        "runtime",
        False,
        "illegal_memory_access",
        lambda g: sc_runtime_cuda(g, "illegal"),
    ),
    "runtime_assert": (
        "runtime",
        False,
        "device_side_assert",
        lambda g: sc_runtime_cuda(g, "assert"),
    ),
    "runtime_oom": ("runtime", False, "cuda_oom", lambda g: sc_runtime_cuda(g, "oom")),
    "runtime_unknown": ("runtime", False, "unknown", sc_runtime_unknown),
    "watchdog": ("runtime", True, "watchdog_timeout", sc_watchdog),
    "nccl_timeout": ("runtime", True, "nccl_timeout", sc_nccl_timeout),
    "detokenizer": ("runtime", True, "detokenizer_heartbeat", sc_detok),
    "runtime_killed": ("runtime", False, "scheduler_died", sc_runtime_killed),
    "port_in_use": ("cleanup", False, "port_in_use", sc_port),
    "port_wait": ("cleanup", False, "port_in_use", sc_port_wait),
    "dist_port": ("cleanup", False, "port_in_use", sc_dist_port),
    "orphan_gpu": ("cleanup", False, "orphan_gpu_process", sc_orphan),
}


# --------------------------------------------------------------------------------------
# Messy variants
# --------------------------------------------------------------------------------------
def cause_index(lines: list[str]) -> int:
    """Index of the first line that carries the failure (so a fragment keeps it)."""
    keys = (
        "hit an exception",
        "Traceback (most recent",
        "usage: ",
        "error:",
        "ERROR:",
        "Watchdog",
        "watchdog timeout",
        "Health check failed",
        "scheduler is dead",
        "crashed with exit code",
        "is in use",
        "Initialization failed",
        "No such file",
        "command not found",
        "died during",
    )
    for i, ln in enumerate(lines):
        if any(k in ln for k in keys) and "triton" not in ln and "[http_server]" not in ln:
            return i
    return len(lines)


def messify(rng: random.Random, lines: list[str], mode: str, phase: str) -> list[str]:
    ci = cause_index(lines)
    if mode == "fragment":
        start = max(0, min(ci - rng.randint(0, 6), len(lines) - rng.randint(12, 40)))
        if phase == "ok" or ci >= len(lines):
            start = max(0, len(lines) - rng.randint(8, 30))
        if phase in ("load", "capture") and ci >= len(lines):
            start = max(0, len(lines) - rng.randint(3, 8))  # a hang: the last lines only
        return lines[start:]
    if mode == "traceback_only" and ci < len(lines):
        return lines[ci:]
    if mode == "interleave":
        # another rank's lines land in the middle of the traceback
        tb = [i for i, ln in enumerate(lines) if ln.startswith("  File ")]
        if tb:
            i = rng.choice(tb)
            other = [ln for ln in lines[:ci] if " TP1]" in ln or " TP2]" in ln][-2:]
            if not other:
                other = [ln.replace(" TP0]", " TP1]") for ln in lines[:ci] if " TP0]" in ln][-2:]
            return lines[:i] + other + lines[i:]
        return lines
    if mode == "cut":
        out = list(lines)
        cands = [i for i, ln in enumerate(out[:ci]) if len(ln) > 40]
        for i in rng.sample(cands, min(2, len(cands))):
            out[i] = out[i][: rng.randint(20, len(out[i]) - 5)]
        if rng.random() < 0.5 and out:
            out[-1] = out[-1][: max(10, len(out[-1]) * 2 // 3)]  # the log was copied mid-write
            if phase == "ok":
                out[-1] = lines[-1]
        return out
    if mode == "ansi":
        return [
            f"\x1b[1;31m{ln}\x1b[0m" if ("rror" in ln or "exception" in ln) else ln for ln in lines
        ]
    if mode == "container":
        name = rng.choice(["sglang-1", "sglang_server", "svc-1", "k8s-sglang-0"])
        pad = " " * rng.randint(1, 3)
        return [f"{name}{pad}| {ln}" for ln in lines]
    return lines


def transport(rng: random.Random, lines: list[str], mode: str) -> list[str]:
    """What a log collector or a copy does to every line: kubectl/journald/torchrun prefixes,
    hard wraps at the screen width, a traceback pasted from the middle of its frames."""
    if mode == "kubectl":
        ns = rng.randrange(10**9)
        return [
            f"2026-03-02T08:{i // 60 % 60:02d}:{i % 60:02d}.{ns:09d}Z {ln}"
            for i, ln in enumerate(lines)
        ]
    if mode == "journald":
        host = rng.choice(["gpu-node-3", "h200-01", "dgx7"])
        return [f"Mar 02 08:00:00 {host} python3[{rng.randint(1000, 99999)}]: {ln}" for ln in lines]
    if mode == "torchrun":
        return [f"[default{rng.randint(0, 7)}]:{ln}" for ln in lines]
    if mode == "wrap":
        width = rng.choice([80, 100, 120])
        out = []
        for ln in lines:
            while len(ln) > width:
                out.append(ln[:width])
                ln = ln[width:]
            out.append(ln)
        return out
    if mode == "headless":
        # a traceback pasted without its header: it starts somewhere among the frames
        frames = [i for i, ln in enumerate(lines) if ln.startswith("  File ")]
        if len(frames) >= 3:
            return lines[rng.choice(frames[1:-1]) :]
    return lines


# the transport applied on top of the variant (k > 0 only; None most of the time)
TRANSPORTS = [None, None, None, None, "kubectl", "journald", "torchrun", "wrap", "headless"]


# a crash of the warm-up request looks like a runtime crash unless the log shows it came
# before "ready": these scenarios are never cut to a fragment
NEEDS_CONTEXT = {"warmup_crash", "sched_killed_load"}
# the phase is only in the outer frames (the warm-up request's): never pasted headless
HEADLESS_UNSAFE = NEEDS_CONTEXT | {"warmup_failed"}
PREFIX_MODES = ["sglang", "sglang", "sglang", "pylog", "glog", "bare"]
MESS_MODES = [
    "clean",
    "clean",
    "fragment",
    "traceback_only",
    "interleave",
    "cut",
    "ansi",
    "container",
]


def family_split(family: str) -> str:
    return "test" if zlib.crc32(family.encode()) % 5 == 0 else "train"


def generate(out: Path = OUT) -> list[dict[str, str]]:
    gen = out / "gen"
    gen.mkdir(parents=True, exist_ok=True)
    for old in gen.glob("*.log"):
        old.unlink()
    rows = []
    for name, (phase, hung, sig, fn) in SCENARIOS.items():
        for style in STYLES:
            family = f"{name}/{style}"
            for k in range(PER_FAMILY):
                seed = zlib.crc32(f"{family}#{k}".encode())
                rng = random.Random(seed)
                log = Log(rng, style, new_cfg(rng, style))
                fn(log)
                prefix = PREFIX_MODES[(seed >> 3) % len(PREFIX_MODES)] if k else "sglang"
                mode = MESS_MODES[(seed >> 7) % len(MESS_MODES)] if k else "clean"
                if (
                    mode == "traceback_only"
                    and phase in ("ok",)
                    or (mode == "traceback_only" and hung and "watchdog" not in name)
                ):
                    mode = "fragment"
                if name in NEEDS_CONTEXT and mode in ("fragment", "traceback_only"):
                    mode = "cut"  # without the startup lines its phase cannot be told apart
                lines = messify(rng, log.render(prefix), mode, phase)
                tr = TRANSPORTS[(seed >> 13) % len(TRANSPORTS)] if k else None
                if tr == "headless" and (name in HEADLESS_UNSAFE or mode == "fragment"):
                    tr = None
                if tr:
                    # its own generator: the variants without a transport stay as they were
                    lines = transport(random.Random(seed ^ 0x5EED), lines, tr)
                    mode = f"{mode}+{tr}"
                eol = "\r\n" if rng.random() < 0.08 else "\n"
                fname = f"gen/{name}-{style.replace('.', '')}-{k}.log"
                text = eol.join(lines) + eol
                (out / fname).write_bytes(text.encode("utf-8"))
                if sig == "unknown":
                    sig_v = "unknown"
                else:
                    sig_v = sig
                rows.append(
                    {
                        "file": fname,
                        "phase": phase,
                        "hung": str(hung).lower(),
                        "signature": sig_v,
                        "family": family,
                        "split": family_split(family),
                        "style": style,
                        "variant": f"{prefix}+{mode}",
                        "run_index": "0",
                    }
                )
    return rows


def hand_rows() -> list[dict[str, str]]:
    path = OUT / "hand" / "labels.csv"
    if not path.exists():
        return []
    with path.open(newline="") as fh:
        return [
            {
                **r,
                "file": f"hand/{r['file']}",
                "split": "hand",
                "family": f"hand/{r['file']}",
                "run_index": r.get("run_index") or "0",
            }
            for r in csv.DictReader(fh)
        ]


def main(out: Path = OUT) -> None:
    rows = generate(out) + hand_rows()
    cols = [
        "file",
        "phase",
        "hung",
        "signature",
        "family",
        "split",
        "style",
        "variant",
        "run_index",
    ]
    with (out / "labels.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in cols})
    print(f"wrote {len(rows)} examples to {out}")


if __name__ == "__main__":
    main()
