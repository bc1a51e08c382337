"""Frames of the load phase: distributed init, weight loading, the KV/memory pool, the attention backend's buffers, worker and model-runner construction (rows of forensics.frames.FRAMES)."""

from __future__ import annotations

from typing import Any

LOAD: list[dict[str, Any]] = [
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
]
