"""What one benchmark found: :class:`BenchReport` (its requests, figures, /health samples and
how it ended), as the JSON ``forensics bench --json`` prints."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from forensics.bench.client import RequestResult
from forensics.bench.config import BenchConfig
from forensics.bench.health import HealthSample


@dataclass
class BenchReport:
    config: BenchConfig
    bench_id: str
    started_at: dt.datetime
    duration_s: float
    results: list[RequestResult]
    summary: dict[str, Any]
    interrupted: bool = False
    deadline_hit: bool = False
    server_dead: bool = False
    death: str | None = None  # what the health check saw
    flush: str = "skipped"  # ok | unsupported | failed: ... | skipped
    accept_len_server: float | None = None
    accept_len_server_scope: str | None = None  # window (after flush) | lifetime
    accept_len_log: float | None = None  # the run's Decode batch lines in the bench window
    accept_len_log_lines: int = 0
    server_version: str | None = None
    server_info: dict[str, Any] | None = None
    warmup_failed: int = 0
    run_id: str | None = None
    run_name: str | None = None
    health: dict[str, Any] = field(default_factory=dict)  # health_summary()
    health_samples: list[HealthSample] = field(default_factory=list)
    via: str | None = None  # "ssh HOST": the requests went through an SSH tunnel
    warnings: list[str] = field(default_factory=list)  # answers past their byte cap

    @property
    def failure_rate(self) -> float:
        n = self.summary["completed"] + self.summary["failed"]
        return self.summary["failed"] / n if n else 0.0

    def as_dict(self) -> dict[str, Any]:
        cfg = asdict(self.config)
        out = {
            "bench_id": self.bench_id,
            "run_id": self.run_id,
            "run_name": self.run_name,
            "url": self.config.url,
            "via": self.via,
            "api": self.config.api,
            "mode": self.config.mode,
            "concurrency": self.config.concurrency,
            "rate": self.config.rate,
            "num_prompts": len(self.results),
            "started_at": self.started_at.isoformat(timespec="milliseconds"),
            "duration_s": self.duration_s,
            "interrupted": self.interrupted,
            "deadline_hit": self.deadline_hit,
            "server_dead": self.server_dead,
            "death": self.death,
            "flush_cache": self.flush,
            "accept_len_server": self.accept_len_server,
            "accept_len_server_scope": self.accept_len_server_scope,
            "accept_len_log": self.accept_len_log,
            "accept_len_log_lines": self.accept_len_log_lines,
            "server_version": self.server_version,
            "warmup_failed": self.warmup_failed,
            "failure_rate": self.failure_rate,
            "config": cfg,
        }
        out.update(self.summary)
        out["health"] = {**self.health, "samples": [asdict(h) for h in self.health_samples]}
        if self.warnings:
            out["warnings"] = self.warnings
        return out


def iter_failures(rep: BenchReport) -> Iterable[tuple[str, int, str]]:
    """(reason, count, first detail) for reporting."""
    f = rep.summary["failures"]
    for reason, count in sorted(f["reasons"].items(), key=lambda kv: -kv[1]):
        yield reason, count, f["first_detail"].get(reason, "")
