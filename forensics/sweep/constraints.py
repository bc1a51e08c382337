"""SGLang's own rules for impossible or rewritten speculative configurations, as data.

Each row is taken from SGLang 0.5.23's server-argument checks (``sglang/srt/arg_groups/
speculative_hook.py``) or from the code that would fail at startup (``sglang/srt/speculative/
eagle_utils.py``); ``source`` names the place. ``action`` says what the sweep does:

- ``skip``: SGLang refuses it (``ValueError``/``AssertionError`` at startup, or a crash in the
  first forward): the config is never launched, its reason is printed with the plan;
- ``adjust``: SGLang rewrites a value and goes on (with a warning); the sweep rewrites it the
  same way, so two configs that SGLang would run identically are run once (the second is
  skipped as a duplicate of the first).

A config is a dict of SGLang server-argument names (``speculative_num_steps``, ...) to values,
with ``None`` for flags not given. Add a rule by adding a row: what it is about (``when``),
whether it holds only for the EAGLE family (``eagle``) and only when topk is not 1
(``needs_topk1``: settings that make the draft a chain), and its reason, a template over the
config's values (:func:`_values`: the config's keys, and ``steps``, ``topk``, ``ndt``,
``candidates``, ``capacity``, ``chain``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

Config = dict[str, Any]


def _int(cfg: Config, key: str) -> int | None:
    v = cfg.get(key)
    return None if v is None or isinstance(v, bool) else int(v)


def _spec(cfg: Config) -> bool:
    algo = cfg.get("speculative_algorithm")
    return bool(algo) and str(algo).upper() not in ("NONE", "")


def _eagle(cfg: Config) -> bool:
    return _spec(cfg) and str(cfg["speculative_algorithm"]).upper() in (
        "EAGLE",
        "EAGLE3",
        "NEXTN",
        "STANDALONE",
    )


def _tree_capacity(cfg: Config) -> int | None:
    """How many draft tokens the EAGLE tree can offer: topk + (steps - 1) * topk**2."""
    steps, topk = _int(cfg, "speculative_num_steps"), _int(cfg, "speculative_eagle_topk")
    if steps is None or topk is None:
        return None
    return topk + (steps - 1) * topk * topk


def _values(cfg: Config) -> dict[str, Any]:
    """What a reason template may name: the config's keys and the derived figures."""
    steps = _int(cfg, "speculative_num_steps")
    ndt = _int(cfg, "speculative_num_draft_tokens")
    return {
        **cfg,
        "steps": steps,
        "topk": _int(cfg, "speculative_eagle_topk"),
        "ndt": ndt,
        "candidates": None if ndt is None else ndt - 1,  # draft tokens besides the root
        "capacity": _tree_capacity(cfg),
        "chain": None if steps is None else steps + 1,  # a topk-1 draft: one token a step
    }


@dataclasses.dataclass(frozen=True)
class Constraint:
    id: str
    action: str  # skip | adjust
    when: Callable[[dict[str, Any]], bool]  # over _values(config)
    why: str  # a template over _values(config)
    source: str
    eagle: bool = True  # only for the EAGLE family (EAGLE, EAGLE3, NEXTN, STANDALONE)
    needs_topk1: bool = False  # fires only when topk is given and is not 1
    adjust: Callable[[dict[str, Any]], Config] | None = None  # over _values(config)

    def applies(self, cfg: Config) -> bool:
        if self.eagle and not _eagle(cfg):
            return False
        v = _values(cfg)
        if self.needs_topk1 and (v["topk"] or 1) == 1:
            return False
        return bool(self.when(v))

    def reason(self, cfg: Config) -> str:
        return self.why.format_map(_values(cfg))

    def adjusted(self, cfg: Config) -> Config:
        return {**cfg, **self.adjust(_values(cfg))} if self.adjust else cfg


