"""The simulator's speculative-decoding performance model: pure functions, no I/O.

One decode *round* of an EAGLE-style server is: the draft model proposes a tree of tokens
(``num_steps`` draft forwards, each ``topk`` wide), the target model verifies
``num_draft_tokens`` tokens in one forward, and the draft model re-runs on the accepted tokens
("draft extend"). A round costs::

    round = verify(num_draft_tokens, bs, graphs) + num_steps * draft_step(topk, bs, graphs)
            + draft_extend(bs, graphs)

and yields ``1 + accepted`` tokens per request, where ``accepted`` (the number of draft tokens
the target agrees with) follows a truncated geometric law: each tree level is accepted with
probability ``p_level = 1 - (1 - q) ** (width ** TREE_GAMMA)``, ``q`` being the drafter's
per-token acceptance probability (its *quality*) and ``width`` the tree width actually afforded
by the token budget (``min(topk, (num_draft_tokens - 1) / depth)``). Accepted drafts are capped
at ``depth = min(num_steps, num_draft_tokens - 1)``. Without speculation a round is one target
forward producing one token.

CUDA graphs remove kernel-launch overhead: each forward without graphs pays a fixed extra cost
(``*_nocg_ms``). Batching: compute terms grow with the batch (``BATCH_COEF`` per extra request
and the verify tokens of every request), launch overheads do not.

All costs are given for a baseline of 90 tok/s (``PerfParams.base_tok_s``) and scale with
``--sim-base-tok-s``: ratios between configurations stay the same. ``SEED_CONFIGS`` lists the
configurations of the seed session and what the model gives for them; docs/simulator.md has the
table and tests/test_sim_perf.py checks the calibration.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

REFERENCE_TOK_S = 90.0  # the costs below are written for this baseline speed
TREE_GAMMA = 0.5  # how much a wider tree helps per level (0: not at all, 1: like k tries)
BATCH_COEF = 0.03  # compute growth per extra request in a round


@dataclass(frozen=True)
class PerfParams:
    """Per-forward costs in milliseconds at the 90 tok/s reference (scaled to base_tok_s)."""

    base_tok_s: float = 90.0
    verify_tok_ms: float = 0.15  # each extra token in the target forward
    target_nocg_ms: float = 8.0  # launch overhead of a target forward without CUDA graphs
    draft_step_ms: float = 2.964  # one draft forward, fixed part
    draft_topk_ms: float = 1.156  # one draft forward, per unit of topk
    draft_nocg_ms: float = 2.4  # launch overhead of a draft forward without CUDA graphs
    extend_ms: float = 2.5  # draft extend after verify
    extend_nocg_ms: float = 2.0
    prefill_ms: float = 15.0  # a prefill forward, fixed part
    prefill_tok_ms: float = 0.05  # per prompt token

    @property
    def scale(self) -> float:
        return REFERENCE_TOK_S / self.base_tok_s

    @property
    def target_step_ms(self) -> float:
        return 1000.0 / REFERENCE_TOK_S


@dataclass(frozen=True)
class SpecConfig:
    """What the performance model needs from a server's arguments."""

    algorithm: str | None = None  # None = no speculative decoding
    num_steps: int = 0
    topk: int = 1
    num_draft_tokens: int = 1
    cuda_graph: bool = True
    cuda_graph_max_bs: int = 48
    quality: float = 0.65  # per-token acceptance probability of the drafter

    @property
    def speculative(self) -> bool:
        return self.algorithm is not None


# Drafter quality: per-token acceptance probability. A draft path containing one of these
# words gets that quality (first match wins); --sim-drafter-quality overrides.
DEFAULT_QUALITY = 0.65
QUALITY_BY_PATH = (
    ("other", 0.6235),
    ("weak", 0.5),
    ("strong", 0.8),
)


def drafter_quality(draft_path: str | None, override: float | None = None) -> float:
    """The drafter's per-token acceptance probability, from the flag or the draft path."""
    if override is not None:
        return min(max(override, 0.0), 0.999)
    low = (draft_path or "").lower()
    for word, quality in QUALITY_BY_PATH:
        if word in low:
            return quality
    return DEFAULT_QUALITY


# The deepest draft tree the model (and `sim serve`) accepts: every round walks it, so an
# unbounded --steps (1e9) would make one round, or one `sim model`, run for ever.
MAX_STEPS = 64
MAX_DRAFT_TOKENS = 1024


def tree_depth(cfg: SpecConfig) -> int:
    """The most draft tokens one round can accept."""
    if not cfg.speculative:
        return 0
    return max(0, min(cfg.num_steps, cfg.num_draft_tokens - 1))


def level_accept_prob(cfg: SpecConfig) -> float:
    """Probability that one more tree level is accepted (a wider tree gives more chances)."""
    depth = tree_depth(cfg)
    if depth == 0:
        return 0.0
    width = max(1.0, min(float(cfg.topk), (cfg.num_draft_tokens - 1) / depth))
    return 1.0 - (1.0 - cfg.quality) ** (width**TREE_GAMMA)


def expected_accept_len(cfg: SpecConfig) -> float:
    """Mean tokens per round per request, bonus token included (SGLang's ``accept len``)."""
    p = level_accept_prob(cfg)
    d = tree_depth(cfg)
    if p >= 1.0:
        return 1.0 + d
    return 1.0 + p * (1.0 - p**d) / (1.0 - p)  # sum of p**j, j = 1..d


def draw_accepted(rng: random.Random, cfg: SpecConfig) -> int:
    """Draft tokens accepted in one round for one request (0 .. depth)."""
    p = level_accept_prob(cfg)
    depth = tree_depth(cfg)
    k = 0
    while k < depth and rng.random() < p:
        k += 1
    return k


