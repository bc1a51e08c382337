"""Where in an SGLang server's life a traceback happened: frames -> phase (a table).

Each row names a function (``func``: ``def NAME(`` in SGLang's source) or a source file
(``file``: a path suffix) that a stack passes through only in one part of the server's life,
the phase that part belongs to, what SGLang does there, and the SGLang releases whose wheels
define it (``seen``). The rows were read from the release wheels of SGLang 0.1.14 to 0.5.23
(``pip download --no-deps sglang==X``); ``scripts/check_frames_table.py`` re-checks every
``seen`` against downloaded wheels. Facts only: names and where they run, no code.

Phases, in the order they are tried (the first phase with a matching frame wins, since the
later ones' frames also appear inside the earlier ones' stacks: a capture stack passes through
model init, a serving stack through the model's forward):

* ``runtime``: the scheduler's event loops and what they call per batch, the detokenizer and
  tokenizer-manager loops, CUDA-graph replay, the watchdog;
* ``capture``: CUDA/NPU/CPU-graph capture, torch.compile, the warm-up request;
* ``load``: distributed init, weight loading, the KV/memory pool, the attention backend's
  buffers, worker and model-runner construction;
* ``forward``: the model's own forward pass (model files, layers, kernels) with nothing above
  it that says who called it: a forward pass runs after loading (capture, warm-up or serving),
  so it places the failure at capture or later but does not decide which;
* ``pre-exec``: argument parsing and validation, config/tokenizer lookup, the launcher itself.
"""

from __future__ import annotations

import re
from typing import Any

VERSIONS = ("0.1.14", "0.1.24", "0.2.15", "0.3.6", "0.4.0", "0.4.6", "0.5.2", "0.5.9", "0.5.23")
ORDER = ("runtime", "capture", "load", "forward", "pre-exec")

