"""Remedies fitted to the run's own settings, and the catalog as rows.

Every remedy the tool shows (catalog rows, capture causes, the classifier's hung-stage steps,
the launcher's fix) goes through :func:`fit` with the run's settings (:func:`run_settings`:
its ``server_args``, else its configuration columns). ``SETTINGS`` is the one table of what a
remedy line can suggest and how the run contradicts it: a row names the SGLang setting
(``key``, as ``server_args`` spells it), the suggestion in the text (``says``), when the run's
own value makes it wrong (``unfit``), what to say instead (``instead``; empty: leave the line
out) and the value to suggest for its ``{id}`` placeholder (``example``). A remedy line makes
one suggestion (a test holds the catalog to it), so a line that does not fit is replaced whole.
The ``instead`` texts name settings as ``key=value``, never as a flag, so fitting is idempotent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from forensics.signatures.catalog import CATALOG


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _le(limit: float) -> Callable[[Any, dict[str, Any]], bool]:
    return lambda cur, s: (n := _num(cur)) is not None and n <= limit + 1e-9


def _ge(limit: float) -> Callable[[Any, dict[str, Any]], bool]:
    return lambda cur, s: (n := _num(cur)) is not None and n >= limit - 1e-9


def _is(value: Any) -> Callable[[Any, dict[str, Any]], bool]:
    return lambda cur, s: cur is value if isinstance(value, bool) else cur == value


def _never(cur: Any, s: dict[str, Any]) -> bool:
    return False


def _graphs_off(cur: Any, s: dict[str, Any]) -> bool:
    return s.get("disable_cuda_graph") is True


def _int_text(v: float) -> str:
    return str(int(v))


NODE_GPUS = 8  # the GPUs of the largest single node: tp beyond it needs more nodes


@dataclass(frozen=True)
class Setting:
    """What a remedy line suggests about one setting, and how the run's value contradicts it."""

    id: str  # also the ``{id}`` placeholder that ``example`` fills
    key: str  # the setting as server_args names it ("" for none: the row only reads others)
    says: str  # regex: the suggestion in a remedy line
    unfit: Callable[[Any, dict[str, Any]], bool]  # (the run's value, all settings) -> wrong
    instead: str = ""  # said instead ({cur}: the run's value, any other key); "": left out
    example: Callable[[float], str] | None = None  # the {id} value from the run's number
    generic: str = ""  # the {id} text when the run's value is not known

    def __post_init__(self) -> None:
        object.__setattr__(self, "rx", re.compile(self.says))

    def matches(self, line: str) -> bool:
        return bool(self.rx.search(line))  # type: ignore[attr-defined]