CONSTRAINTS: tuple[Constraint, ...] = (
    Constraint(
        id="topk-without-steps",
        action="skip",
        when=lambda v: v["steps"] is None and (v["topk"] is not None or v["ndt"] is not None),
        why="--speculative-eagle-topk/--speculative-num-draft-tokens without "
        "--speculative-num-steps: SGLang asserts they are unset when it picks the steps "
        "itself (AssertionError at startup)",
        source="speculative_hook.py _handle_eagle_family (auto params assert)",
    ),
    Constraint(
        id="draft-tokens-exceed-tree",
        action="skip",
        when=lambda v: (
            v["ndt"] is not None
            and v["capacity"] is not None
            and v["candidates"] > v["capacity"]
            and v["topk"] != 1
        ),
        why="num_draft_tokens {ndt} needs {candidates} candidates but {steps} steps of topk "
        "{topk} offer {capacity} (topk + (steps-1)*topk^2): torch.topk fails with 'selected "
        "index k out of range' in the first forward (CUDA-graph capture)",
        source="eagle_utils.py organize_draft_results (torch.topk(score_list, ndt - 1))",
    ),
    Constraint(
        id="topk1-sets-draft-tokens",
        action="adjust",
        when=lambda v: v["topk"] == 1 and v["steps"] is not None and v["ndt"] != v["chain"],
        why="topk 1 makes the draft a chain: SGLang sets num_draft_tokens to num_steps + 1 = "
        "{chain} (warning 'speculative_num_draft_tokens is adjusted to "
        "speculative_num_steps + 1')",
        source="speculative_hook.py _handle_eagle_family",
        adjust=lambda v: {"speculative_num_draft_tokens": v["chain"]},
    ),
    Constraint(
        id="rejection-sampling-needs-topk1",
        action="skip",
        when=lambda v: bool(v.get("speculative_use_rejection_sampling")),
        why="--speculative-use-rejection-sampling requires --speculative-eagle-topk=1 "
        "(ValueError at startup)",
        source="speculative_hook.py _handle_eagle_family",
        eagle=False,
        needs_topk1=True,
    ),
    Constraint(
        id="trtllm-mha-needs-topk1",
        action="skip",
        when=lambda v: v.get("attention_backend") == "trtllm_mha",
        why="trtllm_mha backend only supports topk = 1 for speculative decoding (ValueError)",
        source="speculative_hook.py _handle_eagle_family",
        needs_topk1=True,
    ),
    Constraint(
        id="paged-tree-backend",
        action="skip",
        when=lambda v: (
            (_int(v, "page_size") or 1) > 1
            and v.get("attention_backend") not in (None, "flashinfer", "fa3", "triton")
        ),
        why="topk > 1 with page_size {page_size} is only supported on flashinfer, fa3 and "
        "triton; attention_backend is {attention_backend} (ValueError)",
        source="speculative_hook.py _handle_eagle_family (_PAGE_TREE_SPEC_BACKENDS)",
        needs_topk1=True,
    ),
    Constraint(
        id="draft-model-needs-topk1",
        action="skip",
        when=lambda v: bool(v.get("drafter_topk1")),
        why="the sweep file marks this drafter as chain-only (drafter_topk1 = true, e.g. an "
        "MTP head or a DSA-DCP model: 'requires --speculative-eagle-topk 1'); topk {topk} is "
        "refused at startup",
        source="speculative_hook.py _handle_iquest_q1_mtp_draft, model_overrides/deepseek_v2.py",
        eagle=False,
        needs_topk1=True,
    ),
)


def check(cfg: Config) -> tuple[Config, list[tuple[Constraint, str]]]:
    """Apply the table: the config as SGLang would run it, and the rules that fired (in order).

    A ``skip`` rule that fires ends the check (the config is not run).
    """
    fired: list[tuple[Constraint, str]] = []
    cur = dict(cfg)
    for rule in CONSTRAINTS:
        if not rule.applies(cur):
            continue
        fired.append((rule, rule.reason(cur)))
        if rule.action == "skip":
            break
        cur = rule.adjusted(cur)
    return cur, fired


def rules_rows() -> list[dict[str, str]]:
    """The table for ``forensics sweep --rules`` and the docs."""
    return [{"id": r.id, "action": r.action, "source": r.source} for r in CONSTRAINTS]
