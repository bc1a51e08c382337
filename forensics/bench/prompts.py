"""The prompts a benchmark sends: the built-in set, random prompts of a given length, or a
dataset file (JSONL with "prompt"/"text", ShareGPT conversations)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import InputNotFound, ParseError, UsageError

if TYPE_CHECKING:
    from forensics.bench.config import BenchConfig


@dataclass(frozen=True)
class Prompt:
    text: str | None = None
    input_ids: tuple[int, ...] | None = None  # native API only (--random-input-len)
    approx_tokens: int = 0


# The built-in set: fixed topics, each prompt padded to the same length so runs compare.
_TOPICS = (
    "how a CPU cache hierarchy hides memory latency",
    "the history of the printing press and its effect on science",
    "how speculative decoding speeds up language-model inference",
    "why the sky is blue and sunsets are red",
    "how public-key cryptography lets strangers agree on a secret",
    "the water cycle and its role in shaping climate",
    "how a compiler turns source code into machine instructions",
    "the life cycle of a star from nebula to remnant",
    "how vaccines train the immune system",
    "the design of a distributed key-value store",
    "how GPS receivers compute their position",
    "the causes and consequences of the industrial revolution",
    "how transformers use attention to model language",
    "how a bicycle stays upright while moving",
    "the chemistry of baking bread",
    "how TCP recovers from lost packets",
)
_FILLER = (
    "Explain each step carefully, give concrete examples, define every term you use, "
    "and point out common misconceptions along the way. "
)
BUILTIN_PROMPT_WORDS = 120


def builtin_prompts() -> list[Prompt]:
    out = []
    for topic in _TOPICS:
        words = f"Write a detailed, well-structured essay about {topic}. ".split()
        filler = _FILLER.split()
        i = 0
        while len(words) < BUILTIN_PROMPT_WORDS:
            words.append(filler[i % len(filler)])
            i += 1
        out.append(Prompt(text=" ".join(words), approx_tokens=int(len(words) * 1.3)))
    return out


# Short common English words: about one token each in the usual BPE vocabularies.
_VOCAB = (
    "the of and to in is it that for on was with as at by be this are from or have an they "
    "which one you were all we there can been has more if will would what so when who no "
    "out up into just some could them than then now only its time new over also after"
).split()


def random_prompts(input_len: int, count: int, *, seed: int, ids: bool) -> list[Prompt]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        if ids:
            # Token ids in a range every real vocabulary covers; exact input length.
            out.append(
                Prompt(
                    input_ids=tuple(rng.randrange(1000, 20000) for _ in range(input_len)),
                    approx_tokens=input_len,
                )
            )
        else:
            text = " ".join(rng.choice(_VOCAB) for _ in range(input_len))
            out.append(Prompt(text=text, approx_tokens=input_len))
    return out


def load_dataset(path: str | Path) -> list[Prompt]:
    """JSONL with "prompt"/"text" per line, or ShareGPT-style conversations (JSON or JSONL)."""
    p = Path(path)
    from forensics.errors import FileMissing, NotRegularFile
    from forensics.userfile import read_user_file

    try:  # a FIFO, device or oversized file is refused before a read (issue 14)
        raw = read_user_file(str(path), "dataset").decode("utf-8-sig")  # as typed
    except FileMissing:
        raise InputNotFound(
            f"{p}: no such dataset file", hint="pass a JSONL or ShareGPT JSON file"
        ) from None
    except NotRegularFile:
        if p.is_dir():
            raise UsageError(f"{p}: is a folder, not a dataset file") from None
        raise
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{p}: the dataset is not UTF-8 text ({exc.reason} at byte {exc.start})",
            hint='pass a JSONL file with "prompt"/"text" or a ShareGPT JSON file',
        ) from None
    except OSError as exc:
        raise InputNotFound(
            f"{p}: cannot read the dataset ({exc.strerror or exc})", hint="check its mode"
        ) from None
    records: list[Any]
    stripped = raw.lstrip()
    if stripped.startswith("["):
        try:
            records = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ParseError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        lines = list(range(1, len(records) + 1))
    else:
        records, lines = [], []
        for no, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ParseError(
                    f"{p}:{no}: not a JSON object ({exc.msg})",
                    hint='one object per line with "prompt" or "text"',
                ) from None
            lines.append(no)
    prompts = []
    for no, rec in zip(lines, records):
        text = _prompt_of(rec)
        if text is None:
            raise ParseError(
                f"{p}:{no}: no prompt in this record",
                hint='give "prompt" or "text", or ShareGPT "conversations"',
            )
        if text.strip():
            prompts.append(Prompt(text=text, approx_tokens=int(len(text.split()) * 1.3)))
    if not prompts:
        raise UsageError(f"{p}: the dataset holds no prompts")
    return prompts


def _prompt_of(rec: Any) -> str | None:
    if isinstance(rec, str):
        return rec
    if not isinstance(rec, dict):
        return None
    for key in ("prompt", "text"):
        if isinstance(rec.get(key), str):
            return rec[key]
    conv = rec.get("conversations") or rec.get("messages")
    if isinstance(conv, list):
        for turn in conv:
            if not isinstance(turn, dict):
                continue
            who = turn.get("from", turn.get("role"))
            value = turn.get("value", turn.get("content"))
            if who in ("human", "user") and isinstance(value, str):
                return value
    return None


def make_prompts(cfg: BenchConfig, count: int) -> list[Prompt]:
    if cfg.dataset:
        return load_dataset(cfg.dataset)
    if cfg.random_input_len:
        return random_prompts(
            cfg.random_input_len, max(count, 1), seed=cfg.seed, ids=cfg.api == "native"
        )
    return builtin_prompts()
