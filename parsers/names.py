"""Configuration from a log's file name, for logs that carry no ``server_args`` line.

The convention of the seed session: every launch writes its own log, named after its
configuration, e.g. ``sglang_eagle3_cg_2step.log``. The name is split on ``_``, ``-`` and
``.``; each token is matched against the table below (first match wins). A user pattern (a
regex with named groups among the keys of ``NAME_FIELDS``) can replace the table.

| token | meaning |
| --- | --- |
| ``cg`` / ``nocg`` | CUDA graphs on / off |
| ``Nstep``, ``Nsteps``, ``stepN`` | speculative_num_steps = N |
| ``topkN``, ``Ntopk``, ``kN`` | speculative_eagle_topk = N |
| ``Ndt``, ``dtN`` | speculative_num_draft_tokens = N |
| ``bsN`` | cuda_graph_max_bs = N |
| ``tpN`` | tp_size = N |
| ``eagle``, ``eagle3``, ``mtp``/``nextn`` | speculative algorithm |
| ``baseline``, ``nospec`` | no speculative decoding |
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

# Rules as data: (token regex, field, value: a constant or None to take group 1 as int).
NAME_RULES: list[tuple[str, str, Any]] = [
    (r"nocg|nographs?|nocudagraph", "cuda_graph", False),
    (r"cg|cudagraph|graphs?", "cuda_graph", True),
    (r"(\d+)steps?", "num_steps", None),
    (r"steps?(\d+)", "num_steps", None),
    (r"topk(\d+)", "topk", None),
    (r"(\d+)topk", "topk", None),
    (r"k(\d+)", "topk", None),
    (r"(\d+)dt", "num_draft_tokens", None),
    (r"dt(\d+)", "num_draft_tokens", None),
    (r"bs(\d+)", "cuda_graph_max_bs", None),
    (r"tp(\d+)", "tp_size", None),
    (r"eagle3", "spec_algorithm", "EAGLE3"),
    (r"eagle", "spec_algorithm", "EAGLE"),
    (r"mtp|nextn", "spec_algorithm", "EAGLE"),
    (r"baseline|nospec|nonspec|plain", "spec_algorithm", "none"),
]
_COMPILED = [(re.compile(rf"^(?:{pat})$", re.I), fld, val) for pat, fld, val in NAME_RULES]

NAME_FIELDS = (
    "cuda_graph",
    "num_steps",
    "topk",
    "num_draft_tokens",
    "cuda_graph_max_bs",
    "tp_size",
    "spec_algorithm",
)


def config_from_name(path: str, pattern: str | None = None) -> dict[str, Any]:
    """Configuration implied by a log file's name (only the fields it names)."""
    stem = PurePosixPath(path).name
    for suffix in (".gz", ".zst", ".log", ".txt", ".out", ".err"):
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
    if pattern:
        m = re.search(pattern, stem)
        if not m:
            return {}
        out: dict[str, Any] = {}
        for key, val in m.groupdict().items():
            if val is None or key not in NAME_FIELDS:
                continue
            if key == "cuda_graph":
                out[key] = val.lower() not in ("0", "no", "false", "nocg", "off")
            elif key == "spec_algorithm":
                out[key] = val.upper()
            else:
                out[key] = int(val)
        return out
    out = {}
    for token in re.split(r"[_\-.]+", stem):
        for rx, fld, val in _COMPILED:
            m = rx.match(token)
            if not m:
                continue
            if fld not in out:
                out[fld] = int(m.group(1)) if val is None else val
            break
    if out.get("spec_algorithm") == "none":
        out["spec_algorithm"] = None
        out["no_spec"] = True
    return out


# The inverse, for `forensics launch -- FLAGS` without --name: (flag(s), token template).
ALGO_TOKENS = {"EAGLE3": "eagle3", "EAGLE": "eagle", "NEXTN": "mtp", "MTP": "mtp"}
FLAG_TOKENS: list[tuple[tuple[str, ...], str]] = [
    (("--speculative-num-steps",), "{}step"),
    (("--speculative-eagle-topk",), "topk{}"),
    (("--speculative-num-draft-tokens",), "{}dt"),
    (("--tensor-parallel-size", "--tp-size", "--tp"), "tp{}"),
]


def _flag_value(argv: list[str], names: tuple[str, ...]) -> str | None:
    value = None
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
    return value  # the last one wins, as with argparse


def name_from_flags(argv: list[str]) -> str:
    """A log/run name in the convention above from SGLang server flags, e.g.
    ``sglang_eagle3_cg_3step_topk4_5dt`` (``config_from_name`` reads it back).

    Without a speculative algorithm: ``sglang_baseline`` (plus ``tpN`` when N > 1). An
    algorithm outside the table is lower-cased into the name (letters and digits only).
    """
    algo = _flag_value(argv, ("--speculative-algorithm", "--speculative-algo"))
    tokens = ["sglang"]
    if not algo or algo.upper() == "NONE":
        tokens.append("baseline")
    else:
        tokens.append(
            ALGO_TOKENS.get(algo.upper()) or re.sub(r"[^a-z0-9]", "", algo.lower()) or "spec"
        )
        tokens.append("nocg" if "--disable-cuda-graph" in argv else "cg")
    for flags, template in FLAG_TOKENS:
        value = _flag_value(argv, flags)
        if value is None or not value.isdigit():
            continue
        if template == "tp{}" and int(value) <= 1:
            continue
        if tokens[1] == "baseline" and template != "tp{}":
            continue
        tokens.append(template.format(int(value)))
    return "_".join(tokens)
