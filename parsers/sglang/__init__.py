"""SGLang server logs -> polars frames.

Pure: bytes in, frames out. ``LogParser`` is a streaming parser: ``feed()`` takes any chunk
of bytes (it keeps an unfinished last line for the next call), ``finish()`` flushes it, and
``state()`` / ``LogParser(state=...)`` let an ingest resume a grown file where it stopped.

Two paths share the work:

* ``Prefill batch`` / ``Decode batch`` lines (the bulk of a long log) are parsed vectorised
  with polars string kernels (``metrics``);
* every other line goes through ``RULES`` (``rules``: a table of named patterns whose rows
  carry what the parser does with their lines) in Python: startup stages (``stages``), the
  server_args line (``server_args``), tracebacks (``traceback``) and error lines, warnings,
  uvicorn lines.

Every physical line is counted exactly once in ``Frames.counts`` (by kind), so nothing is
dropped silently: see ``Frames.counts`` and the property tests.

Modules: ``frames`` (schemas, ``Frames``), ``rules``, ``stages``, ``server_args``,
``traceback``, ``metrics``, ``text`` (line ends, timestamps), ``parser`` (``LogParser``).
"""

from forensics_parsers.sglang.frames import (
    DECODE_SCHEMA,
    ERROR_SCHEMA,
    EVENT_SCHEMA,
    LINE_SCHEMA,
    PREFILL_SCHEMA,
    RUN_SCHEMA,
    SCHEMAS,
    Frames,
    empty,
)
from forensics_parsers.sglang.metrics import DECODE_FIELDS, PREFILL_FIELDS, extract_batch
from forensics_parsers.sglang.parser import MAX_LINE, MAX_TEXT, LogParser, parse_bytes, parse_text
from forensics_parsers.sglang.rules import (
    ANSI_RX,
    PREFIX_RX,
    RULES,
    Rule,
    find_rule,
    match_rule,
    stage_of,
)
from forensics_parsers.sglang.server_args import config_from_server_args, parse_server_args

__all__ = [
    "ANSI_RX",
    "DECODE_FIELDS",
    "DECODE_SCHEMA",
    "ERROR_SCHEMA",
    "EVENT_SCHEMA",
    "LINE_SCHEMA",
    "MAX_LINE",
    "MAX_TEXT",
    "PREFILL_FIELDS",
    "PREFILL_SCHEMA",
    "PREFIX_RX",
    "RULES",
    "RUN_SCHEMA",
    "SCHEMAS",
    "Frames",
    "LogParser",
    "Rule",
    "config_from_server_args",
    "empty",
    "extract_batch",
    "find_rule",
    "match_rule",
    "parse_bytes",
    "parse_server_args",
    "parse_text",
    "stage_of",
]
