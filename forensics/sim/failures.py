"""Failure texts of the simulator: tracebacks with the frames of each phase, as data.

The final exception lines are SGLang's and PyTorch's real texts (reference §4, and the torch
outputs captured on an H200 in /work/shared/evidence/h200/). The stack frames name the files and
functions on the stack in that phase (model loading, memory pool, CUDA-graph capture, the
scheduler's event loop and the speculative verify) so frame-based classifiers see what they
would see on a real host. Line numbers are stable but made up.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence

from forensics.sim.logstyle import Style

Frame = tuple[str, str, str]  # (file relative to site-packages, function, source line)

SCHED = "sglang/srt/managers/scheduler.py"
TPW = "sglang/srt/managers/tp_worker.py"
MR = "sglang/srt/model_executor/model_runner.py"
LOADER = "sglang/srt/model_loader/loader.py"
CTX = "torch/utils/_contextlib.py"

INIT_FRAMES: dict[str, list[Frame]] = {
    "0.4.6": [
        (
            SCHED,
            "run_scheduler_process",
            "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)",
        ),
        (SCHED, "__init__", "self.tp_worker = TpWorkerClass("),
        (TPW, "__init__", "self.model_runner = ModelRunner("),
        (MR, "__init__", "self.initialize(min_per_gpu_memory)"),
    ],
    "default": [
        (SCHED, "run_scheduler_process", "scheduler = Scheduler("),
        (SCHED, "__init__", "self.init_model_worker()"),
        (SCHED, "init_model_worker", "self.tp_worker = TpModelWorker("),
        (TPW, "__init__", "self.model_runner = ModelRunner("),
        (MR, "__init__", "self.initialize(min_per_gpu_memory)"),
    ],
}

LOAD_FRAMES: list[Frame] = [
    (MR, "initialize", "self.load_model()"),
    (MR, "load_model", "self.model = get_model("),
    ("sglang/srt/model_loader/__init__.py", "get_model", "return loader.load_model("),
    (LOADER, "load_model", "model = _initialize_model("),
    (LOADER, "_initialize_model", "return model_class("),
    ("sglang/srt/models/deepseek_v2.py", "__init__", "self.model = DeepseekV2Model("),
    (
        "sglang/srt/models/deepseek_v2.py",
        "__init__",
        "self.layers, self.start_layer, self.end_layer = make_layers(",
    ),
    (
        "sglang/srt/utils/common.py",
        "make_layers",
        "layer_fn(idx=idx, prefix=add_prefix(idx, prefix))",
    ),
    ("sglang/srt/models/deepseek_v2.py", "__init__", "self.mlp = DeepseekV2MoE("),
    (
        "sglang/srt/layers/moe/fused_moe_triton/layer.py",
        "__init__",
        "self.quant_method.create_weights(",
    ),
    ("sglang/srt/layers/quantization/unquant.py", "create_weights", "torch.empty("),
    ("torch/utils/_device.py", "__torch_function__", "return func(*args, **kwargs)"),
]

KV_FRAMES: dict[str, list[Frame]] = {
    "0.4.6": [
        (MR, "initialize", "self.init_memory_pool("),
        (MR, "init_memory_pool", "raise RuntimeError("),
    ],
    "0.5.9": [
        (MR, "initialize", "self.init_memory_pool(min_per_gpu_memory)"),
        (MR, "init_memory_pool", "raise RuntimeError("),
    ],
    "0.5.23": [
        (MR, "initialize", "self.init_memory_pool(min_per_gpu_memory)"),
        ("sglang/srt/model_executor/pool_configurator.py", "configure", "raise RuntimeError("),
    ],
}


def capture_outer_frames(style: Style) -> list[Frame]:
    gr = style.graph_runner
    return [
        (MR, "initialize", "self.init_cuda_graphs()"),
        (MR, "init_cuda_graphs", "self.cuda_graph_runner = CudaGraphRunner(self)"),
        (gr, "__init__", "raise Exception("),
    ]


def capture_inner_frames(style: Style, oom: bool) -> list[Frame]:
    gr = style.graph_runner
    frames: list[Frame] = [
        (gr, "__init__", "self.capture()"),
        (gr, "capture", ") = self.capture_one_batch_size(bs, forward)"),
    ]
    if oom:
        frames += [
            (gr, "capture_one_batch_size", "run_once()"),
            (gr, "run_once", "logits_output_or_pp_proxy_tensors = forward("),
            ("torch/utils/_contextlib.py", "decorate_context", "return func(*args, **kwargs)"),
            ("sglang/srt/models/deepseek_v2.py", "forward", "hidden_states = self.model("),
            (
                "sglang/srt/layers/moe/fused_moe_triton/fused_moe.py",
                "fused_experts_impl",
                "intermediate_cache1 = torch.empty(",
            ),
        ]
    else:
        frames += [
            (gr, "capture_one_batch_size", "with torch.cuda.graph("),
            ("torch/cuda/graphs.py", "__exit__", "self.cuda_graph.capture_end()"),
            ("torch/cuda/graphs.py", "capture_end", "super().capture_end()"),
        ]
    return frames


def runtime_frames(style: Style, speculative: bool, overlap_v2: bool) -> list[Frame]:
    if not speculative:
        return [
            (SCHED, "run_scheduler_process", "scheduler.event_loop_normal()"),
            (CTX, "decorate_context", "return func(*args, **kwargs)"),
            (SCHED, "event_loop_normal", "self.process_batch_result(batch, result)"),
            (SCHED, "process_batch_result", "self.process_batch_result_decode(batch, result)"),
            (
                "sglang/srt/managers/scheduler_output_processor_mixin.py",
                "process_batch_result_decode",
                "next_token_ids = next_token_ids.tolist()",
            ),
        ]
    if overlap_v2:
        return [
            (SCHED, "run_scheduler_process", "scheduler.event_loop_overlap()"),
            (CTX, "decorate_context", "return func(*args, **kwargs)"),
            (SCHED, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
            (SCHED, "run_batch", "batch_result = self.model_worker.forward_batch_generation("),
            (
                "sglang/srt/speculative/eagle_worker_v2.py",
                "forward_batch_generation",
                "batch_output = self.verify(model_worker_batch)",
            ),
            (
                "sglang/srt/speculative/eagle_worker_v2.py",
                "verify",
                "accept_length_cpu = accept_length.tolist()",
            ),
        ]
    info = style.spec_info_module
    return [
        (SCHED, "run_scheduler_process", "scheduler.event_loop_normal()"),
        (CTX, "decorate_context", "return func(*args, **kwargs)"),
        (SCHED, "event_loop_normal", "result = self.run_batch(batch)"),
        (SCHED, "run_batch", ") = self.draft_worker.forward_batch_speculative_generation(batch)"),
        ("sglang/srt/speculative/eagle_worker.py", "forward_batch_speculative_generation", "logits_output, verify_output, model_worker_batch, can_run_cuda_graph = self.verify("),
        ("sglang/srt/speculative/eagle_worker.py", "verify", "res: EagleVerifyOutput = spec_info.verify("),
        (info, "verify", "accept_index_cpu = accept_index.tolist()"),
    ]  # fmt: skip


def _line_no(style: Style, rel: str, func: str, code: str) -> int:
    return 40 + zlib.crc32(f"{style.name}:{rel}:{func}:{code}".encode()) % 3200


def render_frames(style: Style, frames: Sequence[Frame]) -> str:
    out = []
    for rel, func, code in frames:
        out.append(
            f'  File "{style.site(rel)}", line {_line_no(style, rel, func, code)}, in {func}\n'
        )
        out.append(f"    {code}\n")
    return "".join(out)


def traceback_text(style: Style, frames: Sequence[Frame], final: str) -> str:
    return "Traceback (most recent call last):\n" + render_frames(style, frames) + final


def cuda_error(style: Style, what: str, code_name: str) -> str:
    """PyTorch's text for a CUDA error (older torch: RuntimeError; ≥ 2.8 AcceleratorError)."""
    lines = [f"{style.cuda_error_class}: CUDA error: {what}\n"]
    if style.cuda_error_search:
        lines.append(
            f"Search for `{code_name}' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
            "group__CUDART__TYPES.html for more information.\n"
        )
    lines += [
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.\n",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n",
    ]
    return "".join(lines)


