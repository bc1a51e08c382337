"""Frames of the pre-exec phase: argument parsing and validation, config/tokenizer lookup, the launcher itself (rows of forensics.frames.FRAMES)."""

from __future__ import annotations

from typing import Any

PRE_EXEC: list[dict[str, Any]] = [
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
