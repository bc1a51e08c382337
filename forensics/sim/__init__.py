"""A simulated SGLang server: SGLang's command line, log, HTTP API and failures, no GPU.

Run it with ``python -m forensics.sim --model-path sim://kimi-k2.5 ...`` or
``forensics sim serve ...``. Modules: ``args`` (flags and their resolution), ``perf`` (the
speculative-decoding performance model), ``logstyle`` (per-version log formats as data),
``startup`` (the startup sequence), ``engine`` (batching and pacing), ``failures`` (failure
texts), ``ranks`` (child processes), ``server`` (HTTP API and lifecycle).
See docs/simulator.md.
"""