# Most specific first: the first row that a line's suggestion contradicts decides the line.
SETTINGS: tuple[Setting, ...] = (
    Setting(
        "mem_up",
        "mem_fraction_static",
        r"\braise --mem-fraction-static\b",
        _ge(0.95),
        instead="mem_fraction_static is already {cur} (0.95 is the most worth trying): free "
        "GPU memory that other processes hold, or spread the model over more GPUs",
        example=lambda v: f"--mem-fraction-static {min(v + 0.05, 0.95):.2f}",
        generic="+0.05 over the current value",
    ),
    Setting(
        "mem_down",
        "mem_fraction_static",
        r"\blower --mem-fraction-static\b",
        _le(0.5),
        instead="mem_fraction_static is already {cur}: lower it no further (the KV cache "
        "would starve); make the batches smaller instead",
        example=lambda v: f"--mem-fraction-static {max(v - 0.05, 0.5):.2f}",
        generic="-0.05 under the current value",
    ),
    Setting(
        "not_speculative",
        "speculative_algorithm",
        r"--speculative-(?:eagle-topk|num-steps|num-draft-tokens)\b",
        lambda cur, s: "speculative_algorithm" in s and not cur,
        instead="",  # the run decodes without a draft model: speculative settings do not apply
    ),
    Setting(
        "topk_1",
        "speculative_eagle_topk",
        r"--speculative-eagle-topk 1\b",
        _is(1),
        instead="speculative_eagle_topk is already 1 in this run (a chain draft), so the "
        "draft tree is not the cause",
    ),
    Setting(
        "page_1",
        "page_size",
        r"--page-size 1\b",
        _is(1),
        instead="page_size is already 1 in this run",
    ),
    Setting(
        "attn_other",
        "attention_backend",
        r"another --attention-backend",
        _never,  # its {attn_other} names backends other than the run's (_values)
        generic="fa3 or triton",
    ),
    Setting(
        "no_cuda_graph",
        "disable_cuda_graph",
        r"--disable-cuda-graph\b",
        _is(True),
        instead="CUDA graphs are already off in this run (disable_cuda_graph=True): the "
        "failure does not come from graph capture",
    ),
    Setting(
        "graph_bs_no_graphs",
        "cuda_graph_max_bs",
        r"\b(?:lower|smaller) --cuda-graph-max-bs|--cuda-graph-max-bs \d",
        _graphs_off,
        instead="CUDA graphs are off in this run (disable_cuda_graph=True): cuda_graph_max_bs "
        "does not apply",
    ),
    Setting(
        "graph_bs_down",
        "cuda_graph_max_bs",
        r"\b(?:lower|smaller) --cuda-graph-max-bs|--cuda-graph-max-bs \d",
        _le(1),
        instead="cuda_graph_max_bs is already {cur}: it cannot go lower",
        example=lambda v: _int_text(max(1, min(16, v // 2))),
        generic="16",
    ),
    Setting(
        "chunk_down",
        "chunked_prefill_size",
        r"\blower --chunked-prefill-size\b",
        lambda cur, s: (n := _num(cur)) is not None and 0 < n <= 512,
        instead="chunked_prefill_size is already {cur}: smaller prefill chunks free little",
        example=lambda v: _int_text(max(512, v // 2) if v > 0 else 4096),
        generic="4096",
    ),
    Setting(
        "running_down",
        "max_running_requests",
        r"\blower --max-running-requests\b",
        _le(1),
        instead="max_running_requests is already {cur}: one request at a time",
        example=lambda v: _int_text(max(1, v // 2)),
        generic="half of what the log prints",
    ),
    Setting(
        "context_down",
        "context_length",
        r"\blower --context-length\b",
        _le(4096),
        instead="context_length is already {cur}: shorter contexts will not save enough",
        example=lambda v: _int_text(max(2048, v // 2)),
        generic="half of the model's",
    ),
    Setting(
        "tp_up",
        "tp_size",
        r"--tp-size\b|\bmore GPUs\b",
        lambda cur, s: _ge(_num(s.get("gpu_count")) or NODE_GPUS)(cur, s),
        instead="tp_size is already {cur} (every GPU of the node): use a quantized "
        "checkpoint or more nodes",
    ),
    Setting(
        "quantized",
        "quantization",
        r"\ba quantized checkpoint\b",
        lambda cur, s: bool(cur),
        instead="the checkpoint is already quantized (quantization={cur}): free the GPU memory "
        "other processes hold",
    ),
    Setting(
        "dist_up",
        "dist_timeout",
        r"\braise --dist-timeout\b",
        _never,
        example=lambda v: _int_text(max(3600, 2 * v)),
        generic="3600",
    ),
    Setting(
        "watchdog_up",
        "watchdog_timeout",
        r"\braise --watchdog-timeout\b",
        _never,
        example=lambda v: _int_text(max(600, 2 * v)),
        generic="600",
    ),
    Setting(
        "warmup_skip",
        "skip_server_warmup",
        r"--skip-server-warmup\b",
        _is(True),
        instead="the warm-up was already skipped (skip_server_warmup=True): the request that "
        "failed was a real one",
    ),
    Setting(
        "custom_ar_off",
        "disable_custom_all_reduce",
        r"--disable-custom-all-reduce\b",
        _is(True),
        instead="custom all-reduce is already off in this run (disable_custom_all_reduce=True)",
    ),
    Setting(
        "radix_off",
        "disable_radix_cache",
        r"--disable-radix-cache\b",
        _is(True),
        instead="the prefix cache is already off in this run (disable_radix_cache=True)",
    ),
    Setting(
        "log_folder",
        "log_path",  # not a server arg: the log that was read (so its folder exists)
        r"\bcreate the log folder\b",
        lambda cur, s: bool(cur),
        instead="",
    ),
)
BY_SETTING = {s.id: s for s in SETTINGS}
ATTENTION_BACKENDS = ("fa3", "triton", "flashinfer")  # the usual alternatives, in that order

# The configuration columns (forensics.runs) by their server_args name: what a run without
# a stored server_args line still says about its settings.
FROM_CONFIG: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "mem_fraction": ("mem_fraction_static", lambda v: v),
    "spec_algorithm": ("speculative_algorithm", lambda v: v),
    "topk": ("speculative_eagle_topk", lambda v: v),
    "num_steps": ("speculative_num_steps", lambda v: v),
    "num_draft_tokens": ("speculative_num_draft_tokens", lambda v: v),
    "cuda_graph": ("disable_cuda_graph", lambda v: not v if isinstance(v, bool) else None),
    "cuda_graph_max_bs": ("cuda_graph_max_bs", lambda v: v),
    "tp_size": ("tp_size", lambda v: v),
    "dp_size": ("dp_size", lambda v: v),
}


def run_settings(
    config: dict[str, Any] | None = None,
    server_args: str | dict[str, Any] | None = None,
    **known: Any,
) -> dict[str, Any]:
    """A run's settings by their server_args names: the ``server_args`` line (JSON text or
    dict: every key, None values included, since SGLang prints them all), else the
    configuration columns that are not null; ``known`` adds facts (``log_path``,
    ``gpu_count``). A key absent from the result is not known (no remedy is judged on it)."""
    out: dict[str, Any] = {}
    for col, (key, conv) in FROM_CONFIG.items():
        v = (config or {}).get(col)
        if v is not None and conv(v) is not None:
            out[key] = conv(v)
    args = server_args
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            args = None
    if isinstance(args, dict):
        out.update(args)
        if out.get("cuda_graph_max_bs") is None and args.get("cuda_graph_max_bs_decode"):
            out["cuda_graph_max_bs"] = args["cuda_graph_max_bs_decode"]
        if args.get("cuda_graph_backend_decode") == "disabled":
            out["disable_cuda_graph"] = True
    out.update({k: v for k, v in known.items() if v is not None})
    return out


def settings_from_text(text: str, **known: Any) -> dict[str, Any]:
    """The settings a log's text states on its last ``server_args=`` line (launcher)."""
    from forensics_parsers.sglang import parse_server_args

    found = re.findall(r"server_args=(ServerArgs\(.*|\{.*)$", text, re.M)
    return run_settings(server_args=parse_server_args(found[-1]) if found else None, **known)


def _values(settings: dict[str, Any]) -> dict[str, str]:
    """The ``{id}`` placeholder values from the run's settings (generic when not known)."""
    out: dict[str, str] = {}
    for row in SETTINGS:
        if row.example is None or row.id in out:
            continue
        cur = _num(settings.get(row.key))
        out[row.id] = row.example(cur) if cur is not None else row.generic
    cur_backend = settings.get("attention_backend")
    others = [b for b in ATTENTION_BACKENDS if b != cur_backend][:2]
    out["attn_other"] = " or ".join(others)
    return out


def unfit_row(line: str, settings: dict[str, Any]) -> Setting | None:
    """The first SETTINGS row whose suggestion in ``line`` the run's value contradicts."""
    for row in SETTINGS:
        if row.matches(line) and row.unfit(settings.get(row.key), settings):
            return row
    return None


def fit(remedies: Iterable[str], settings: dict[str, Any] | None = None) -> list[str]:
    """The remedies that fit the run, rendered: a line whose suggestion the run's own
    settings contradict is replaced by its row's ``instead`` (or left out); placeholders are
    filled from the run's values; repeated lines are said once."""
    settings = settings or {}
    values = _values(settings)
    out: list[str] = []
    for line in remedies:
        row = unfit_row(line, settings)
        if row is not None:
            cur = settings.get(row.key)
            line = render(row.instead, **{**_str_keys(settings), "cur": cur})
        else:
            line = render(line, **values)
        if line and line not in out:
            out.append(line)
    return out


def _str_keys(settings: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if isinstance(k, str) and k.isidentifier()}


def render(text: str, **values: Any) -> str:
    """Fill ``{mem_up}``-style placeholders; unknown ones render as a generic phrase."""
    generic = {r.id: r.generic for r in SETTINGS if r.generic}

    class _D(dict):
        def __missing__(self, key: str) -> str:
            return {**generic, "cause": "see the error", "killer": ""}.get(key, "")

    try:
        return text.format_map(_D(values))
    except (ValueError, IndexError, AttributeError):
        return text


def catalog_rows() -> list[dict[str, Any]]:
    """The catalog as plain rows (for docs and `--json`)."""
    return [
        {
            "id": e["id"],
            "phase": e.get("phase"),
            "hung": e.get("hung", False),
            "patterns": e["patterns"],
            "explanation": e["explanation"],
            "remedies": e["remedies"],
        }
        for e in CATALOG
    ]