def oom_text(style: Style, alloc_gib: float, free_gib: float, total_gib: float = 139.80) -> str:
    cls = "torch.OutOfMemoryError"
    in_use = total_gib - free_gib
    return (
        f"{cls}: CUDA out of memory. Tried to allocate {alloc_gib:.2f} GiB. GPU 0 has a total "
        f"capacity of {total_gib:.2f} GiB of which {free_gib:.2f} GiB is free. Including "
        f"non-PyTorch memory, this process has {in_use:.2f} GiB memory in use. Of the allocated "
        f"memory {in_use - 0.61:.2f} GiB is allocated by PyTorch, and 112.37 MiB is reserved by "
        "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)\n"
    )


# --------------------------------------------------------------------------- whole texts


def load_oom(style: Style, free_gib: float) -> str:
    init = INIT_FRAMES.get(style.name, INIT_FRAMES["default"])
    return traceback_text(style, init + LOAD_FRAMES, oom_text(style, 3.50, free_gib))


def kv_oom(style: Style, mfs: float) -> str:
    init = INIT_FRAMES.get(style.name, INIT_FRAMES["default"])
    return traceback_text(style, init + KV_FRAMES[style.name], style.kv_oom.format(mfs=mfs) + "\n")


def capture_failure(style: Style, oom: bool, free_gib: float) -> str:
    init = INIT_FRAMES.get(style.name, INIT_FRAMES["default"])
    if oom:
        inner_final = oom_text(style, 2.00, free_gib)
        cause = inner_final.split(": ", 1)[1]
    else:
        inner_final = cuda_error(
            style, "operation failed due to a previous error during capture",
            "cudaErrorStreamCaptureInvalidated",
        )  # fmt: skip
        cause = inner_final.split(": ", 1)[1]
    inner = traceback_text(style, capture_inner_frames(style, oom), inner_final)
    outer = traceback_text(
        style,
        init + capture_outer_frames(style),
        f"Exception: {style.capture_failed}: {cause.rstrip(chr(10))}\n{style.capture_hint}",
    )
    return (
        f"{inner}\nDuring handling of the above exception, another exception occurred:\n\n{outer}"
    )


