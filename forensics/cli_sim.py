"""`forensics sim`: the simulated SGLang server and its performance model."""

from __future__ import annotations

import click

from forensics.cli_common import POSITIVE, Number, echo_json
from forensics.sim.perf import MAX_DRAFT_TOKENS, MAX_STEPS


@click.group("sim")
def sim() -> None:
    """A simulated SGLang server (no GPU, no model) and its performance model."""


@sim.command(
    "serve",
    context_settings={
        "ignore_unknown_options": True,
        "allow_extra_args": True,
        "help_option_names": [],
    },
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve(args: tuple[str, ...]) -> None:
    """Run the simulated SGLang server; every flag goes to its own parser (try: serve --help).

    Example: forensics sim serve --model-path sim://kimi-k2.5 --tp 8
    --speculative-algorithm EAGLE3 --speculative-num-steps 4 --speculative-eagle-topk 1
    """
    from forensics.sim.server import main

    main(list(args))


@sim.command("model")
@click.option("--config", "config_name", default=None, help="A seed configuration by name.")
@click.option(
    "--steps",
    type=Number(1, MAX_STEPS, integer=True),
    default=None,
    help="speculative_num_steps (none: no speculation)",
)
@click.option(
    "--topk", type=Number(1, MAX_DRAFT_TOKENS, integer=True), default=1, show_default=True
)
@click.option(
    "--draft-tokens",
    "ndt",
    type=Number(1, MAX_DRAFT_TOKENS, integer=True),
    default=None,
    help="default: steps+1 for topk 1, else 8",
)
@click.option("--no-cuda-graph", is_flag=True, help="Model CUDA graphs off.")
@click.option(
    "--quality",
    type=Number(0, 1),
    default=None,
    help="Drafter per-token acceptance probability.",
)
@click.option("--draft-path", default=None, help="Draft model path (its name can set the quality).")
@click.option(
    "--batch", "bs", type=Number(1, 1_000_000, integer=True), default=1, show_default=True
)
@click.option("--base-tok-s", type=POSITIVE, default=90.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def model(config_name, steps, topk, ndt, no_cuda_graph, quality, draft_path, bs, base_tok_s, as_json) -> None:  # fmt: skip
    """Print the modelled decode speed and accept length (the seed table without options)."""
    from forensics.sim import perf

    params = perf.PerfParams(base_tok_s=base_tok_s)
    if config_name is None and steps is None:
        rows = [_row(s.name, s.spec, bs, params, s.target_tok_s) for s in perf.SEED_CONFIGS]
    else:
        spec = _spec(config_name, steps, topk, ndt, no_cuda_graph, quality, draft_path)
        rows = [_row(config_name or "custom", spec, bs, params, None)]
    if as_json:
        echo_json(rows)
        return
    import polars as pl

    from forensics.cli_common import print_table

    print_table(
        pl.DataFrame(rows), title="simulator performance model (single stream unless --batch)"
    )


def register(cli: click.Group) -> None:
    cli.add_command(sim)


def _spec(config_name, steps, topk, ndt, no_cuda_graph, quality, draft_path):
    """The speculative configuration `sim model` was asked about: a seed by name, or flags."""
    from forensics.sim import perf

    if config_name is not None:
        try:
            return perf.seed_config(config_name).spec
        except KeyError as exc:
            raise click.BadParameter(str(exc.args[0]), param_hint="--config") from None
    if topk == 1:
        ndt = steps + 1
    return perf.SpecConfig(
        algorithm="EAGLE3" if steps else None,
        num_steps=steps or 0,
        topk=topk,
        num_draft_tokens=ndt or 8,
        cuda_graph=not no_cuda_graph,
        quality=perf.drafter_quality(draft_path, quality),
    )


def _row(name, spec, bs, params, target) -> dict:
    from forensics.sim import perf

    return {
        "config": name,
        "steps": spec.num_steps if spec.speculative else None,
        "topk": spec.topk if spec.speculative else None,
        "draft_tokens": spec.num_draft_tokens if spec.speculative else None,
        "cuda_graph": spec.cuda_graph,
        "quality": spec.quality if spec.speculative else None,
        "accept_len": round(perf.expected_accept_len(spec), 3),
        "round_ms": round(perf.round_cost_s(spec, bs, params) * 1000, 3),
        "tok_s": round(perf.expected_tok_s(spec, bs, params), 2),
        "seed_tok_s": target,
    }