def round_cost_s(cfg: SpecConfig, bs: int = 1, params: PerfParams = PerfParams()) -> float:
    """Seconds one decode round takes for a batch of ``bs`` requests."""
    bs = max(1, bs)
    graphs = cfg.cuda_graph and bs <= cfg.cuda_graph_max_bs
    grow = 1.0 + BATCH_COEF * (bs - 1)
    tokens = bs * (cfg.num_draft_tokens if cfg.speculative else 1)
    ms = (params.target_step_ms + params.verify_tok_ms * (tokens - bs)) * grow
    if not graphs:
        ms += params.target_nocg_ms
    if cfg.speculative:
        step = (params.draft_step_ms + params.draft_topk_ms * cfg.topk) * grow
        if not graphs:
            step += params.draft_nocg_ms
        ms += cfg.num_steps * step
        ms += params.extend_ms * grow + (0.0 if graphs else params.extend_nocg_ms)
    return ms * params.scale / 1000.0


def prefill_cost_s(new_tokens: int, params: PerfParams = PerfParams()) -> float:
    """Seconds a prefill forward over ``new_tokens`` prompt tokens takes."""
    return (params.prefill_ms + params.prefill_tok_ms * max(0, new_tokens)) * params.scale / 1000.0


def expected_tok_s(cfg: SpecConfig, bs: int = 1, params: PerfParams = PerfParams()) -> float:
    """Modelled decode speed of one request (tokens per second) in a batch of ``bs``."""
    return expected_accept_len(cfg) / round_cost_s(cfg, bs, params)


def accept_rate(
    style_formula: str, accept_len: float, cfg: SpecConfig, bs_weight: float = 1.0
) -> float:
    """SGLang's ``accept rate`` from ``accept len`` by formula family (see §3.3 of the reference).

    ``steps1``: accept_len / (steps + 1) (0.5.4–0.5.5); ``ndt``: accept_len / num_draft_tokens
    (0.5.6–0.5.10); ``strict``: (accept_len - 1) / (num_draft_tokens - 1) (0.5.11+).
    """
    if style_formula == "steps1":
        return accept_len / max(1, cfg.num_steps + 1)
    if style_formula == "ndt":
        return accept_len / max(1, cfg.num_draft_tokens)
    if style_formula == "strict":
        denom = cfg.num_draft_tokens - 1 if cfg.num_draft_tokens > 1 else cfg.num_steps
        return (accept_len - 1.0) / max(1, denom)
    return math.nan


@dataclass(frozen=True)
class SeedConfig:
    """A configuration of the seed session: the flags the demo launches and the target speed."""

    name: str
    description: str
    flags: tuple[str, ...]
    spec: SpecConfig
    target_tok_s: float | None  # the figure of the seed table; None = crashed

    def modelled_tok_s(self, params: PerfParams = PerfParams()) -> float:
        return expected_tok_s(self.spec, 1, params)


_EAGLE3 = SpecConfig(algorithm="EAGLE3", quality=DEFAULT_QUALITY)
_DRAFT = "/data/eagle3/output_10k_sglang/4"
_OTHER = "/data/eagle3/other-published-drafter"


def _flags(steps: int, topk: int, ndt: int, *, cg: bool, draft: str = _DRAFT) -> tuple[str, ...]:
    out = (
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", draft,
        "--speculative-num-steps", str(steps),
        "--speculative-eagle-topk", str(topk),
        "--speculative-num-draft-tokens", str(ndt),
    )  # fmt: skip
    return out if cg else (*out, "--disable-cuda-graph")


SEED_CONFIGS: tuple[SeedConfig, ...] = (
    SeedConfig("sglang_baseline", "no speculative decoding", (), SpecConfig(), 90.0),
    SeedConfig(
        "sglang_eagle3_nocg_16dt",
        "EAGLE-3, 16 draft tokens (5 steps, topk 4), no CUDA graphs",
        _flags(5, 4, 16, cg=False),
        replace(_EAGLE3, num_steps=5, topk=4, num_draft_tokens=16, cuda_graph=False),
        53.2,
    ),
    SeedConfig(
        "sglang_eagle3_nocg_16dt_other",
        "EAGLE-3 with another published drafter, 16 draft tokens, no CUDA graphs",
        _flags(5, 4, 16, cg=False, draft=_OTHER),
        replace(
            _EAGLE3,
            num_steps=5,
            topk=4,
            num_draft_tokens=16,
            cuda_graph=False,
            quality=drafter_quality(_OTHER),
        ),
        50.5,
    ),
    SeedConfig(
        "sglang_eagle3_cg_16dt",
        "EAGLE-3, CUDA graphs, 16 draft tokens (5 steps, topk 4)",
        _flags(5, 4, 16, cg=True),
        replace(_EAGLE3, num_steps=5, topk=4, num_draft_tokens=16),
        74.9,
    ),
    SeedConfig(
        "sglang_eagle3_cg_5dt",
        "EAGLE-3, CUDA graphs, 5 draft tokens (4 steps, topk 1: a chain)",
        _flags(4, 1, 5, cg=True),
        replace(_EAGLE3, num_steps=4, topk=1, num_draft_tokens=5),
        82.3,
    ),
    SeedConfig(
        "sglang_eagle3_cg_2step",
        "EAGLE-3, CUDA graphs, 5 draft tokens, topk 4, num_steps 2 (crashed in the seed session)",
        _flags(2, 4, 5, cg=True),
        replace(_EAGLE3, num_steps=2, topk=4, num_draft_tokens=5),
        None,
    ),
)


def seed_config(name: str) -> SeedConfig:
    for cfg in SEED_CONFIGS:
        if cfg.name == name:
            return cfg
    known = ", ".join(c.name for c in SEED_CONFIGS)
    raise KeyError(f"no seed configuration named {name!r} (known: {known})")
