"""The error-signature catalog: one row per way an SGLang launch fails (data)."""

from __future__ import annotations

from typing import Any

PHASES = ("ok", "cleanup", "pre-exec", "load", "capture", "runtime")


CATALOG: list[dict[str, Any]] = [
    {
        "id": "arg_error",
        "patterns": [
            r"^usage: (?:launch_server|sglang|python[\d.]* -m sglang)",
            r"^[\w./ -]*(?:launch_server(?:\.py)?|sglang serve): error: ",
            r"error: (?:argument --[\w-]+|unrecognized arguments|the following arguments are required)",
        ],
        "phase": "pre-exec",
        "priority": 90,
        "explanation": "the launch command has a flag SGLang's argument parser rejects, so the "
        "server never started",
        "remedies": [
            "fix the flag named in the error (spelling, value, or a flag this SGLang version "
            "does not have: check `python3 -m sglang.launch_server --help`)",
        ],
    },
    {
        "id": "invalid_server_args",
        "patterns": [
            r"speculative_eagle_topk > 1 with page_size > 1",
            r"Unknown speculative algorithm name",
            r"only supports topk = 1",
            r"does not support dp attention",
            r"requires --speculative-(?:eagle-topk|draft-model-path)",
            r"requires setting --speculative-draft-model-path",
            r"is incompatible with --speculative",
            r"speculative_num_draft_tokens .*must",
        ],
        # a bare `assert` (or a ValueError) in the argument checks names no flag: only the
        # stack says it was the validation of the server arguments
        "framed_patterns": [r"^(?:AssertionError|ValueError)\b"],
        "frames": r"server_args\.py|__post_init__|check_server_args|prepare_server_args|"
        r"speculative_hook|_handle_speculative",
        "frames_optional": True,
        "phase": "pre-exec",
        "priority": 85,
        "explanation": "SGLang rejected the combination of server arguments while validating "
        "them (ServerArgs), before anything was loaded",
        "remedies": [
            "change the conflicting flags the message names",
            "e.g. --speculative-eagle-topk 1 (a chain draft: num_draft_tokens becomes "
            "num_steps + 1)",
            "e.g. --page-size 1",
            "e.g. another --attention-backend ({attn_other})",
        ],
    },
    {
        "id": "undefined_symbol",
        "patterns": [r"undefined symbol: "],
        "phase": "pre-exec",
        "priority": 88,
        "explanation": "a compiled extension (sgl_kernel, flashinfer, torch) was built against "
        "another torch/CUDA version than the one installed",
        "remedies": [
            "reinstall the kernel package matching your torch version "
            "(pip install --force-reinstall sgl-kernel / flashinfer for torch X.Y)",
        ],
    },
    {
        "id": "import_error",
        "patterns": [
            r"\bModuleNotFoundError: ",
            r"\bImportError: ",
            r"No module named '?[\w.]+",
            r"cannot import name '",
        ],
        "phase": "pre-exec",
        "priority": 80,
        "explanation": "a Python module the server needs could not be imported (missing or "
        "mismatched package in this environment)",
        "remedies": [
            "install the missing package in the python that runs the server, or use the "
            "python of the environment where SGLang is installed",
        ],
    },
    {
        "id": "missing_binary",
        "patterns": [
            r"(?:^|: )(?:python3?|nohup|bash|sglang)[\w.]*: (?:command )?not found",
            r"^(?:nohup|bash): .*: No such file or directory",
            r"can't open file '.*': \[Errno 2\] No such file or directory",
            r"No such file or directory: '[^']*python[^']*'",
        ],
        "phase": "pre-exec",
        "priority": 86,
        "explanation": "the shell could not start the server: the python binary, a script or "
        "the log's folder does not exist",
        "remedies": [
            "use the full path of the python that has sglang installed "
            "(e.g. /opt/venv/bin/python3)",
            "create the log folder (mkdir -p) before launching",
        ],
    },
    {
        "id": "model_path_not_found",
        "patterns": [
            r"is not a local folder and is not a valid model identifier",
            r"Repository Not Found",
            r"RepositoryNotFoundError",
            r"HFValidationError",
            r"does not appear to have a file named config\.json",
            r"Can't load the configuration of '",
            r"Incorrect path_or_model_id",
            r"No such file or directory: '[^']*(?:config\.json|tokenizer|\.safetensors|/models?/)",
            r"(?:model|draft model) path .* does not exist",
        ],
        "phase": "pre-exec",
        "priority": 84,
        "config_keys": ("model_path", "draft_model_path"),  # what can explain it (compare)
        "explanation": "the model (or draft model) path given to the server does not exist or "
        "is not a model folder",
        "remedies": [
            "check --model-path / --speculative-draft-model-path: the folder must exist on the "
            "GPU host and contain config.json",
        ],
    },
    {
        "id": "port_in_use",
        "patterns": [
            r"error while attempting to bind on address .*address already in use",
            r"\[Errno 98\] (?:error while attempting to bind|Address already in use)",
            r"^port \d+ is in use\. Waiting",
            r"^Port is already in use\.",
            r"at \d+ is not available in \d+ seconds",
            r"(?:EADDRINUSE|address already in use)",
            r"The server socket has failed to (?:listen|bind)",
        ],
        "phase": "cleanup",
        "priority": 87,
        "config_matters": False,  # the host, not the configuration: no config diff
        "explanation": "a port the server needs is still held, usually by the previous server "
        "that the cleanup did not stop",
        "remedies": [
            "stop the old server first (fuser -k 30000/tcp, or kill the PID that "
            "`ss -ltnp | grep 30000` shows), or launch on another --port",
        ],
    },
    {
        "id": "orphan_gpu_process",
        "patterns": [
            # SGLang's own text; its head is enough (the rest may be wrapped or cut)
            r"The memory capacity is unbalanced",
            r"CUDA-capable device\(s\) is/are busy or unavailable",
            r"cudaErrorDevicesUnavailable",
            r"GPU \d+ .*(?:occupied|in use) by (?:another|other) process",
        ],
        "phase": "cleanup",
        "priority": 86,
        "config_matters": False,  # the host, not the configuration: no config diff
        "host_evidence": True,  # what nvidia-smi / fuser / ps output showing GPU holders proves
        "holders_explain": True,
        "explanation": "GPU memory is held by another process (often the previous server that "
        "was not fully killed)",
        "remedies": [
            "free the GPUs before launching: `nvidia-smi --query-compute-apps=pid,used_memory "
            "--format=csv`, then kill those PIDs (or `fuser -k /dev/nvidia*`) and wait until "
            "memory.used is near 0",
        ],
    },
    {
        "id": "kv_pool_oom",
        "patterns": [
            r"Not enough memory\. Please try to increase --mem-fraction-static",
            r"Memory pool size is too small",
            r"increase --mem-fraction-static",
        ],
        "phase": "load",
        "priority": 82,
        "holders_explain": True,  # GPU holders (host evidence) explain it
        "config_keys": (
            "mem_fraction",
            "tp_size",
            "model_path",
            "draft_model_path",
        ),  # what can explain it (compare)
        "explanation": "after loading the weights there was not enough GPU memory left for "
        "the KV cache pool (--mem-fraction-static too low for this model and tp size)",
        "remedies": [
            "raise --mem-fraction-static (e.g. {mem_up})",
            "spread the model over more GPUs (--tp-size)",
            "lower --context-length (e.g. {context_down})",
        ],
    },
    {
        "id": "capture_failed",
        "patterns": [
            r"Capture (?:cuda|CUDA|CPU|cpu|prefill CUDA) graph failed: ?(?P<cause>.*)",
            r"cudaErrorStreamCapture\w+",
            r"operation not permitted when stream is capturing",
            r"operation failed due to a previous error during capture",
        ],
        "phase": "capture",
        "priority": 92,
        "causes": True,  # its text names a cause inside (CAPTURE_CAUSES)
        "inside_capture": True,  # another signature becomes this one only inside a capture
        "explanation": "CUDA-graph capture failed ({cause})",
        "remedies": [
            "see the cause-specific remedies below",
        ],
    },
    {
        "id": "warmup_failed",
        "patterns": [r"Initialization failed\. warmup error", r"warmup (?:request )?failed"],
        "phase": "capture",
        "priority": 89,
        "explanation": "the server came up but its warm-up request failed, so it shut itself down",
        "remedies": [
            "read the warmup error above it; retry with --skip-server-warmup to see whether the "
            "first real request fails the same way",
        ],
    },
    {
        "id": "weight_load_oom",
        "patterns": [r"CUDA out of memory", r"OutOfMemoryError", r"CUDA error: out of memory"],
        "frames": r"load_model|load_weights|weight_loader|model_loader|_initialize_model|"
        r"get_model|create_weights|make_layers|DefaultModelLoader",
        "phase": "load",
        "priority": 81,
        "holders_explain": True,
        # an OOM in the KV/memory pool's frames is the pool's, not the weights'
        "refine_frames": [
            (r"init_memory_pool|profile_max_num_token|init_kv_cache|memory_pool", "kv_pool_oom")
        ],
        "config_keys": (
            "tp_size",
            "model_path",
            "draft_model_path",
        ),  # what can explain it (compare)
        "explanation": "the GPU ran out of memory while loading the model weights",
        "remedies": [
            "use more GPUs (--tp-size)",
            "use a quantized checkpoint, or free GPU memory held by other processes; "
            "mem_fraction_static does not help at this stage",
        ],
    },
    {
        "id": "nccl_timeout",
        "patterns": [
            r"Watchdog caught collective operation timeout",
            r"WorkNCCL\(.*\) ran for \d+ milliseconds before timing out",
            r"ProcessGroupNCCL.*(?:timeout|Timeout|timed out)",
            r"NCCL (?:communicator|collective).*timed? ?out",
        ],
        "phase": None,
        "hung": True,
        "priority": 78,
        "explanation": "a collective operation between GPUs did not finish in time: one rank "
        "stalled or died, and the others waited for it",
        "remedies": [
            "look for the rank that failed first (its own traceback above)",
            "for slow startups raise --dist-timeout (e.g. {dist_up})",
        ],
    },
    {
        "id": "nccl_error",
        "patterns": [
            r"NCCL error",
            r"nccl(?:Unhandled|System|Internal|InvalidUsage|RemoteError)",
            r"DistBackendError",
            r"ncclCommInitRank failed",
        ],
        "phase": None,
        "priority": 77,
        "explanation": "NCCL (the GPU-to-GPU communication library) failed",
        "remedies": [
            "rerun with NCCL_DEBUG=INFO to see which rank and transport failed; check that no "
            "other job uses the GPUs, and try NCCL_P2P_DISABLE=1",
            "try --disable-custom-all-reduce",
        ],
    },
    {
        "id": "illegal_memory_access",
        "patterns": [
            r"an illegal memory access was encountered",
            r"cudaErrorIllegalAddress",
            r"CUDA_ERROR_ILLEGAL_ADDRESS",
            r"illegal memory access",
        ],
        "phase": "runtime",
        "priority": 76,
        "refine": {"capture": "capture_failed"},  # the phase the rules settled on -> signature
        "explanation": "a GPU kernel read or wrote outside its memory (a kernel bug, often in "
        "the attention backend or a speculative-decoding path)",
        "remedies": [
            "try another --attention-backend (e.g. {attn_other})",
            "try smaller speculative settings: --speculative-eagle-topk 1",
            "rule out the prefix cache: --disable-radix-cache",
            "rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel",
        ],
    },
    {
        "id": "device_side_assert",
        "patterns": [
            r"device-side assert(?:ion)? triggered",
            r"cudaErrorAssert",
            r"Assertion `.*` failed\.",
        ],
        "phase": "runtime",
        "priority": 75,
        "refine": {"capture": "capture_failed"},
        "config_keys": (
            "model_path",
            "draft_model_path",
            "spec_algorithm",
        ),  # what can explain it (compare)
        "explanation": "a GPU kernel's assertion failed (usually an out-of-range index, e.g. a "
        "token id outside the vocabulary or a draft/target vocabulary mismatch)",
        "remedies": [
            "check that the draft model matches the target (same vocabulary / hot-token map); "
            "rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel",
        ],
    },
    {
        "id": "watchdog_timeout",
        "patterns": [r"(?:\w+ watchdog timeout|Watchdog timeout) \(self\.watchdog_timeout="],
        "phase": "runtime",
        "hung": True,
        "priority": 79,
        "explanation": "the scheduler stopped making progress on a running batch for "
        "--watchdog-timeout seconds, so the watchdog killed the server",
        "remedies": [
            "look at the stack dump before it for where it hung",
            "if the step is only slow (huge batch, first compile), raise --watchdog-timeout "
            "(e.g. {watchdog_up})",
        ],
    },
    {
        "id": "detokenizer_heartbeat",
        "patterns": [
            r"Health check failed\. Server couldn't get a response from detokenizer",
            r"^DetokenizerManager hit an exception",
            r"DetokenizerManager.*(?:exception|died|dead)",
        ],
        "phase": "runtime",
        "hung": True,
        "raised_not_hung": True,  # with a traceback it raised (it did not hang)
        "priority": 74,
        "explanation": "the server stopped answering: the detokenizer sent nothing back for the "
        "health-check interval (the scheduler is stuck or dead)",
        "remedies": [
            "look for a scheduler error or watchdog dump around this time; if the server is only "
            "overloaded, raise SGLANG_HEALTH_CHECK_TIMEOUT",
        ],
    },
    {
        "id": "segfault",
        "patterns": [r"^Fatal Python error: (?:Segmentation fault|Aborted|Bus error)"],
        "phase": None,
        "priority": 72,
        "explanation": "a native crash (segmentation fault/abort) inside a compiled extension",
        "remedies": [
            "check for mismatched torch/CUDA/kernel packages; the `Current thread` stack "
            "shows which library crashed",
        ],
    },
    {
        "id": "disk_full",
        "patterns": [
            r"No space left on device",
            r"\[Errno 28\]",
            r"\bENOSPC\b",
        ],
        "phase": None,
        "phase_from": "stage",
        "priority": 73,
        "config_matters": False,  # the host, not the configuration: no config diff
        "explanation": "a filesystem on the host is full (ENOSPC): a write of the log, a cache "
        "(Triton, torch.compile, CUDA graphs) or a download failed",
        "remedies": [
            "free space where the error points (`df -h`; `du -xsh ~/.cache/* /tmp/* | sort -h`), "
            "or move the caches (TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, HF_HOME) to a larger "
            "disk; forensics launch refuses to start below the recipe's min_free_mb",
        ],
    },
    {
        "id": "cuda_oom",
        "patterns": [r"CUDA out of memory", r"OutOfMemoryError", r"CUDA error: out of memory"],
        "phase": None,
        "priority": 70,
        "holders_explain": True,
        "refine": {"load": "weight_load_oom", "capture": "capture_failed"},
        "config_keys": (
            "mem_fraction",
            "cuda_graph_max_bs",
            "tp_size",
            "model_path",
            "draft_model_path",
            "num_draft_tokens",
            "topk",
        ),  # what can explain it (compare)
        "explanation": "the GPU ran out of memory",
        "remedies": [
            "lower --mem-fraction-static (e.g. {mem_down}) to leave room for activations",
            "lower --max-running-requests (e.g. {running_down})",
            "lower --chunked-prefill-size (e.g. {chunk_down}): smaller prefill activations",
            "lower --cuda-graph-max-bs (e.g. {graph_bs_down}; --cuda-graph-max-bs-decode on "
            "SGLang >= 0.5.14)",
        ],
    },
    {
        "id": "scheduler_died",
        "patterns": [
            r"Rank \d+ scheduler (?:is dead|died during initialization)",
            r"^Exit code: -?\d+",
            r"^Subprocess .+ \(pid=\d+\) crashed with exit code -?\d+",
            r"^Child process unexpectedly failed with",
        ],
        "phase": None,
        "phase_from": "stage",  # raised in the launcher's frames: the stage says where
        "priority": 40,
        "reads_exit_code": True,  # the log's exit code says who killed it ({killer})
        "explanation": "a scheduler process died without logging a Python error{killer}",
        "remedies": [
            "check the kernel log on the GPU host: `dmesg -T | grep -iE 'oom|killed process|xid'`",
        ],
    },
]
