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
with ``None`` for flags not given. Add a rule by adding a row.
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


@dataclasses.dataclass(frozen=True)
class Constraint:
    id: str
    action: str  # skip | adjust
    applies: Callable[[Config], bool]
    reason: Callable[[Config], str]
    source: str
    adjust: Callable[[Config], Config] | None = None


CONSTRAINTS: tuple[Constraint, ...] = (
    Constraint(
        id="topk-without-steps",
        action="skip",
        applies=lambda c: (
            _eagle(c)
            and c.get("speculative_num_steps") is None
            and (
                c.get("speculative_eagle_topk") is not None
                or c.get("speculative_num_draft_tokens") is not None
            )
        ),
        reason=lambda c: (
            "--speculative-eagle-topk/--speculative-num-draft-tokens without "
            "--speculative-num-steps: SGLang asserts they are unset when it picks the steps "
            "itself (AssertionError at startup)"
        ),
        source="speculative_hook.py _handle_eagle_family (auto params assert)",
    ),
    Constraint(
        id="draft-tokens-exceed-tree",
        action="skip",
        applies=lambda c: (
            _eagle(c)
            and _int(c, "speculative_num_draft_tokens") is not None
            and _tree_capacity(c) is not None
            and int(c["speculative_num_draft_tokens"]) - 1 > (_tree_capacity(c) or 0)
            and _int(c, "speculative_eagle_topk") != 1
        ),
        reason=lambda c: (
            f"num_draft_tokens {c['speculative_num_draft_tokens']} needs "
            f"{int(c['speculative_num_draft_tokens']) - 1} candidates but "
            f"{c['speculative_num_steps']} steps of topk {c['speculative_eagle_topk']} offer "
            f"{_tree_capacity(c)} (topk + (steps-1)*topk^2): torch.topk fails with "
            "'selected index k out of range' in the first forward (CUDA-graph capture)"
        ),
        source="eagle_utils.py organize_draft_results (torch.topk(score_list, ndt - 1))",
    ),
    Constraint(
        id="topk1-sets-draft-tokens",
        action="adjust",
        applies=lambda c: (
            _eagle(c)
            and _int(c, "speculative_eagle_topk") == 1
            and _int(c, "speculative_num_steps") is not None
            and _int(c, "speculative_num_draft_tokens") != int(c["speculative_num_steps"]) + 1
        ),
        reason=lambda c: (
            "topk 1 makes the draft a chain: SGLang sets num_draft_tokens to num_steps + 1 = "
            f"{int(c['speculative_num_steps']) + 1} (warning 'speculative_num_draft_tokens is "
            "adjusted to speculative_num_steps + 1')"
        ),
        source="speculative_hook.py _handle_eagle_family",
        adjust=lambda c: {
            **c,
            "speculative_num_draft_tokens": int(c["speculative_num_steps"]) + 1,
        },
    ),
    Constraint(
        id="rejection-sampling-needs-topk1",
        action="skip",
        applies=lambda c: (
            bool(c.get("speculative_use_rejection_sampling"))
            and (_int(c, "speculative_eagle_topk") or 1) != 1
        ),
        reason=lambda c: (
            "--speculative-use-rejection-sampling requires --speculative-eagle-topk=1 "
            "(ValueError at startup)"
        ),
        source="speculative_hook.py _handle_eagle_family",
    ),
    Constraint(
        id="trtllm-mha-needs-topk1",
        action="skip",
        applies=lambda c: (
            _eagle(c)
            and c.get("attention_backend") == "trtllm_mha"
            and (_int(c, "speculative_eagle_topk") or 1) > 1
        ),
        reason=lambda c: (
            "trtllm_mha backend only supports topk = 1 for speculative decoding (ValueError)"
        ),
        source="speculative_hook.py _handle_eagle_family",
    ),
    Constraint(
        id="paged-tree-backend",
        action="skip",
        applies=lambda c: (
            _eagle(c)
            and (_int(c, "speculative_eagle_topk") or 1) > 1
            and (_int(c, "page_size") or 1) > 1
            and c.get("attention_backend") is not None
            and c.get("attention_backend") not in ("flashinfer", "fa3", "triton")
        ),
        reason=lambda c: (
            f"topk > 1 with page_size {c['page_size']} is only supported on flashinfer, fa3 "
            f"and triton; attention_backend is {c['attention_backend']} (ValueError)"
        ),
        source="speculative_hook.py _handle_eagle_family (_PAGE_TREE_SPEC_BACKENDS)",
    ),
    Constraint(
        id="draft-model-needs-topk1",
        action="skip",
        applies=lambda c: (
            bool(c.get("drafter_topk1")) and (_int(c, "speculative_eagle_topk") or 1) > 1
        ),
        reason=lambda c: (
            "the sweep file marks this drafter as chain-only (drafter_topk1 = true, e.g. an MTP "
            "head or a DSA-DCP model: 'requires --speculative-eagle-topk 1'); topk "
            f"{c.get('speculative_eagle_topk')} is refused at startup"
        ),
        source="speculative_hook.py _handle_iquest_q1_mtp_draft, model_overrides/deepseek_v2.py",
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
        if rule.adjust is not None:
            cur = rule.adjust(cur)
    return cur, fired


def rules_rows() -> list[dict[str, str]]:
    """The table for ``forensics sweep --rules`` and the docs."""
    return [{"id": r.id, "action": r.action, "source": r.source} for r in CONSTRAINTS]
