"""The ``server_args=`` line: ``ServerArgs(...)`` repr or dict repr -> dict -> run configuration."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from forensics_parsers.secrets import SECRET_KEYS, redact_value


def _split_top(s: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside quotes and brackets."""
    out, depth, buf, quote, esc = [], 0, [], "", False
    for ch in s:
        if quote:
            buf.append(ch)
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>" and depth > 0:
            depth -= 1
        elif ch == sep and depth == 0:
            out.append("".join(buf))
            buf = []
            continue
        buf.append(ch)
    if buf:
        out.append("".join(buf))
    return out


def _literal(v: str) -> Any:
    v = v.strip()
    try:
        return ast.literal_eval(v)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return v


def parse_server_args(text: str) -> dict[str, Any]:
    """``ServerArgs(a=1, b='x', ...)`` or ``{'a': 1, ...}`` -> dict (tolerant of cut lines)."""
    text = text.strip()
    out: dict[str, Any] = {}
    if text.startswith("{"):
        body = text[1:-1] if text.endswith("}") else text[1:]
        for item in _split_top(body):
            k, sep, v = item.partition(":")
            if not sep:
                continue
            key = _literal(k)
            if isinstance(key, str):
                out[key] = _literal(v)
    else:
        body = text[len("ServerArgs(") :]
        if body.endswith(")"):
            body = body[:-1]
        for item in _split_top(body):
            k, sep, v = item.partition("=")
            if sep and re.fullmatch(r"\s*\w+\s*", k):
                out[k.strip()] = _literal(v)
    for k in list(out):
        if SECRET_KEYS.match(k) and out[k] not in (None, "", False):
            out[k] = redact_value(str(out[k]))  # (idempotent: the text is redacted already)
    return out


def config_from_server_args(args: dict[str, Any]) -> dict[str, Any]:
    def num(key: str, *alts: str) -> Any:
        for k in (key, *alts):
            v = args.get(k)
            if isinstance(v, bool):
                continue
            if isinstance(v, int | float):
                return v
        return None

    algo = args.get("speculative_algorithm")
    cg = args.get("disable_cuda_graph")
    backend = args.get("cuda_graph_backend_decode")
    cuda_graph = None
    if isinstance(cg, bool):
        cuda_graph = not cg
    if backend == "disabled":
        cuda_graph = False
    return {
        "model_path": args.get("model_path"),
        "draft_model_path": args.get("speculative_draft_model_path"),
        "spec_algorithm": algo if isinstance(algo, str) else None,
        "num_steps": num("speculative_num_steps"),
        "topk": num("speculative_eagle_topk"),
        "num_draft_tokens": num("speculative_num_draft_tokens"),
        "cuda_graph": cuda_graph,
        "cuda_graph_max_bs": num("cuda_graph_max_bs", "cuda_graph_max_bs_decode"),
        "tp_size": num("tp_size"),
        "dp_size": num("dp_size"),
        "port": num("port"),
        "host": args.get("host") if isinstance(args.get("host"), str) else None,
        "mem_fraction": num("mem_fraction_static"),
        "decode_log_interval": num("decode_log_interval"),
    }


def configure(run: dict[str, Any], text: str) -> None:
    """A run's configuration from the text of its ``server_args=`` line."""
    args = parse_server_args(text)
    run["has_args"] = True
    run["config"] = config_from_server_args(args)
    run["config_source"] = "server_args"
    run["server_args"] = json.dumps(args, default=str, sort_keys=True, ensure_ascii=False)[:200_000]
