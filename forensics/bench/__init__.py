"""The benchmark client: streaming requests against an SGLang server, honest figures.

``run_bench(BenchConfig(...))`` drives one benchmark (single stream, fixed concurrency or
Poisson request rate) over SGLang's native ``/generate`` or the OpenAI-compatible endpoints,
and returns a :class:`BenchReport` (one :class:`RequestResult` per measured request plus the
summary figures, and the ``/health`` samples taken meanwhile). ``save_bench`` stores it in the
``bench`` / ``bench_requests`` / ``bench_health`` tables, attached to a run.

Rules this module keeps (see docs/bench.md):

* tokens come from ``meta_info.completion_tokens`` / ``usage``, never from the number of
  stream chunks (a chunk carries several tokens under speculative decoding); when a server
  gives neither, the count is estimated and the request flagged ``tokens_estimated`` (H08);
* a stream that ends without ``[DONE]`` and without a finish reason is ``truncated`` (H03);
* every network call has a deadline (connect, first token, idle, total, overall) (H05);
* a server that stops answering ends the run with the partial results kept (H02);
* while measuring, ``/health`` is sampled every ``health_every`` seconds (each probe with its
  own deadline) and the samples are kept with the results (H06).

The package, one noun a module: ``config`` (BenchConfig, bounds, protocol constants),
``prompts``, ``sse`` (the event-stream parser), ``stream`` (what a stream said, per API),
``client`` (one request), ``stats`` (percentiles, the summary), ``health`` (/health samples),
``report`` (BenchReport), ``runner`` (the benchmark), ``target`` (where it goes, which run it
measures), ``storage`` (its rows in the store, accept length from the log, the baseline).
"""

from forensics.bench.client import RequestResult, read_capped
from forensics.bench.config import (
    APIS,
    BODIES_PER_STATUS,
    BOUNDS,
    DEADLINE_GRACE_S,
    ENDPOINTS,
    HEALTH_EVERY_MIN,
    HEALTH_TIMEOUT,
    MAX_BODY,
    MAX_JSON_BODY,
    MAX_SMALL_BODY,
    MAX_SSE_EVENT,
    REASONS,
    BenchConfig,
)
from forensics.bench.health import (
    HEALTH_FIELDS,
    HealthSample,
    health_breakdown,
    health_summary,
)
from forensics.bench.prompts import (
    BUILTIN_PROMPT_WORDS,
    Prompt,
    builtin_prompts,
    load_dataset,
    make_prompts,
    random_prompts,
)
from forensics.bench.report import BenchReport, iter_failures
from forensics.bench.runner import Progress, run_bench, server_accept_length
from forensics.bench.sse import SSEError, SSEEvent, SSEParser
from forensics.bench.stats import percentile, summarize
from forensics.bench.storage import (
    accept_len_from_log,
    baseline_text,
    bench_frames,
    get_baseline,
    health_frame,
    log_accept_len,
    save_bench,
)
from forensics.bench.target import (
    Target,
    find_run_for_url,
    resolve_bench_target,
    resolve_run,
    resolve_target,
    run_port,
)

__all__ = [
    "APIS",
    "BODIES_PER_STATUS",
    "BOUNDS",
    "BUILTIN_PROMPT_WORDS",
    "DEADLINE_GRACE_S",
    "ENDPOINTS",
    "HEALTH_EVERY_MIN",
    "HEALTH_FIELDS",
    "HEALTH_TIMEOUT",
    "MAX_BODY",
    "MAX_JSON_BODY",
    "MAX_SMALL_BODY",
    "MAX_SSE_EVENT",
    "REASONS",
    "BenchConfig",
    "BenchReport",
    "HealthSample",
    "Progress",
    "Prompt",
    "RequestResult",
    "SSEError",
    "SSEEvent",
    "SSEParser",
    "Target",
    "accept_len_from_log",
    "baseline_text",
    "bench_frames",
    "builtin_prompts",
    "find_run_for_url",
    "get_baseline",
    "health_breakdown",
    "health_frame",
    "health_summary",
    "iter_failures",
    "load_dataset",
    "log_accept_len",
    "make_prompts",
    "percentile",
    "random_prompts",
    "read_capped",
    "resolve_bench_target",
    "resolve_run",
    "resolve_target",
    "run_bench",
    "run_port",
    "save_bench",
    "server_accept_length",
    "summarize",
]
