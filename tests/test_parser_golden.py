"""The parser's output is frozen (fixtures/golden/parser-digests.json, hashes only): every
fixture log, the classifier corpus, the benchmark's line mixes and every real log of
../shared/real-logs-dev parse to the same rows. A change is a deliberate fix: regenerate with
``python scripts/parser_digests.py --write`` and say why in the commit.

Each runs over both paths of the line reader: the compiled one (parsers/sglang/native.py) and
the pure one (``native.ENABLED`` off), and over both paths of a chunk of few lines: Python
(parser.BULK_MIN_LINES) and bulk.

The real corpus is found like tests/test_real_corpus_fields.py finds it (FORENSICS_NO_REAL_LOGS=1
skips that part; without the corpus it fails).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from scripts.parser_digests import GOLDEN, diff, digests, generated_logs, real_logs, repo_logs
from scripts.real_fields import require_corpus

WANT = json.loads(GOLDEN.read_text())


pytestmark = pytest.mark.usefixtures("reader")  # both line readers (tests/conftest.py)


@pytest.fixture(autouse=True, params=["small-in-python", "all-in-bulk"])
def small_chunks(request):
    """Both paths of a chunk of few lines: the Python one it takes (parser.BULK_MIN_LINES)
    and the bulk one a bigger chunk takes: the same frozen rows."""
    from forensics_parsers.sglang import parser

    was = parser.BULK_MIN_LINES
    if request.param == "all-in-bulk":
        parser.BULK_MIN_LINES = 0
    yield request.param
    parser.BULK_MIN_LINES = was


def test_repository_logs_parse_to_the_frozen_rows():
    got = digests(repo_logs())
    assert len(got) > 500
    assert diff(WANT["repo"], got) == []


def test_benchmark_mixes_parse_to_the_frozen_rows():
    with tempfile.TemporaryDirectory() as tmp:
        got = digests(generated_logs(Path(tmp)))
    assert diff(WANT["generated"], got) == []


def test_real_logs_parse_to_the_frozen_rows():
    got = digests(real_logs(require_corpus()))
    assert len(got) == 68
    assert diff(WANT["real"], got) == []


@pytest.mark.parametrize("reader", ["pure"], indirect=True)
def test_a_digest_sees_a_changed_value_but_not_a_reordering():
    import polars as pl

    from scripts.parser_digests import table_digest

    df = pl.DataFrame(
        {"line": [1, 2], "accept_len": [2.5, 3.0]}, schema_overrides={"accept_len": pl.Float32}
    )
    base = table_digest(df)
    assert table_digest(df.reverse()) == base
    assert table_digest(df.with_columns(pl.col("accept_len") + 0.01)) != base
    assert table_digest(df.with_columns(pl.col("accept_len").cast(pl.Float64))) != base
