"""The simulator's command line: SGLang's ``launch_server`` flags plus ``--sim-*`` flags.

Bad flags behave like SGLang's argparse (usage line, ``error: ...``, exit 2; prog
``launch_server.py`` up to 0.5.9, ``sglang serve`` from 0.5.10, reference §4.1). Speculative
parameters are resolved like ``ServerArgs.__post_init__`` (§7.2, §7.3); the warnings it prints
before logging is configured are returned as bare lines.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any

from forensics.sim.logstyle import DEFAULT_STYLE, STYLES, Style
from forensics.sim.perf import MAX_DRAFT_TOKENS, MAX_STEPS

FAIL_MODES = (
    "load-oom",
    "kv-oom",
    "capture-oom",
    "capture-error",
    "runtime-ima",
    "runtime-nccl-timeout",
    "port-in-use",
)
HANG_MODES = ("load", "capture", "runtime")
DEFAULT_SPEED = 60.0  # a default startup (~150 modelled seconds) takes about 2.5 s

MODELLED_ALGOS = ("EAGLE", "EAGLE3", "STANDALONE")

# Keys of --sim-fail-when and the config attribute each one checks.
FAIL_WHEN_KEYS = {
    "steps": "num_steps",
    "num_steps": "num_steps",
    "topk": "topk",
    "ndt": "num_draft_tokens",
    "draft_tokens": "num_draft_tokens",
    "num_draft_tokens": "num_draft_tokens",
    "cg": "cuda_graph",
    "tp": "tp_size",
    "algo": "spec_algorithm",
    "style": "style_name",
}


@dataclass
class SimConfig:
    """Resolved arguments of one simulated server."""

    style: Style
    model_path: str
    host: str
    port: int
    tp_size: int
    dp_size: int
    spec_algorithm: str | None
    draft_model_path: str | None
    num_steps: int | None
    topk: int | None
    num_draft_tokens: int | None
    cuda_graph: bool
    cuda_graph_max_bs: int
    mem_fraction_static: float
    max_running_requests: int | None
    context_length: int | None
    chunked_prefill_size: int
    decode_log_interval: int
    watchdog_timeout: float
    watchdog_from_cli: bool
    log_requests: bool
    log_requests_level: int
    enable_metrics: bool
    skip_server_warmup: bool
    served_model_name: str
    trust_remote_code: bool
    random_seed: int
    # simulator-only
    speed: float
    seed: int
    fail: str | None
    hang: str | None
    fail_after: int
    drafter_quality: float | None
    base_tok_s: float
    eos_rate: float
    orphan: bool
    tag: str | None
    argv: list[str] = field(default_factory=list)
    bare_warnings: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def style_name(self) -> str:
        return self.style.name

    @property
    def speculative(self) -> bool:
        return self.spec_algorithm is not None


class _Parser(argparse.ArgumentParser):
    """argparse, but ``error`` exits 2 after the usage line exactly like stock argparse."""


def _pre_style(argv: list[str]) -> str:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--sim-style", default=DEFAULT_STYLE)
    ns, _ = pre.parse_known_args(argv)
    return ns.sim_style if ns.sim_style in STYLES else DEFAULT_STYLE


def build_parser(style: Style) -> argparse.ArgumentParser:
    p = _Parser(
        prog=style.prog,
        description=(
            "SIMULATED SGLang server (forensics sim): behaves like "
            f"`python -m sglang.launch_server` of SGLang {style.version} from the outside "
            "(command line, log, HTTP API, failures) with a speculative-decoding performance "
            "model. No GPU, no model: nothing is computed, tokens are made up. "
            "Use a model path like sim://kimi-k2.5 so nobody mistakes it for a real server."
        ),
    )
    _server_flags(p, style)
    _speculative_flags(p, style)
    _sim_flags(p)
    return p


def _server_flags(p: argparse.ArgumentParser, style: Style) -> None:
    """SGLang's server flags up to the speculative ones (argparse keeps this order in usage)."""
    alias = style.flag_aliases
    p.add_argument(
        "--model-path", *(["--model"] if alias else []), dest="model_path", required=True
    )
    p.add_argument("--tokenizer-path", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument(
        "--tensor-parallel-size", "--tp-size", "--tp", dest="tp_size", type=int, default=1
    )
    p.add_argument("--data-parallel-size", "--dp-size", "--dp", dest="dp_size", type=int, default=1)
    p.add_argument("--mem-fraction-static", type=float, default=None)
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--context-length", type=int, default=None)
    p.add_argument("--chunked-prefill-size", type=int, default=None)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--page-size", type=int, default=1)
    p.add_argument("--attention-backend", default=None)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--random-seed", type=int, default=None)
    p.add_argument("--log-level", default="info")
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--enable-cache-report", action="store_true")
    p.add_argument("--skip-server-warmup", action="store_true")
    p.add_argument("--enable-dp-attention", action="store_true")


def _speculative_flags(p: argparse.ArgumentParser, style: Style) -> None:
    """Speculative decoding, CUDA graph and logging flags (spellings moved between versions)."""
    choices = list(style.spec_algo_choices) if style.spec_algo_choices else None
    p.add_argument("--speculative-algorithm", type=str, default=None, choices=choices)
    p.add_argument(
        "--speculative-draft-model-path",
        *(["--speculative-draft-model"] if style.flag_aliases else []),
        dest="speculative_draft_model_path",
        default=None,
    )
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--speculative-token-map", default=None)
    p.add_argument("--disable-cuda-graph", action="store_true")
    if style.split_cuda_graph_flags:
        # 0.5.20+: only the split flags exist; "--cuda-graph-max-bs" is an ambiguous prefix (§7.1)
        p.add_argument(
            "--cuda-graph-max-bs-decode", dest="cuda_graph_max_bs", type=int, default=None
        )
        p.add_argument("--cuda-graph-max-bs-prefill", type=int, default=None)
        p.add_argument(
            "--cuda-graph-backend-decode", default=None, choices=["full", "breakable", "disabled"]
        )
    else:
        p.add_argument("--cuda-graph-max-bs", type=int, default=None)
    p.add_argument("--decode-log-interval", type=int, default=40)
    p.add_argument("--watchdog-timeout", type=float, default=None)
    p.add_argument("--log-requests", action="store_true")
    p.add_argument("--log-requests-level", type=int, default=None)
    p.add_argument("--enable-metrics", action="store_true")


def _sim_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("simulator (forensics sim; not SGLang flags)")
    g.add_argument("--sim-style", choices=sorted(STYLES), default=DEFAULT_STYLE,
                   help="SGLang version whose log layout and HTTP fields to imitate (default %(default)s)")  # fmt: skip
    g.add_argument("--sim-speed", type=float, default=DEFAULT_SPEED,
                   help="time compression of startup and hangs (default %(default)s: startup ~2.5 s)")  # fmt: skip
    g.add_argument("--sim-seed", type=int, default=0, help="random seed (acceptance draws, text)")
    g.add_argument("--sim-fail", choices=FAIL_MODES, default=None, help="inject this failure")
    g.add_argument("--sim-fail-when", default=None, metavar="K=V,...",
                   help="inject --sim-fail/--sim-hang only when the configuration matches, "
                   "e.g. steps=2,topk=4 (keys: " + ", ".join(sorted(set(FAIL_WHEN_KEYS))) + ")")  # fmt: skip
    g.add_argument(
        "--sim-hang", choices=HANG_MODES, default=None, help="stop making progress there"
    )
    g.add_argument("--sim-fail-after", type=int, default=0, metavar="N",
                   help="runtime failures/hangs fire at the first forward after N decode rounds of traffic after ready")  # fmt: skip
    g.add_argument("--sim-drafter-quality", type=float, default=None, metavar="Q",
                   help="per-token acceptance probability of the drafter (default from the draft path)")  # fmt: skip
    g.add_argument("--sim-base-tok-s", type=float, default=90.0,
                   help="baseline single-stream decode speed without speculation (default %(default)s)")  # fmt: skip
    g.add_argument("--sim-eos-rate", type=float, default=0.002,
                   help="per-token probability of a modelled EOS when ignore_eos is off")  # fmt: skip
    g.add_argument("--sim-orphan", action="store_true",
                   help="leave one rank child alive, holding the port, when the server dies")  # fmt: skip
    g.add_argument("--sim-tag", default=None, metavar="TOKEN",
                   help="ignored; lets launchers put a unique marker in the command line")  # fmt: skip


def parse_fail_when(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in FAIL_WHEN_KEYS:
            raise ValueError(part)
        out[FAIL_WHEN_KEYS[key]] = value.strip()
    return out


def _matches(cfg: SimConfig, cond: dict[str, str]) -> bool:
    for attr, want in cond.items():
        have = getattr(cfg, attr)
        if isinstance(have, bool):
            if have != (want.lower() in ("1", "true", "yes", "on")):
                return False
        elif str(have).lower() != want.lower():
            return False
    return True


def _model_family(model_path: str) -> str:
    low = model_path.lower()
    return "llama" if "llama" in low else "other"


# Numeric flags the simulator cannot run with: (dest, flag, low, high, low excluded). Every
# numeric flag has a row and a finite high bound (a test walks the parser): out of range is a
# usage error (exit 2), never a crash deep in the server nor a rank list of 10^9 entries.
MAX_TP, MAX_DP = 512, 64
RANGES = (
    ("port", "--port", 1, 65535, False),
    ("tp_size", "--tp-size", 1, MAX_TP, False),
    ("dp_size", "--dp-size", 1, MAX_DP, False),
    ("mem_fraction_static", "--mem-fraction-static", 0, 1, True),
    ("max_running_requests", "--max-running-requests", 1, 1_000_000, False),
    ("context_length", "--context-length", 1, 100_000_000, False),
    ("chunked_prefill_size", "--chunked-prefill-size", -1, 100_000_000, False),
    ("page_size", "--page-size", 1, 1_000_000, False),
    ("random_seed", "--random-seed", 0, 2**32 - 1, False),
    ("speculative_num_steps", "--speculative-num-steps", 1, MAX_STEPS, False),
    ("speculative_eagle_topk", "--speculative-eagle-topk", 1, MAX_DRAFT_TOKENS, False),
    ("speculative_num_draft_tokens", "--speculative-num-draft-tokens", 1, MAX_DRAFT_TOKENS, False),
    ("cuda_graph_max_bs", "--cuda-graph-max-bs", 1, 1_000_000, False),
    ("cuda_graph_max_bs_prefill", "--cuda-graph-max-bs-prefill", 1, 1_000_000, False),
    ("decode_log_interval", "--decode-log-interval", 1, 1_000_000, False),
    ("watchdog_timeout", "--watchdog-timeout", 0, 30 * 86400, True),
    ("log_requests_level", "--log-requests-level", 0, 3, False),
    ("sim_speed", "--sim-speed", 0, 1_000_000, True),
    ("sim_seed", "--sim-seed", 0, 2**32 - 1, False),
    ("sim_drafter_quality", "--sim-drafter-quality", 0, 1, False),
    ("sim_base_tok_s", "--sim-base-tok-s", 0, 10_000_000, True),
    ("sim_eos_rate", "--sim-eos-rate", 0, 1, False),
    ("sim_fail_after", "--sim-fail-after", 0, 1_000_000_000, False),
)


def _check_ranges(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    for dest, flag, low, high, open_low in RANGES:
        v = getattr(ns, dest, None)
        if v is None:
            continue
        bad = v != v or v in (float("inf"), float("-inf")) or v < low or (open_low and v == low)
        if high is not None and v > high:
            bad = True
        if bad:
            want = f"more than {low}" if open_low else f"at least {low}"
            if high is not None:
                want = f"{low} to {high}"
            parser.error(f"argument {flag}: {v} is out of range (must be {want})")


def parse_args(argv: list[str]) -> SimConfig:
    """Parse and resolve; exits 2 on bad flags like argparse, 1 on ServerArgs assertion."""
    style = STYLES[_pre_style(argv)]
    parser = build_parser(style)
    ns = parser.parse_args(argv)
    _check_ranges(parser, ns)
    bare: list[str] = []
    if style.deprecated_flag_warning and ns.disable_cuda_graph:
        bare.append(
            "\033[1;33m'--disable-cuda-graph' is deprecated and will be removed in a future "
            "release. Use '--cuda-graph-backend-decode=disabled' instead.\033[0m"
        )
    spec = _resolve_speculative(parser, style, ns, bare)
    cfg = _config(style, ns, spec, argv, bare)
    if ns.sim_fail_when:
        _apply_fail_when(parser, ns, cfg)
    return cfg


@dataclass(frozen=True)
class _Spec:
    """Speculative settings as ``ServerArgs.__post_init__`` leaves them (§7.2, §7.3)."""

    algo: str | None
    steps: int | None
    topk: int | None
    ndt: int | None
    max_running: int | None


def _spec_algorithm(parser: argparse.ArgumentParser, style: Style, name: str | None) -> str | None:
    if name is None:
        return None
    algo = name.upper()
    if style.spec_algo_known is not None and algo not in style.spec_algo_known:
        _server_args_error(style, f"ValueError: Unknown speculative algorithm name: {algo}")
    if algo == "NEXTN":
        algo = "EAGLE"
    if algo not in MODELLED_ALGOS:
        parser.exit(2, f"{style.prog}: simulator: speculative algorithm {algo} is not modelled (use EAGLE, EAGLE3 or NEXTN)\n")  # fmt: skip
    return algo


def _resolve_speculative(
    parser: argparse.ArgumentParser, style: Style, ns: argparse.Namespace, bare: list[str]
) -> _Spec:
    """Defaults and adjustments of the speculative flags; their warnings go to ``bare``."""
    algo = _spec_algorithm(parser, style, ns.speculative_algorithm)
    max_running = ns.max_running_requests
    if algo is None:
        return _Spec(None, None, None, None, max_running)
    steps, topk, ndt = (
        ns.speculative_num_steps,
        ns.speculative_eagle_topk,
        ns.speculative_num_draft_tokens,
    )
    if max_running is None:
        max_running = 48
        bare.extend(w for w in style.bare_warnings_spec if w.startswith("Max running"))
    bare.extend(w for w in style.bare_warnings_spec if not w.startswith("Max running"))
    if steps is None:
        if topk is not None or ndt is not None:
            _server_args_error(style, "AssertionError")
        if style.spec_default_large or _model_family(ns.model_path) == "llama":
            steps, topk, ndt = 5, 4, 8
        else:
            steps, topk, ndt = 3, 1, 4
    else:
        topk = topk if topk is not None else style.spec_default_topk
        ndt = ndt if ndt is not None else (8 if topk > 1 else steps + 1)
    if topk == 1 and ndt != steps + 1:
        bare.append(
            "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
            "speculative_eagle_topk == 1"
        )
        ndt = steps + 1
    if style.spec_v2_overlap and topk == 1:
        bare.append(
            "Overlap spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding."
        )
    return _Spec(algo, steps, topk, ndt, max_running)


def _config(
    style: Style, ns: argparse.Namespace, spec: _Spec, argv: list[str], bare: list[str]
) -> SimConfig:
    cg = not ns.disable_cuda_graph
    if getattr(ns, "cuda_graph_backend_decode", None) == "disabled":
        cg = False
    cg_max = ns.cuda_graph_max_bs or (48 if spec.algo else style.default_cuda_graph_max_bs)
    draft_path = ns.speculative_draft_model_path
    if spec.algo is not None and draft_path is None:
        draft_path = ns.model_path  # MTP-style: the draft head lives in the target checkpoint
    return SimConfig(
        style=style,
        model_path=ns.model_path,
        host=ns.host,
        port=ns.port,
        tp_size=max(1, ns.tp_size),
        dp_size=max(1, ns.dp_size),
        spec_algorithm=spec.algo,
        draft_model_path=draft_path,
        num_steps=spec.steps,
        topk=spec.topk,
        num_draft_tokens=spec.ndt,
        cuda_graph=cg,
        cuda_graph_max_bs=cg_max,
        mem_fraction_static=ns.mem_fraction_static if ns.mem_fraction_static is not None else 0.85,
        max_running_requests=spec.max_running,
        context_length=ns.context_length,
        chunked_prefill_size=ns.chunked_prefill_size or 8192,
        decode_log_interval=max(1, ns.decode_log_interval),
        watchdog_timeout=ns.watchdog_timeout if ns.watchdog_timeout is not None else 300,
        watchdog_from_cli=ns.watchdog_timeout is not None,
        log_requests=ns.log_requests,
        log_requests_level=(
            ns.log_requests_level
            if ns.log_requests_level is not None
            else style.default_log_requests_level
        ),
        enable_metrics=ns.enable_metrics,
        skip_server_warmup=ns.skip_server_warmup,
        served_model_name=ns.served_model_name or ns.model_path,
        trust_remote_code=ns.trust_remote_code,
        random_seed=ns.random_seed if ns.random_seed is not None else 0,
        **_sim_settings(ns),
        argv=list(argv),
        bare_warnings=bare,
        extra={
            "dtype": ns.dtype,
            "kv_cache_dtype": ns.kv_cache_dtype,
            "page_size": ns.page_size,
            "attention_backend": ns.attention_backend,
            "tokenizer_path": ns.tokenizer_path or ns.model_path,
            "disable_radix_cache": ns.disable_radix_cache,
            "enable_cache_report": ns.enable_cache_report,
            "enable_dp_attention": ns.enable_dp_attention,
            "speculative_token_map": ns.speculative_token_map,
            "log_level": ns.log_level,
        },
    )


def _sim_settings(ns: argparse.Namespace) -> dict[str, Any]:
    """The ``--sim-*`` flags as SimConfig fields."""
    return {
        "speed": ns.sim_speed if ns.sim_speed > 0 else DEFAULT_SPEED,
        "seed": ns.sim_seed,
        "fail": ns.sim_fail,
        "hang": ns.sim_hang,
        "fail_after": max(0, ns.sim_fail_after),
        "drafter_quality": ns.sim_drafter_quality,
        "base_tok_s": ns.sim_base_tok_s if ns.sim_base_tok_s > 0 else 90.0,
        "eos_rate": min(max(ns.sim_eos_rate, 0.0), 1.0),
        "orphan": ns.sim_orphan,
        "tag": ns.sim_tag,
    }


def _apply_fail_when(
    parser: argparse.ArgumentParser, ns: argparse.Namespace, cfg: SimConfig
) -> None:
    """--sim-fail-when: keep the injected failure/hang only when the configuration matches."""
    if not (ns.sim_fail or ns.sim_hang):
        parser.error("--sim-fail-when needs --sim-fail or --sim-hang")
    try:
        cond = parse_fail_when(ns.sim_fail_when)
    except ValueError as exc:
        parser.error(
            f"argument --sim-fail-when: bad condition {exc.args[0]!r} "
            f"(use K=V pairs with K in {', '.join(sorted(FAIL_WHEN_KEYS))})"
        )
    if not _matches(cfg, cond):
        cfg.fail = None
        cfg.hang = None


def _server_args_error(style: Style, last_line: str) -> None:
    """A ServerArgs validation failure: raw traceback on stderr before logging, exit 1 (§4.1)."""
    site = style.site
    text = (
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        '  File "<frozen runpy>", line 88, in _run_code\n'
        f'  File "{site("sglang/launch_server.py")}", line 11, in <module>\n'
        "    server_args = prepare_server_args(sys.argv[1:])\n"
        "                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        f'  File "{site("sglang/srt/server_args.py")}", line 4187, in prepare_server_args\n'
        "    return ServerArgs.from_cli_args(raw_args)\n"
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        f'  File "{site("sglang/srt/server_args.py")}", line 3921, in from_cli_args\n'
        "    return cls(**{attr: getattr(args, attr) for attr in attrs})\n"
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        '  File "<string>", line 312, in __init__\n'
        f'  File "{site("sglang/srt/server_args.py")}", line 611, in __post_init__\n'
        "    self._handle_speculative_decoding()\n"
        f'  File "{site("sglang/srt/server_args.py")}", line 1733, in _handle_speculative_decoding\n'
        f"{last_line}\n"
    )
    sys.stderr.write(text)
    sys.stderr.flush()
    sys.exit(1)