def runtime_ima(style: Style, speculative: bool, overlap_v2: bool) -> str:
    return traceback_text(
        style,
        runtime_frames(style, speculative, overlap_v2),
        cuda_error(style, "an illegal memory access was encountered", "cudaErrorIllegalAddress"),
    )


def nccl_timeout_lines(rank: int, seq: int, timeout_ms: int = 600000) -> list[str]:
    """PyTorch ProcessGroupNCCL watchdog output of one rank (C++ glog-style lines, no SGLang prefix)."""
    stamp = time.strftime("%m%d %H:%M:%S")
    head = f"[rank{rank}]:[E{stamp}.{int(time.time() * 1e9) % 1_000_000_000:09d} ProcessGroupNCCL.cpp:632]"
    work = (
        f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=7168, NumelOut=7168, "
        f"Timeout(ms)={timeout_ms})"
    )
    ran = timeout_ms + 83
    return [
        f"{head} [Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran} "
        "milliseconds before timing out.",
        f"{head} [Rank {rank}] Exception (either an error or timeout) detected by watchdog at work: "
        f"{seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.",
        f"{head} [Rank {rank}] Timeout at NCCL work: {seq}, last enqueued NCCL work: {seq}, last "
        f"completed NCCL work: {seq - 1}.",
        f"{head} [Rank {rank}] To avoid data inconsistency, we are taking the entire process down.",
        f"{head} [Rank {rank}] Process group watchdog thread terminated with exception: [Rank {rank}] "
        f"Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds before "
        "timing out.",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        f"  what():  [PG ID 2 PG GUID 3 Rank {rank}] Process group watchdog thread terminated with "
        f"exception: [Rank {rank}] Watchdog caught collective operation timeout: {work} ran for "
        f"{ran} milliseconds before timing out.",
        "Fatal Python error: Aborted",
        "",
    ]


def running_sigquit_frame(style: Style) -> str:
    return (
        f"<frame at 0x7f3c5a1b2d40, file '/usr/lib/python{style.python}/asyncio/runners.py', "
        "line 118, code run>"
    )