FRAMES: list[dict[str, Any]] = [
    # -- runtime: serving -------------------------------------------------------------------
    {
        "func": "exposed_step",
        "phase": "runtime",
        "where": "model_rpc/tp_worker step per batch (<= 0.2)",
        "seen": "0.1.14 0.1.24 0.2.15",
    },
    {
        "func": "forward_step",
        "phase": "runtime",
        "where": "model_rpc/tp_worker step per batch (<= 0.2)",
        "seen": "0.1.14 0.1.24 0.2.15",
    },
    {
        "func": "forward_fill_batch",
        "phase": "runtime",
        "where": "model_rpc prefill of a batch (0.1)",
        "seen": "0.1.14",
    },
    {
        "func": "forward_prefill_batch",
        "phase": "runtime",
        "where": "tp_worker prefill of a batch (0.1.x-0.2)",
        "seen": "0.1.24 0.2.15",
    },
    {
        "func": "forward_decode_batch",
        "phase": "runtime",
        "where": "model_rpc/tp_worker decode of a batch (<= 0.2)",
        "seen": "0.1.14 0.1.24 0.2.15",
    },
    {
        "func": "loop_for_forward",
        "phase": "runtime",
        "where": "controller loop (0.1.x-0.2)",
        "seen": "0.1.14 0.1.24 0.2.15",
    },
    {
        "func": "event_loop_normal",
        "phase": "runtime",
        "where": "scheduler event loop",
        "seen": "0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "event_loop_overlap",
        "phase": "runtime",
        "where": "scheduler event loop (overlap schedule)",
        "seen": "0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "event_loop_pp",
        "phase": "runtime",
        "where": "scheduler event loop (pipeline parallel)",
        "seen": "0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "event_loop_normal_disagg_prefill",
        "phase": "runtime",
        "where": "PD-disaggregation prefill event loop",
        "seen": "0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "event_loop_overlap_disagg_prefill",
        "phase": "runtime",
        "where": "PD-disaggregation prefill event loop (overlap)",
        "seen": "0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "event_loop_normal_disagg_decode",
        "phase": "runtime",
        "where": "PD-disaggregation decode event loop",
        "seen": "0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "event_loop_overlap_disagg_decode",
        "phase": "runtime",
        "where": "PD-disaggregation decode event loop (overlap)",
        "seen": "0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "event_loop_pp_disagg_prefill",
        "phase": "runtime",
        "where": "PD prefill event loop (pipeline parallel)",
        "seen": "0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "event_loop_pp_disagg_decode",
        "phase": "runtime",
        "where": "PD decode event loop (pipeline parallel)",
        "seen": "0.5.9 0.5.23",
    },
    {
        "func": "event_loop_pdmux",
        "phase": "runtime",
        "where": "PD-multiplexing event loop",
        "seen": "0.5.9 0.5.23",
    },
    {
        "func": "run_event_loop",
        "phase": "runtime",
        "where": "scheduler: picks and runs its event loop",
        "seen": "0.5.23",
    },
    {
        "func": "dispatch_event_loop",
        "phase": "runtime",
        "where": "scheduler: picks its event loop",
        "seen": "0.5.23",
    },
    {
        "func": "run_batch",
        "phase": "runtime",
        "where": "scheduler runs one batch",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "process_batch_result",
        "phase": "runtime",
        "where": "scheduler handles a batch's output",
        "seen": "0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "process_batch_result_prefill",
        "phase": "runtime",
        "where": "scheduler handles a prefill batch's output",
        "seen": "0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "process_batch_result_decode",
        "phase": "runtime",
        "where": "scheduler handles a decode batch's output",
        "seen": "0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "get_next_batch_to_run",
        "phase": "runtime",
        "where": "scheduler picks the next batch",
        "seen": "0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "get_new_batch_prefill",
        "phase": "runtime",
        "where": "scheduler builds a prefill batch",
        "seen": "0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "update_running_batch",
        "phase": "runtime",
        "where": "scheduler advances the running batch",
        "seen": "0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "recv_requests",
        "phase": "runtime",
        "where": "scheduler receives requests",
        "seen": "0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "process_input_requests",
        "phase": "runtime",
        "where": "scheduler dispatches requests",
        "seen": "0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "handle_generate_request",
        "phase": "runtime",
        "where": "scheduler/tp_worker queues a request",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "forward_batch_generation",
        "phase": "runtime",
        "where": "tp_worker / spec worker runs a batch",
        "seen": "0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "forward_thread_func",
        "phase": "runtime",
        "where": "overlap tp_worker's forward thread",
        "seen": "0.3.6 0.4.0 0.4.6 0.5.2",
    },
    {
        "func": "resolve_batch_result",
        "phase": "runtime",
        "where": "overlap tp_worker waits for a batch",
        "seen": "0.3.6 0.4.0 0.4.6",
    },
    {
        "func": "resolve_last_batch_result",
        "phase": "runtime",
        "where": "overlap tp_worker waits for the last batch",
        "seen": "0.5.2",
    },
    {
        "func": "verify",
        "phase": "runtime",
        "where": "speculative worker verifies draft tokens",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "forward_draft_extend_after_decode",
        "phase": "runtime",
        "where": "EAGLE worker extends the draft after a decode",
        "seen": "0.4.6 0.5.2 0.5.9",
    },
    {
        "func": "forward_target_extend",
        "phase": "runtime",
        "where": "EAGLE worker: the target's prefill of a batch",
        "seen": "0.4.6 0.5.2 0.5.9",
    },
    {
        "func": "forward_draft_extend",
        "phase": "runtime",
        "where": "EAGLE worker: the draft's prefill after the target's",
        "seen": "0.4.6 0.5.2 0.5.9",
    },
    {
        "func": "_draft_extend_for_decode",
        "phase": "runtime",
        "where": "EAGLE/MTP/DFlash worker: the draft after a decode step",
        "seen": "0.5.9 0.5.23",
    },
    {
        "func": "forward_batch_speculative_generation",
        "phase": "runtime",
        "where": "EAGLE worker: one speculative step of a batch",
        "seen": "0.4.6 0.5.2",
    },
    {
        "func": "replay",
        "phase": "runtime",
        "where": "CUDA-graph replay of a captured batch",
        "seen": "0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "replay_prepare",
        "phase": "runtime",
        "where": "CUDA-graph replay inputs",
        "seen": "0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "watchdog_thread",
        "phase": "runtime",
        "where": "scheduler watchdog",
        "seen": "0.3.6 0.4.0 0.4.6 0.5.2",
    },
    {
        "func": "self_check_during_idle",
        "phase": "runtime",
        "where": "scheduler idle self-check",
        "seen": "0.5.2 0.5.9",
    },
    {
        "func": "handle_loop",
        "phase": "runtime",
        "where": "tokenizer manager's receive loop",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "_handle_batch_output",
        "phase": "runtime",
        "where": "tokenizer manager handles outputs",
        "seen": "0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "generate_request",
        "phase": "runtime",
        "where": "tokenizer manager serves a request",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "_wait_one_response",
        "phase": "runtime",
        "where": "tokenizer manager waits for a response",
        "seen": "0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "file": "detokenizer_manager.py",
        "phase": "runtime",
        "where": "the detokenizer process (its event loop)",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "file": "scheduler_output_processor_mixin.py",
        "phase": "runtime",
        "where": "scheduler output processing",
        "seen": "0.4.6 0.5.2 0.5.9",
    },
    # -- capture: graphs, compile, warm-up ----------------------------------------------------
    {
        "func": "init_cuda_graphs",
        "phase": "capture",
        "where": "model runner starts graph capture",
        "seen": "0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "init_device_graphs",
        "phase": "capture",
        "where": "model runner starts device-graph capture",
        "seen": "0.5.2 0.5.9",
    },
    {
        "func": "init_piecewise_cuda_graphs",
        "phase": "capture",
        "where": "piecewise CUDA-graph capture",
        "seen": "0.5.9",
    },
    {
        "func": "capture",
        "phase": "capture",
        "where": "graph runner captures every batch size",
        "seen": "0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "capture_one_batch_size",
        "phase": "capture",
        "where": "graph runner captures one batch size",
        "seen": "0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "_capture_graph",
        "phase": "capture",
        "where": "one graph's capture",
        "seen": "0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "_wait_and_warmup",
        "phase": "capture",
        "where": "the launcher's warm-up request (and PD warm-up) before ready",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "_execute_server_warmup",
        "phase": "capture",
        "where": "the warm-up request before ready",
        "seen": "0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "compile_fx",
        "phase": "capture",
        "where": "torch.compile (inductor) at capture (not SGLang)",
        "seen": "",
    },
    {
        "file": "cuda_graph_runner.py",
        "phase": "capture",
        "where": "CUDA-graph runner (capture; its replay is runtime)",
        "seen": "0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "file": "graph_runner.py",
        "phase": "capture",
        "where": "NPU/CPU/piecewise graph runners",
        "seen": "0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "file": "torch/_dynamo/",
        "phase": "capture",
        "where": "torch.compile (not SGLang)",
        "seen": "",
    },
    {
        "file": "torch/_inductor/",
        "phase": "capture",
        "where": "torch.compile (not SGLang)",
        "seen": "",
    },
    # -- load: init, weights, memory ----------------------------------------------------------
    {
        "func": "exposed_init_model",
        "phase": "load",
        "where": "model_rpc model init (0.1)",
        "seen": "0.1.14",
    },
    {
        "func": "init_torch_distributed",
        "phase": "load",
        "where": "model runner's distributed init",
        "seen": "0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "init_distributed_environment",
        "phase": "load",
        "where": "distributed init",
        "seen": "0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "initialize_model_parallel",
        "phase": "load",
        "where": "model-parallel groups",
        "seen": "0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "ensure_model_parallel_initialized",
        "phase": "load",
        "where": "model-parallel groups",
        "seen": "0.4.0 0.4.6 0.5.2 0.5.9",
    },
    {
        "func": "init_process_group",
        "phase": "load",
        "where": "torch.distributed (not SGLang)",
        "seen": "",
    },
    {
        "func": "load_model",
        "phase": "load",
        "where": "model runner / loader loads the weights",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "load_weights",
        "phase": "load",
        "where": "a model's weight loading",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "load_weights_and_postprocess",
        "phase": "load",
        "where": "loader: weights, then post-processing",
        "seen": "0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "weight_loader",
        "phase": "load",
        "where": "a layer's weight loader",
        "seen": "0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "get_model",
        "phase": "load",
        "where": "model construction",
        "seen": "0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "_initialize_model",
        "phase": "load",
        "where": "model construction",
        "seen": "0.1.24 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "create_weights",
        "phase": "load",
        "where": "a quantized layer's parameters",
        "seen": "0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "make_layers",
        "phase": "load",
        "where": "model construction",
        "seen": "0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "init_memory_pool",
        "phase": "load",
        "where": "KV cache / memory pool",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "profile_max_num_token",
        "phase": "load",
        "where": "KV cache sizing",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9",
    },
    {
        "func": "init_attention_backend",
        "phase": "load",
        "where": "attention backend and its workspace",
        "seen": "0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "init_model_worker",
        "phase": "load",
        "where": "scheduler builds its tp worker",
        "seen": "0.5.9 0.5.23",
    },
    {
        "file": "multimodal_gen/runtime/loader/",
        "phase": "load",
        "where": "the diffusion (multimodal_gen) pipeline's component loader",
        "seen": "0.5.9 0.5.23",
    },
    {
        "file": "model_loader/",
        "phase": "load",
        "where": "weight loaders",
        "seen": "0.1.24 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "file": "memory_pool.py",
        "phase": "load",
        "where": "KV cache / memory pool",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "file": "parallel_state.py",
        "phase": "load",
        "where": "distributed groups",
        "seen": "0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "file": "model_runner.py",
        "phase": "load",
        "where": "model runner construction (its forward is runtime/capture, above)",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "file": "tp_worker.py",
        "phase": "load",
        "where": "tp worker construction",
        "seen": "0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    # -- forward: the model's forward pass, caller unknown ------------------------------------
    {
        "file": "/srt/models/",
        "phase": "forward",
        "where": "a model's forward (its load_weights is load, above)",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "file": "/srt/layers/",
        "phase": "forward",
        "where": "layers and kernels of the forward pass",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "file": "triton/compiler/",
        "phase": "forward",
        "where": "Triton JIT-compiling a kernel at its first call (not SGLang)",
        "seen": "",
    },
    {
        "file": "triton/runtime/",
        "phase": "forward",
        "where": "Triton launching a kernel (not SGLang)",
        "seen": "",
    },
    # -- pre-exec: arguments, config, the launcher --------------------------------------------
    {
        "func": "prepare_server_args",
        "phase": "pre-exec",
        "where": "argument parsing",
        "seen": "0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "from_cli_args",
        "phase": "pre-exec",
        "where": "argument parsing",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "check_server_args",
        "phase": "pre-exec",
        "where": "argument validation",
        "seen": "0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "__post_init__",
        "phase": "pre-exec",
        "where": "ServerArgs validation",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {"func": "parse_args", "phase": "pre-exec", "where": "argparse (not SGLang)", "seen": ""},
    {
        "func": "get_config",
        "phase": "pre-exec",
        "where": "model config lookup",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "get_tokenizer",
        "phase": "pre-exec",
        "where": "tokenizer lookup",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "cached_file",
        "phase": "pre-exec",
        "where": "Hugging Face file lookup (not SGLang)",
        "seen": "",
    },
    {
        "func": "hf_hub_download",
        "phase": "pre-exec",
        "where": "Hugging Face download (not SGLang)",
        "seen": "",
    },
    {
        "func": "snapshot_download",
        "phase": "pre-exec",
        "where": "Hugging Face download (not SGLang)",
        "seen": "",
    },
    {
        "func": "_find_and_load",
        "phase": "pre-exec",
        "where": "Python importing a module (not SGLang)",
        "seen": "",
    },
    {
        "file": "server_args.py",
        "phase": "pre-exec",
        "where": "server arguments",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {"file": "argparse.py", "phase": "pre-exec", "where": "argparse (not SGLang)", "seen": ""},
    {
        "file": "huggingface_hub/",
        "phase": "pre-exec",
        "where": "Hugging Face hub (not SGLang)",
        "seen": "",
    },
    {
        "file": "hf_transformers_utils.py",
        "phase": "pre-exec",
        "where": "config/tokenizer lookup",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "file": "launch_server.py",
        "phase": "pre-exec",
        "where": "the launcher's entry point",
        "seen": "0.1.14 0.1.24 0.2.15 0.3.6 0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
]

# Function-name patterns (families whose members are named by a prefix): same fields.
FAMILIES: list[dict[str, Any]] = [
    {
        "func": r"event_loop\w*",
        "phase": "runtime",
        "where": "any event loop (scheduler, detokenizer, DP controller)",
    },
    {"func": r"process_batch_result\w*", "phase": "runtime", "where": "batch-output handlers"},
    {"func": r"load_weights\w*|weight_loader\w*", "phase": "load", "where": "weight loaders"},
    {"func": r"init_kv_cache\w*", "phase": "load", "where": "KV cache init"},
    {"func": r"warmup\w*", "phase": "capture", "where": "warm-up of kernels or the server"},
    {
        "func": r"_handle_\w+",
        "phase": "pre-exec",
        "where": "ServerArgs' per-feature argument handling",
    },
    {
        "func": r"_compile\w*",
        "phase": "capture",
        "where": "torch.compile / kernel compile at capture",
    },
]


def _compile() -> list[tuple[str, str, re.Pattern[str]]]:
    out = []
    for row in FRAMES:
        if "func" in row:
            out.append((row["phase"], "func", re.compile(rf"^{re.escape(row['func'])}$")))
        else:
            out.append((row["phase"], "file", re.compile(re.escape(row["file"]))))
    for row in FAMILIES:
        out.append((row["phase"], "func", re.compile(rf"^(?:{row['func']})$")))
    return sorted(out, key=lambda t: (ORDER.index(t[0]), t[1] != "func"))


_RULES = _compile()


def phase_of(frames: list[tuple[str, str]]) -> str | None:
    """The phase of a stack (``(file, function)`` pairs): the first phase of ``ORDER`` with a
    matching frame (function rules before file rules); None when no frame is known."""
    for phase, kind, rx in _RULES:
        for f, fn in frames:
            if rx.search(fn if kind == "func" else f.replace("\\", "/")):
                return phase
    return None


def phase_of_frame(file: str, func: str) -> str | None:
    return phase_of([(file, func)])
