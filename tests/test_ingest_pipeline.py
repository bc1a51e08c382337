"""Ingest runs the metrics extraction of chunk k in a worker thread while the parser reads
chunk k+1 (forensics/ingest.py, ``LogParser.feed_split``): the tables must be exactly those of
one sequential pass, no thread may outlive an ingest, and an interrupt (Ctrl-C) in either
thread must leave the store as it was."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import forensics.logsource as logsource
import forensics_parsers.sglang as S
from forensics.ingest import ingest, source_id
from forensics.store import Store

FIX = Path(__file__).resolve().parent.parent / "fixtures"
# several launches appended (run boundaries mid-file), tracebacks, CRLF, ANSI/tqdm bars,
# interleaved ranks, a Python-logging fork, time-only prefixes (date from the file's mtime)
PARTS = [
    "sglang_two_launches.log",
    "sglang_eagle3_cg_16dt.log",
    "edge_crlf.log",
    "sglang_fail_runtime_ima.log",
    "edge_ansi_tqdm.log",
    "edge_interleaved_ranks.log",
    "edge_pylogging_fork.log",
    "edge_time_only_2024.log",
    "sglang_eagle3_nocg_16dt.log",
]
MTIME = 1_780_000_000  # fixed, so the date hint of time-only lines is known


def _metrics(n: int, seed: int) -> bytes:
    """Decode/Prefill lines in the layouts the vectorised path meets (fractions, iteration
    tags, DP ranks, percents, unknown keys), so many chunks hold only metrics lines."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ss = f"{i // 60 % 60:02d}:{i % 60:02d}"
        frac = f".{rng.randint(0, 999):03d}" if rng.random() < 0.2 else ""
        tag = rng.choice(["TP0", "DP1 TP3", "TP0 EP2"])
        it = f" [{i}]" if rng.random() < 0.1 else ""
        if rng.random() < 0.1:
            out.append(
                f"[2026-06-07 11:{ss}{frac} {tag}] Prefill batch{it}, #new-seq: 1, "
                f"#new-token: {rng.randint(1, 900)}, #cached-token: 0, token usage: 0.{i % 97:02d}, "
                f"#running-req: {rng.randint(0, 9)}, #queue-req: 0, input throughput (token/s): 12.5"
            )
        else:
            usage = (
                f"{rng.randint(0, 99)}%" if rng.random() < 0.1 else f"0.{rng.randint(0, 99):02d}"
            )
            extra = ", pending-x: 7" if rng.random() < 0.05 else ""
            out.append(
                f"[2026-06-07 11:{ss}{frac} {tag}] Decode batch{it}, #running-req: {rng.randint(1, 48)}, "
                f"#token: {rng.randint(1, 9999)}, token usage: {usage}, accept len: 2.{i % 10}0, "
                f"accept rate: 0.30, cuda graph: True, gen throughput (token/s): {rng.uniform(1, 900):.2f}, "
                f"#queue-req: 0{extra}"
            )
    return ("\n".join(out) + "\n").encode()


def _log(tmp_path: Path, tail: bytes = b"") -> Path:
    data = b"".join((FIX / p).read_bytes() + _metrics(300, i) for i, p in enumerate(PARTS))
    data += tail
    path = tmp_path / "combined.log"
    path.write_bytes(data)
    os.utime(path, (MTIME, MTIME))
    return path


def _one_pass(path: Path, chunk: int | None = None) -> tuple[S.Frames, dict]:
    """The sequential path: one parser fed the file whole, or in ``chunk``-byte pieces."""
    hint = time.strftime("%Y-%m-%d", time.localtime(MTIME))
    p = S.LogParser(str(path), date_hint=hint)
    data = path.read_bytes()
    step = chunk or len(data)
    body = [p.feed(data[i : i + step]) for i in range(0, len(data), step)]
    # the state at the resume point, as ingest saves it: before finish() parses the pending
    # bytes (which would change the run records the state holds)
    state = json.loads(json.dumps(p.state(), default=str))
    return S.Frames.concat([*body, p.finish()]), state


def _no_worker_left() -> bool:
    return not any(t.name.startswith("forensics-") for t in threading.enumerate())


@pytest.mark.parametrize("chunk", [4096, 16384])
def test_pipelined_ingest_equals_one_sequential_pass(tmp_path, monkeypatch, chunk):
    """Many small chunks (so many in flight across run boundaries) -> the same rows, in the
    same order, as parse of the whole file; the same resume state; no worker thread left."""
    path = _log(tmp_path, tail=b"[2026-06-07 10:00:00 TP0] Decode batch, #running-req: 3")
    assert path.stat().st_size > 8 * chunk
    monkeypatch.setattr(logsource, "READ_CHUNK", chunk)
    store = Store(tmp_path / "st")
    summary = ingest(store, [str(path)])
    assert summary.files[0].status == "new"
    assert _no_worker_left()

    sid = source_id("local", str(path))
    stored = {}
    for name in ("events", "decode", "prefill", "errors", "lines"):
        got = store.table(name)
        stored[name] = got.filter(pl.col("source_id") == sid).drop("source_id")
    # 1) exactly the rows, in order, of the sequential loop over the same chunks
    seq, seq_state = _one_pass(path, chunk)
    for name, got in stored.items():
        assert_frame_equal(got, getattr(seq, name), check_dtypes=False)
    # 2) and of one pass over the whole file (both metrics paths write `extra` verbatim)
    want, want_state = _one_pass(path)
    assert want.decode.height > 2000 and want.prefill.height > 0 and want.errors.height > 0
    for name, got in stored.items():
        assert_frame_equal(got, getattr(want, name), check_dtypes=False)
    runs = store.table("runs").drop("source_id", "path", "host_name")
    assert_frame_equal(runs, want.runs, check_dtypes=False)
    assert want.runs.height >= 2  # the appended launches were told apart
    states = store.table("states").filter(pl.col("source_id") == sid)["state"].to_list()
    # the resume state (the states table, since schema 4) is the sequential loop's (in a
    # one-pass parse `serving` may sit later in a run's stage list: where the batch lines
    # are met depends on the chunks)
    assert [json.loads(s) for s in states] == [json.loads(json.dumps(seq_state, default=str))]
    # counts: every physical line once, as in the one pass
    assert summary.counts == {k: v for k, v in want.counts.items() if v}
    assert summary.as_dict()["decode_lines"] == want.decode.height


@pytest.mark.parametrize("stage", ["feed_lines", "split_lines"])
def test_interrupt_in_the_reading_thread_leaves_the_store_as_it_was(tmp_path, monkeypatch, stage):
    """Ctrl-C while the parser parses chunk 3 (feed_lines; the worker busy with chunk 2, the
    splitting thread with chunk 4), or while chunk 3 is split (split_lines, in its own
    thread, reaching the caller through the chunks): nothing stored."""
    path = _log(tmp_path)
    monkeypatch.setattr(logsource, "READ_CHUNK", 8192)
    real = getattr(S.LogParser, stage)
    calls = {"n": 0}

    def fail_third(self, data):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(self, data)

    monkeypatch.setattr(S.LogParser, stage, fail_third)
    store = Store(tmp_path / "st")
    summary = ingest(store, [str(path)])
    assert summary.interrupted and summary.files == []
    assert store.sources() == {}
    assert store.table("decode").is_empty()
    assert not list((tmp_path / "st").rglob("*.parquet*"))
    assert _no_worker_left()


def test_interrupt_in_the_worker_propagates_and_stores_nothing(tmp_path, monkeypatch):
    """An exception in the worker (here an interrupt) reaches the caller; the file's
    transaction is aborted; a later ingest stores it in full."""
    path = _log(tmp_path)
    monkeypatch.setattr(logsource, "READ_CHUNK", 8192)
    real = S.extract_batch
    calls = {"n": 0}

    def extract(prepared):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(prepared)

    monkeypatch.setattr(S, "extract_batch", extract)
    store = Store(tmp_path / "st")
    summary = ingest(store, [str(path)])
    assert summary.interrupted
    assert store.sources() == {}
    assert _no_worker_left()
    monkeypatch.setattr(S, "extract_batch", real)
    again = ingest(Store(tmp_path / "st"), [str(path)])
    assert again.files[0].status == "new"
    assert Store(tmp_path / "st").table("decode").height == _one_pass(path)[0].decode.height


def test_feed_split_then_extract_equals_feed():
    """The split API: counts and runs come with the frames, the fields from extract_batch."""
    data = b"".join((FIX / p).read_bytes() for p in PARTS[:4])
    a = S.LogParser("x")
    whole = a.feed(data)
    b = S.LogParser("x")
    frames, prepared = b.feed_split(data)
    assert frames.decode.is_empty() and prepared is not None
    assert frames.counts == whole.counts
    assert b.state() == a.state()
    decode, prefill = S.extract_batch(prepared)
    assert_frame_equal(decode, whole.decode)
    assert_frame_equal(prefill, whole.prefill)


def test_an_unchanged_reingest_imports_no_polars_and_an_interrupted_verdict_step_is_caught_up(
    tmp_path,
):
    """Issue 15's unchanged re-ingest stays light: the pending-verdicts marker in the manifest
    (set by the commit of changed logs, cleared with their verdicts) is all it reads, so no
    polars is imported; with the marker still set (an ingest stopped before its verdict step)
    the next ingest stores the verdicts that ingest left out."""
    import json
    import subprocess
    import sys

    from forensics.ingest.outcome import VERDICTS_PENDING
    from forensics.store import Store
    from forensics.verdicts import TABLE, unverdicted

    log = tmp_path / "x.log"
    log.write_text((FIX / "sglang_eagle3_cg_5dt.log").read_text())
    env = {**os.environ, "FORENSICS_HOME": str(tmp_path / "st")}
    probe = (
        "import atexit, sys; atexit.register(lambda: print('polars' in sys.modules));"
        "from forensics.entry import main; main()"
    )

    def ingest() -> list[str]:
        p = subprocess.run(
            [sys.executable, "-c", probe, "ingest", str(log)], env=env, capture_output=True
        )
        assert p.returncode == 0, p.stderr
        return p.stdout.decode().split()

    assert ingest()[-1] == "True"  # a new log: parsed and classified
    manifest = tmp_path / "st" / "manifest.json"
    assert json.loads(manifest.read_text())["meta"].get(VERDICTS_PENDING) is None
    assert ingest()[-1] == "False"  # unchanged: the manifest alone answers
    # an ingest stopped between its commit and its verdict step
    st = Store.open(tmp_path / "st")
    with st.transaction() as tx:
        tx.drop_rows(TABLE, pl.lit(False))  # keep none
        tx.set_meta(VERDICTS_PENDING, True)
    assert unverdicted(Store.open(tmp_path / "st"))
    assert ingest()[-1] == "True"
    assert unverdicted(Store.open(tmp_path / "st")) == set()
    assert json.loads(manifest.read_text())["meta"].get(VERDICTS_PENDING) is None


def test_the_verdict_steps_imports_run_beside_the_parse_and_end_with_the_ingest(
    tmp_path, monkeypatch
):
    """Issue 15: a parse starts forensics.verdicts.warm in a thread of its own (the
    classifier's imports, the packaged model); the verdict step starts after it ended, no
    such thread outlives the ingest, and an unchanged re-ingest starts none."""
    import forensics.verdicts as verdicts

    path = _log(tmp_path)
    events: list[tuple[str, str]] = []
    real_warm, real_refresh = verdicts.warm, verdicts.refresh

    def warm() -> None:
        real_warm()
        events.append(("warmed", threading.current_thread().name))

    def refresh(*args, **kwargs):
        events.append(("refresh", threading.current_thread().name))
        return real_refresh(*args, **kwargs)

    monkeypatch.setattr(verdicts, "warm", warm)
    monkeypatch.setattr(verdicts, "refresh", refresh)
    store = Store(tmp_path / "st")
    assert ingest(store, [str(path)]).files[0].status == "new"
    main = threading.main_thread().name
    assert events == [("warmed", "forensics-verdicts-warm"), ("refresh", main)]
    assert not [t for t in threading.enumerate() if t.name == "forensics-verdicts-warm"]
    assert not Store(tmp_path / "st").table(verdicts.TABLE).is_empty()  # verdicts stored
    events.clear()
    assert ingest(Store(tmp_path / "st"), [str(path)]).files[0].status == "unchanged"
    assert events == []


def test_the_content_hash_computed_beside_the_reads_is_the_files_digest(tmp_path):
    """Issue 15: fed in order with overlapping and repeated reads, and with mutable buffers,
    the digest is the file's xxh3_128 (and, for an old store's record, its sha1) whichever
    way; inside ``beside`` the sha1 updates run in a thread of their own, which ends with the
    block, and the xxh3 ones in the reading thread (no thread: the handover cost more)."""
    import hashlib

    import xxhash

    from forensics.ingest.hashing import HASHES, _Hasher

    rng = random.Random(7)
    data = b"".join(b"line %d %x\n" % (i, rng.getrandbits(64)) for i in range(150_000))
    want = "xxh3_128:" + xxhash.xxh3_128(data).hexdigest()
    old = hashlib.sha1(data).hexdigest()  # a record of a store written before xxh3
    step = 256 << 10
    reads = [(p, data[p : p + step]) for p in range(0, len(data), step)]
    reads.insert(3, reads[1])  # a chunk read again: already hashed, skipped
    reads.insert(5, (reads[4][0] - 100, data[reads[4][0] - 100 : reads[4][0] + 50]))  # overlap
    for like in (None, old):
        for beside in (False, True):
            for mutable in (False, True):
                h = _Hasher(like=like)
                threads = set()
                with h.beside() if beside else _null():
                    for pos, chunk in reads:
                        h.feed(pos, bytearray(chunk) if mutable else chunk)
                        threads |= {t.name for t in threading.enumerate()}
                assert (h.digest(), h.size) == (want, len(data))
                if like:
                    assert h.digest(HASHES["sha1"]) == old
                assert ("forensics-hash" in threads) == (beside and like is not None)
                assert not [t for t in threading.enumerate() if t.name == "forensics-hash"]
    log = tmp_path / "x.log"
    log.write_bytes(data)
    src = logsource.open_log(_local(), str(log), hasher=(h := _Hasher()))
    assert h.of_file(src, len(data), like=want) == want
    h.reset()
    # an old record's sha1: hashed from byte 0 again in its algorithm, then xxh3 alone
    assert h.of_file(src, len(data), like=old) == old
    assert h.digest() == want and h.algs == (HASHES["xxh3_128"],)
    assert h.of_file(src, len(data) + 1, like=want) is None  # the file is shorter
    assert h.of_file(src, len(data), like="md9:00") is None  # an algorithm not known here


def _null():
    from contextlib import nullcontext

    return nullcontext()


def _local():
    from forensics.hosts import get_host

    return get_host(None)
