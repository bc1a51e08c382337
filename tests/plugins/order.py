"""The longest tests start first: test modules ordered by the longest test each holds.

``make test`` runs three workers with ``--dist worksteal``: each worker takes its share of the
collection in order and steals from the other's tail when it runs dry. A long test collected
late (the demo's end-to-end run, minutes on a busy machine) starts when the other worker is
nearly done, and the run waits for it alone. Sorted by the longest test (its setup, call and
teardown together) recorded in ``tests/durations.json``, the indivisible long tests start
first and the short ones fill the ends. Modules stay whole and keep their own order, so a
module-scoped fixture is still built once per worker. A module with no recorded time (a new
one) goes first: its length is unknown, and a long test started last costs the most.

The order changes when tests run, never what they assert. Refresh the file after adding or
changing slow tests: ``pytest -n 3 --dist worksteal -q --record-durations`` (docs/testing.md).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parent.parent / "durations.json"
_per_test: dict[str, float] = defaultdict(float)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write each test module's longest test (seconds) to {DURATIONS.name}",
    )


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def recorded() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    longest = recorded()
    if not longest:
        return
    first_seen: dict[str, int] = {}
    for i, item in enumerate(items):
        first_seen.setdefault(_module(item.nodeid), i)
    unknown = float("inf")
    # stable: the tests of one module keep their relative order (sorted() is stable too)
    items.sort(
        key=lambda it: (
            -longest.get(_module(it.nodeid), unknown),
            first_seen[_module(it.nodeid)],
        )
    )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # on xdist's controller this sees every worker's reports
    _per_test[report.nodeid] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if not config.getoption("record_durations") or hasattr(config, "workerinput"):
        return
    longest: dict[str, float] = {}
    for nodeid, seconds in _per_test.items():
        mod = _module(nodeid)
        longest[mod] = max(longest.get(mod, 0.0), seconds)
    DURATIONS.write_text(
        json.dumps({k: round(v, 1) for k, v in sorted(longest.items())}, indent=1) + "\n"
    )
