"""Per-version SGLang log formats, as data, and the writer that prints them.

Each ``Style`` row holds the format strings of one SGLang release family (the simulator
offers 0.4.6, 0.5.9 — standing for ≤ 0.5.13 — and 0.5.23 — standing for ≥ 0.5.14). Sources:
/work/shared/sglang-log-formats.md §1–§5 (section numbers are cited next to each field).
A new variant is a new row, not new code.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Style:
    name: str
    prog: str  # argparse prog (§4.1)
    python: str  # python of the site-packages paths in tracebacks
    rank_tag_always: bool  # §1.2: " TP0" even at tp=1 (≤ 0.4.6)
    server_args_dict: bool  # §2.2: dict repr (0.5.19+) instead of ServerArgs(...)
    startup_order: str  # §2.1: "target_first" (≤ 0.5.13) or "weights_first" (≥ 0.5.14)
    dist_end: str  # §2.3
    load_end: str  # §2.4
    shard_bar_newline: bool  # §1.3: shard bar refreshes end in "\n" (0.4.0–0.5.9)
    kv_mla: str  # §2.6, MLA (single buffer) models
    kv_mha: str  # §2.6, MHA models
    capture_target_begin: str  # §2.7
    capture_target_end: str
    capture_bs_line: bool  # "Capture cuda graph bs [...]" (0.4.7–0.5.13)
    capture_draft_begin: str
    capture_draft_end: str
    capture_extend_begin: str | None  # None: no draft-extend graphs (≤ 0.4.6)
    capture_extend_end: str | None
    draft_capture_rank0_only: bool
    capture_bar_desc: str  # §2.7 tqdm description
    capacity: str  # §2.8
    capacity_all_ranks: bool
    prefill: str  # §3.1
    decode: str  # §3.2 (non-spec); spec fields are inserted at decode_spec_at
    decode_spec: str
    accept_rate_formula: str | None  # §3.3: None, "steps1", "ndt" or "strict"
    warmup_info_path: str  # §2.10
    new_info_routes: bool  # /server_info, /model_info (0.5.6+) and deprecation warnings
    health_starting_503: bool  # §2.11
    health_probe: bool  # /health runs a generate probe (0.5.x)
    capture_failed: str  # §4.3 "Capture cuda graph failed" wording
    capture_hint: str
    sigquit_launch: str  # §4.4
    sigquit_running: str
    rank_dead: tuple[str, ...]
    subprocess_watchdog: bool  # §4.4 SubprocessWatchdog (0.5.10+)
    watchdog: str  # §4.7
    debug_dump_before: bool
    graceful_exit: str  # §4.9
    spec_meta: str  # §5.1 family: "verify_ct", "v059", "v0523"
    server_info_internal_top: bool  # §5.3: internal state merged at top level (0.4.4–0.4.6)
    kv_oom: str  # §4.2
    cuda_error_class: str  # torch error class of CUDA faults (older torch: RuntimeError)
    cuda_error_search: bool  # torch ≥ 2.8 adds the "Search for `cudaError...'" line
    # -- command line (§4.1, §7.1)
    flag_aliases: bool  # --model, --speculative-draft-model (0.5.x)
    spec_algo_choices: tuple[str, ...] | None  # argparse choices; None: free-form (0.5.10+)
    spec_algo_known: tuple[str, ...] | None  # names ServerArgs accepts when free-form
    split_cuda_graph_flags: bool  # --cuda-graph-max-bs-decode/-prefill, backend (0.5.20+)
    spec_default_large: bool  # defaults steps/topk/ndt 5/4/8 for every model (≤ 0.4.6)
    spec_default_topk: int  # topk when only --speculative-num-steps is given
    spec_v2_overlap: bool  # overlap spec v2 on by default at topk 1 (0.5.14+)
    default_cuda_graph_max_bs: int  # without speculation
    default_log_requests_level: int
    # -- startup and failures
    draft_capture_single_step: bool  # a draft graph is captured even at num_steps 1 (≤ 0.4.6)
    graph_runner: str  # module of the decode CUDA graph runner (tracebacks)
    spec_info_module: str  # module of the EAGLE verify step (tracebacks)
    # -- HTTP
    weight_version: bool  # meta_info / model_info carry weight_version and friends (0.5.x)
    reasoning_tokens: bool  # meta_info carries reasoning_tokens (0.5.14+)
    output_ids: bool  # /generate returns output_ids (0.5.x)
    ready_route: bool  # GET /ready (0.5.14+)
    metrics_extended: bool  # accept rate, is_cuda_graph, ... in /metrics (0.5.x)
    bare_warnings_spec: tuple[str, ...] = field(default=())
    deprecated_flag_warning: bool = False  # §4.1 (0.5.14+)
    version: str = ""

    def site(self, rel: str) -> str:
        return f"/usr/local/lib/python{self.python}/dist-packages/{rel}"


_HINT_046 = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable cuda graph by --disable-cuda-graph. (Not recommonded. Huge perf loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
_HINT_047 = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
_HINT_0514 = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
    "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)

_SIGQUIT_LAUNCH = "Received sigquit from a child process. It usually means the child failed."
_SIGQUIT_RUNNING = (
    "SIGQUIT received. signum={signum}, frame={frame}. It usually means one child failed."
)
_RANK_DEAD_OLD = (
    "Rank {rank} scheduler is dead. Please check if there are relevant logs.",
    "Exit code: {code}",
)
_RANK_DEAD_NEW = (
    "Rank {rank} scheduler died during initialization (exit code: {code}). If exit code is -9 "
    "(SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.",
)

_DECODE_05 = (
    "Decode batch, #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
    "{spec}cuda graph: {cuda_graph}, gen throughput (token/s): {gen:.2f}, #queue-req: {queue}"
)

_GRAPH_RUNNER_OLD = "sglang/srt/model_executor/cuda_graph_runner.py"
_SPEC_INFO_05 = "sglang/srt/speculative/eagle_info.py"

STYLES: dict[str, Style] = {
    "0.4.6": Style(
        name="0.4.6",
        version="0.4.6",
        prog="launch_server.py",
        python="3.10",
        rank_tag_always=True,
        server_args_dict=False,
        startup_order="target_first",
        dist_end="Init torch distributed ends. mem usage={usage:.2f} GB",
        load_end=(
            "Load weight end. type={cls}, dtype={dtype}, avail mem={avail:.2f} GB, "
            "mem usage={usage:.2f} GB."
        ),
        shard_bar_newline=True,
        kv_mla="KV Cache is allocated. #tokens: {tokens}, KV size: {kv:.2f} GB",
        kv_mha="KV Cache is allocated. #tokens: {tokens}, K size: {k:.2f} GB, V size: {v:.2f} GB",
        capture_target_begin=(
            "Capture cuda graph begin. This can take up to several minutes. avail mem={avail:.2f} GB"
        ),
        capture_target_end=(
            "Capture cuda graph end. Time elapsed: {elapsed:.2f} s. avail mem={avail:.2f} GB. "
            "mem usage={usage:.2f} GB."
        ),
        capture_bs_line=False,
        capture_draft_begin=(
            "Capture draft cuda graph begin. This can take up to several minutes. "
            "avail mem={avail:.2f} GB"
        ),
        capture_draft_end=(
            "Capture draft cuda graph end. Time elapsed: {elapsed:.2f} s. avail mem={avail:.2f} GB. "
            "mem usage={usage:.2f} GB."
        ),
        capture_extend_begin=None,
        capture_extend_end=None,
        draft_capture_rank0_only=False,
        capture_bar_desc="Capturing batches (avail_mem={avail:.2f} GB)",
        capacity=(
            "max_total_num_tokens={total}, chunked_prefill_size={chunk}, "
            "max_prefill_tokens={prefill}, max_running_requests={running}, context_len={ctx}"
        ),
        capacity_all_ranks=True,
        prefill=(
            "Prefill batch. #new-seq: {new_seq}, #new-token: {new_token}, #cached-token: {cached}, "
            "token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queue}"
        ),
        decode=(
            "Decode batch. #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
            "{spec}gen throughput (token/s): {gen:.2f}, #queue-req: {queue}"
        ),
        decode_spec="accept len: {accept_len:.2f}, ",
        accept_rate_formula=None,
        warmup_info_path="/get_model_info",
        new_info_routes=False,
        health_starting_503=False,
        health_probe=False,
        capture_failed="Capture cuda graph failed",
        capture_hint=_HINT_046,
        sigquit_launch=_SIGQUIT_LAUNCH,
        sigquit_running=_SIGQUIT_LAUNCH,
        rank_dead=_RANK_DEAD_OLD,
        subprocess_watchdog=False,
        watchdog="Watchdog timeout ({watchdog_expr})",
        debug_dump_before=False,
        graceful_exit="Gracefully exiting... remaining number of requests {n}",
        spec_meta="verify_ct",
        server_info_internal_top=True,
        kv_oom="RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        cuda_error_class="RuntimeError",
        cuda_error_search=False,
        flag_aliases=False,
        spec_algo_choices=("EAGLE", "EAGLE3", "NEXTN"),
        spec_algo_known=None,
        split_cuda_graph_flags=False,
        spec_default_large=True,
        spec_default_topk=4,
        spec_v2_overlap=False,
        default_cuda_graph_max_bs=160,
        default_log_requests_level=0,
        draft_capture_single_step=True,
        graph_runner=_GRAPH_RUNNER_OLD,
        spec_info_module="sglang/srt/speculative/eagle_utils.py",
        weight_version=False,
        reasoning_tokens=False,
        output_ids=False,
        ready_route=False,
        metrics_extended=False,
        bare_warnings_spec=(
            "Overlap scheduler is disabled because of using eagle speculative decoding.",
        ),
    ),
    "0.5.9": Style(
        name="0.5.9",
        version="0.5.9",
        prog="launch_server.py",
        python="3.12",
        rank_tag_always=False,
        server_args_dict=False,
        startup_order="target_first",
        dist_end="Init torch distributed ends. elapsed={elapsed:.2f} s, mem usage={usage:.2f} GB",
        load_end=(
            "Load weight end. elapsed={elapsed:.2f} s, type={cls}, dtype={dtype}, "
            "avail mem={avail:.2f} GB, mem usage={usage:.2f} GB."
        ),
        shard_bar_newline=True,
        kv_mla="KV Cache is allocated. #tokens: {tokens}, KV size: {kv:.2f} GB",
        kv_mha="KV Cache is allocated. #tokens: {tokens}, K size: {k:.2f} GB, V size: {v:.2f} GB",
        capture_target_begin=(
            "Capture cuda graph begin. This can take up to several minutes. avail mem={avail:.2f} GB"
        ),
        capture_target_end=(
            "Capture cuda graph end. Time elapsed: {elapsed:.2f} s. mem usage={usage:.2f} GB. "
            "avail mem={avail:.2f} GB."
        ),
        capture_bs_line=True,
        capture_draft_begin=(
            "Capture draft cuda graph begin. This can take up to several minutes. "
            "avail mem={avail:.2f} GB"
        ),
        capture_draft_end=(
            "Capture draft cuda graph end. Time elapsed: {elapsed:.2f} s. mem usage={usage:.2f} GB. "
            "avail mem={avail:.2f} GB."
        ),
        capture_extend_begin=(
            "Capture draft extend cuda graph begin. This can take up to several minutes. "
            "avail mem={avail:.2f} GB"
        ),
        capture_extend_end=(
            "Capture draft extend cuda graph end. Time elapsed: {elapsed:.2f} s. "
            "mem usage={usage:.2f} GB. avail mem={avail:.2f} GB."
        ),
        draft_capture_rank0_only=False,
        capture_bar_desc="Capturing batches (bs={bs} avail_mem={avail:.2f} GB)",
        capacity=(
            "max_total_num_tokens={total}, chunked_prefill_size={chunk}, "
            "max_prefill_tokens={prefill}, max_running_requests={running}, context_len={ctx}, "
            "available_gpu_mem={avail:.2f} GB"
        ),
        capacity_all_ranks=False,
        prefill=(
            "Prefill batch, #new-seq: {new_seq}, #new-token: {new_token}, #cached-token: {cached}, "
            "token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queue}, "
            "input throughput (token/s): {input_tps:.2f}, cuda graph: False"
        ),
        decode=_DECODE_05,
        decode_spec="accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, ",
        accept_rate_formula="ndt",
        warmup_info_path="/model_info",
        new_info_routes=True,
        health_starting_503=True,
        health_probe=True,
        capture_failed="Capture cuda graph failed",
        capture_hint=_HINT_047,
        sigquit_launch=_SIGQUIT_LAUNCH,
        sigquit_running=_SIGQUIT_RUNNING,
        rank_dead=_RANK_DEAD_OLD,
        subprocess_watchdog=False,
        watchdog="Scheduler watchdog timeout ({watchdog_expr}, self.soft=False)",
        debug_dump_before=True,
        graceful_exit=(
            "Gracefully exiting... Remaining number of requests {n}. "
            "Remaining requests remaining_rids={rids}."
        ),
        spec_meta="v059",
        server_info_internal_top=False,
        kv_oom=(
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: self.server_args.mem_fraction_static={mfs}"
        ),
        cuda_error_class="torch.AcceleratorError",
        cuda_error_search=True,
        flag_aliases=True,
        spec_algo_choices=("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"),
        spec_algo_known=None,
        split_cuda_graph_flags=False,
        spec_default_large=False,
        spec_default_topk=1,
        spec_v2_overlap=False,
        default_cuda_graph_max_bs=256,
        default_log_requests_level=2,
        draft_capture_single_step=False,
        graph_runner=_GRAPH_RUNNER_OLD,
        spec_info_module=_SPEC_INFO_05,
        weight_version=True,
        reasoning_tokens=False,
        output_ids=True,
        ready_route=False,
        metrics_extended=True,
        bare_warnings_spec=(
            "Max running requests is reset to 48 for speculative decoding. You can override "
            "this by explicitly setting --max-running-requests.",
            "Overlap scheduler is disabled when spec v2 is off or using unsupported speculative "
            "algorithm. You can set env SGLANG_ENABLE_SPEC_V2=True to enable the experimental "
            "overlap scheduler. ",
        ),
    ),
    "0.5.23": Style(
        name="0.5.23",
        version="0.5.23",
        prog="sglang serve",
        python="3.12",
        rank_tag_always=False,
        server_args_dict=True,
        startup_order="weights_first",
        dist_end="Init torch distributed ends. elapsed={elapsed:.2f} s, mem usage={usage:.2f} GB",
        load_end=(
            "Load weight end. elapsed={elapsed:.2f} s, type={cls}, avail mem={avail:.2f} GB, "
            "mem usage={usage:.2f} GB."
        ),
        shard_bar_newline=False,
        kv_mla="KV Cache is allocated. dtype: {dtype}, #tokens: {tokens}, KV size: {kv:.2f} GB",
        kv_mha=(
            "KV Cache is allocated. dtype: {dtype}, #tokens: {tokens}, K size: {k:.2f} GB, "
            "V size: {v:.2f} GB"
        ),
        capture_target_begin=(
            "Capture target {kind} CUDA graph begin. backend=full, num_tokens_per_req={ntok}, "
            "avail mem={avail:.2f} GB"
        ),
        capture_target_end=(
            "Capture target {kind} CUDA graph end. bs={bs_list}, elapsed={elapsed:.2f} s, "
            "mem usage={usage:.2f} GB, avail mem={avail:.2f} GB."
        ),
        capture_bs_line=False,
        capture_draft_begin=(
            "Capture draft decode CUDA graph begin. backend=full, num_tokens_per_req={ntok}, "
            "bs={bs_list}, avail mem={avail:.2f} GB"
        ),
        capture_draft_end=(
            "Capture draft decode CUDA graph end. elapsed={elapsed:.2f} s, mem usage={usage:.2f} GB, "
            "avail mem={avail:.2f} GB."
        ),
        capture_extend_begin=(
            "Capture draft extend CUDA graph begin. backend=full, num_tokens_per_req={ntok}, "
            "bs={bs_list}, avail mem={avail:.2f} GB"
        ),
        capture_extend_end=(
            "Capture draft extend CUDA graph end. elapsed={elapsed:.2f} s, mem usage={usage:.2f} GB, "
            "avail mem={avail:.2f} GB."
        ),
        draft_capture_rank0_only=True,
        capture_bar_desc="Capturing batches (bs={bs} avail_mem={avail:.2f} GB)",
        capacity=(
            "max_total_num_tokens={total}, chunked_prefill_size={chunk}, "
            "max_prefill_tokens={prefill}, max_running_requests={running}, context_len={ctx}, "
            "available_gpu_mem={avail:.2f} GB"
        ),
        capacity_all_ranks=False,
        prefill=(
            "Prefill batch, #new-seq: {new_seq}, #new-token: {new_token}, #cached-token: {cached}, "
            "token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queue}, "
            "#pending-token: 0, cuda graph: False, input throughput (token/s): {input_tps:.2f}"
        ),
        decode=_DECODE_05,
        decode_spec="accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, ",
        accept_rate_formula="strict",
        warmup_info_path="/model_info",
        new_info_routes=True,
        health_starting_503=True,
        health_probe=True,
        capture_failed="Capture CUDA graph failed",
        capture_hint=_HINT_0514,
        sigquit_launch=_SIGQUIT_LAUNCH,
        sigquit_running=_SIGQUIT_RUNNING,
        rank_dead=_RANK_DEAD_NEW,
        subprocess_watchdog=True,
        watchdog="Scheduler watchdog timeout ({watchdog_expr}, self.soft=False)",
        debug_dump_before=True,
        graceful_exit=(
            "Gracefully exiting... Remaining number of requests {n}. "
            "Remaining requests remaining_rids={rids}."
        ),
        spec_meta="v0523",
        server_info_internal_top=False,
        kv_oom=(
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: mem_fraction_static={mfs}"
        ),
        cuda_error_class="torch.AcceleratorError",
        cuda_error_search=True,
        flag_aliases=True,
        spec_algo_choices=None,
        spec_algo_known=(
            "EAGLE",
            "EAGLE3",
            "NEXTN",
            "STANDALONE",
            "NGRAM",
            "DFLASH",
            "DSPARK",
            "UNO",
        ),  # fmt: skip
        split_cuda_graph_flags=True,
        spec_default_large=False,
        spec_default_topk=1,
        spec_v2_overlap=True,
        default_cuda_graph_max_bs=256,
        default_log_requests_level=2,
        draft_capture_single_step=False,
        graph_runner="sglang/srt/model_executor/runner/decode_cuda_graph_runner.py",
        spec_info_module=_SPEC_INFO_05,
        weight_version=True,
        reasoning_tokens=True,
        output_ids=True,
        ready_route=True,
        metrics_extended=True,
        bare_warnings_spec=(
            "Max running requests is reset to 48 for speculative decoding. You can override "
            "this by explicitly setting --max-running-requests.",
        ),
        deprecated_flag_warning=True,
    ),
}

DEFAULT_STYLE = "0.5.23"


# --------------------------------------------------------------------------- writing lines


class LogWriter:
    """Prints SGLang-style lines, flushed one by one (a launcher redirects ``> log 2>&1``).

    SGLang logging, uvicorn's error log and tqdm go to stderr; uvicorn's access log to stdout.
    Writes go to the raw file descriptors so lines from both streams keep their order.
    """

    def __init__(self, style: Style, tp_size: int = 1, dp_size: int = 1) -> None:
        self.style = style
        self.tp_size = tp_size
        self.dp_size = dp_size
        self._lock = threading.Lock()
        self.err_fd = sys.stderr.fileno()
        self.out_fd = sys.stdout.fileno()

    # -- prefixes (§1.1, §1.2)
    @staticmethod
    def now() -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S")

    def rank_tag(self, tp: int, dp: int = 0) -> str:
        parts = []
        if self.dp_size > 1:
            parts.append(f"DP{dp}")
        if self.style.rank_tag_always or self.tp_size > 1:
            parts.append(f"TP{tp}")
        return "".join(" " + p for p in parts)

    def raw(self, text: str, *, stdout: bool = False) -> None:
        data = text.encode("utf-8", "replace")
        with self._lock:
            fd = self.out_fd if stdout else self.err_fd
            while data:
                try:
                    n = os.write(fd, data)
                except BlockingIOError:
                    time.sleep(0.001)
                    continue
                except (BrokenPipeError, OSError):
                    return
                data = data[n:]

    def main(self, msg: str) -> None:
        """A line of the main process (no rank tag)."""
        self.raw(f"[{self.now()}] {msg}\n")

    def rank(self, tp: int, msg: str, dp: int = 0) -> None:
        """A line of a scheduler process."""
        self.raw(f"[{self.now()}{self.rank_tag(tp, dp)}] {msg}\n")

    def bare(self, msg: str) -> None:
        """A line without any prefix (warnings before logging is configured, tracebacks)."""
        self.raw(msg if msg.endswith("\n") else msg + "\n")

    def uvicorn(self, level: str, msg: str) -> None:
        """uvicorn's error log through SGLang's formatter (§2.10): ``[ts] INFO:     msg``."""
        self.raw(f"[{self.now()}] {(level + ':').ljust(9)} {msg}\n")

    def access(self, client: str, method: str, path: str, status: int) -> None:
        reason = HTTP_REASONS.get(status, "")
        self.raw(
            f'[{self.now()}] INFO:     {client} - "{method} {path} HTTP/1.1" {status} {reason}\n',
            stdout=True,
        )


HTTP_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    422: "Unprocessable Entity",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


# --------------------------------------------------------------------------- tqdm-like bars


def _fmt_interval(seconds: float) -> str:
    seconds = int(seconds)
    m, s = divmod(seconds, 60)
    h, m = divmod(m, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _rate(n: int, elapsed: float) -> tuple[str, str]:
    if n <= 0 or elapsed <= 0:
        return "?it/s", "?"
    rate = n / elapsed
    if rate >= 1:
        return f"{rate:5.2f}it/s", ""
    return f"{1 / rate:5.2f}s/it", ""


def tqdm_frame(desc: str, n: int, total: int, elapsed: float) -> str:
    """tqdm's default layout for a non-terminal stream (10-cell bar)."""
    frac = n / total if total else 1.0
    cells = frac * 10
    full = int(cells)
    parts = " ▏▎▍▌▋▊▉"
    bar = "█" * full
    if full < 10:
        bar += parts[int((cells - full) * 8)].strip() or " "
        bar = bar.ljust(10)
    rate, _ = _rate(n, elapsed)
    remaining = "?" if n <= 0 else _fmt_interval(elapsed / n * (total - n))
    head = f"{desc}: " if desc else ""
    return (
        f"{head}{frac * 100:3.0f}%|{bar}| {n}/{total} "
        f"[{_fmt_interval(elapsed)}<{remaining}, {rate}]"
    )


def shard_frame(desc: str, n: int, total: int, elapsed: float) -> str:
    """SGLang's shard-loading bar format (§2.4)."""
    rate, _ = _rate(n, elapsed)
    remaining = "?" if n <= 0 else _fmt_interval(elapsed / n * (total - n))
    pct = 100 * n / total if total else 100
    return (
        f"{desc}: {pct:3.0f}% Completed | {n}/{total} "
        f"[{_fmt_interval(elapsed)}<{remaining}, {rate}]"
    )
