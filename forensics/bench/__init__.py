"""The benchmark client (forensics/bench/): being split into one module a noun."""

from forensics.bench.runner import *  # noqa: F403
