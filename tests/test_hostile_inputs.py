"""Hostile inputs of issue 14's "Bounded everything" class: one log source for every reader.

* compressed or binary files named .log (gzip, zstd, xz, bzip2, lz4 read; archives, executables,
  random bytes refused as what they are; damaged / truncated gzip keeps what decodes);
* non-regular inputs (FIFO, socket, devices, symlink loops, names over NAME_MAX, ``file.log/``)
  refused with the reason and exit 2 by ingest, classify and diagnose --log, never a hang;
* ``classify`` and ``ingest`` read the UTF-16 fixture as they read its UTF-8 original.

docs/bad-inputs.md ("Bounded everything") lists each case and the mechanism.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import socket
from pathlib import Path

import lz4.frame
import polars as pl
import pytest
import zstandard

from forensics.cli import main
from forensics.errors import NotALog, StreamDamaged
from forensics.hosts import LocalHost
from forensics.logsource import open_log
from forensics.store import Store

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"
LOG = FIX / "sglang_fail_load_kv_oom.log"  # a load-phase failure: kv_pool_oom
SERVED = FIX / "sglang_fail_runtime_ima.log"  # ready, decode lines, then a CUDA error


def run(capsys, *args: str, store: str | Path = "st") -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(["--store", str(store), *args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def _verdicts(capsys, path: Path) -> list[dict]:
    code, out, err = run(capsys, "classify", "--json", str(path))
    assert code == 0, err
    return [{k: v for k, v in d.items() if k != "path"} for d in json.loads(out)]


ENCODERS = {
    "gzip": gzip.compress,
    "xz": lzma.compress,
    "bzip2": bz2.compress,
    "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
    "lz4": lz4.frame.compress,
    "utf-16-be": lambda b: b"\xfe\xff" + b.decode().encode("utf-16-be"),
    "utf-32": lambda b: b.decode().encode("utf-32"),
    "utf-8-bom": lambda b: b"\xef\xbb\xbf" + b,
    "gzip-of-utf-16": lambda b: gzip.compress(b"\xff\xfe" + b.decode().encode("utf-16-le")),
}


def test_every_format_reads_as_its_plain_original(tmp_path, capsys):
    """One table of formats: classify and ingest see the same runs in every encoding."""
    plain = _verdicts(capsys, LOG)
    assert plain[0]["signature"] == "kv_pool_oom"
    data = LOG.read_bytes()
    ref = b"".join(open_log(LocalHost(), str(LOG)).chunks())
    for name, enc in ENCODERS.items():
        p = tmp_path / f"x-{name}.log"
        p.write_bytes(enc(data))
        src = open_log(LocalHost(), str(p))
        assert b"".join(src.chunks()) == ref, name
        assert _verdicts(capsys, p) == plain, name
    code, out, err = run(capsys, "ingest", "--json", str(tmp_path))
    assert code == 0, err
    lines = {Path(f["path"]).name: f["lines"] for f in json.loads(out)["file_details"]}
    assert set(lines.values()) == {data.count(b"\n")}, lines


def test_utf16_fixture_classify_and_ingest_agree(tmp_path, capsys):
    """P26: the UTF-16 fixture reads as its UTF-8 original in classify and in ingest."""
    u16 = FIX / "edge_utf16.log"
    assert u16.read_bytes()[:2] == b"\xff\xfe"
    assert _verdicts(capsys, u16) == _verdicts(capsys, LOG)
    tables = {}
    for p in (u16, LOG):
        code, _, err = run(capsys, "ingest", str(p), store=tmp_path / p.stem)
        assert code == 0, err
        st = Store(tmp_path / p.stem)
        tables[p] = {t: st.table(t).drop("source_id") for t in ("events", "errors", "lines")}
    for t in ("events", "errors", "lines"):
        assert tables[u16][t].equals(tables[LOG][t]), t
    code, out, _ = run(capsys, "runs", "--json", store=tmp_path / u16.stem)
    assert code == 0
    assert json.loads(out)[0]["error"] and "memory" in json.loads(out)[0]["error"].lower()


def test_binary_files_named_log_are_reported_as_what_they_are(tmp_path, capsys):
    """Never a run "hung before exec": archives, executables, parquet, random bytes."""
    cases = {
        "zip": (b"PK\x03\x04" + os.urandom(300), "zip archive"),
        "elf": ((FIX / "binary.log").read_bytes(), "ELF executable"),
        "parquet": (b"PAR1" + os.urandom(300), "parquet file"),
        "random": (bytes(range(32)) * 64, "binary data"),
        "gzip-of-random": (gzip.compress(bytes(range(32)) * 64), "gzip-compressed binary data"),
    }
    for name, (data, what) in cases.items():
        p = tmp_path / f"{name}.log"
        p.write_bytes(data)
        with pytest.raises(NotALog, match=what):
            open_log(LocalHost(), str(p))
        code, out, err = run(capsys, "classify", str(p))
        assert code == 2 and what in err and "pre-exec" not in out + err, (name, err)
        assert err.count("\n") == 1 and "Traceback" not in err
    # in a folder with a real log: the log is ingested, each binary named in a warning
    (tmp_path / "ok.log").write_bytes(LOG.read_bytes())
    code, out, err = run(capsys, "ingest", "--json", str(tmp_path))
    assert code == 0, err
    summary = json.loads(out)
    assert summary["files_skipped"] == {"binary": len(cases)}
    for name in cases:
        assert f"{tmp_path / name}.log: " in "\n".join(summary["warnings"]), name
    # alone, a binary file is the command's error (exit 2), not an empty success
    code, _, err = run(capsys, "ingest", str(tmp_path / "zip.log"), store="st2")
    assert code == 2 and "zip archive" in err


def _damaged(data: bytes, where: float) -> bytes:
    z = bytearray(gzip.compress(data))
    i = int(len(z) * where)
    z[i : i + 64] = b"\xaa" * 64
    return bytes(z)


def test_damaged_and_truncated_gzip_keep_what_decodes(tmp_path, capsys):
    """Damaged halfway: what decodes is kept and said so; truncated is not "Interrupted."."""
    data = (
        SERVED.read_bytes() + b"".join(p.read_bytes() for p in sorted(FIX.glob("sglang_*.log")))
    ) * 4
    full = gzip.compress(data)
    cases = {
        "damaged": _damaged(data, 0.6),
        "truncated": full[: len(full) * 3 // 4],
    }
    for name, blob in cases.items():
        p = tmp_path / f"{name}.log"
        p.write_bytes(blob)
        with pytest.raises(StreamDamaged) as exc:
            b"".join(open_log(LocalHost(), str(p)).chunks())
        assert exc.value.truncated == (name == "truncated")
        assert exc.value.kept > len(data) // 3, (name, exc.value.kept)
        code, out, err = run(capsys, "classify", "--json", str(p))
        assert code == 0 and "Interrupted" not in err, (name, err)
        assert f"gzip stream is {name}" in err and "kept the" in err
        assert json.loads(out)[0]["phase"]  # a verdict from what decoded
        code, out, err = run(capsys, "ingest", "--json", str(p), store=tmp_path / f"st-{name}")
        assert code == 0 and "Interrupted" not in err, (name, err)
        summary = json.loads(out)
        assert summary["compressed_truncated"] == 1 and summary["lines_total"] > 1000
        code, out, err = run(capsys, "diagnose", "x", "--log", str(p))
        assert code == 0 and f"warning: {p}: gzip stream is {name}" in out, (name, out, err)
    # cut inside its first block: nothing decodes; unreadable (exit 3), never a hung run
    p = tmp_path / "stub.log"
    p.write_bytes(gzip.compress(LOG.read_bytes())[:40])
    code, out, err = run(capsys, "classify", str(p))
    assert code == 3 and "nothing decoded" in err and "pre-exec" not in out


def _non_regular(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """name -> (path, what the error must say)."""
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    sock = tmp_path / "sock.log"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock))
    s.close()
    loop = tmp_path / "loop.log"
    loop.symlink_to(tmp_path / "loop2.log")
    (tmp_path / "loop2.log").symlink_to(loop)
    afile = tmp_path / "afile.log"
    afile.write_bytes(LOG.read_bytes())
    return {
        "fifo": (str(fifo), "is a FIFO (named pipe), not a regular file"),
        "socket": (str(sock), "is a socket, not a regular file"),
        "zero": ("/dev/zero", "is a character device, not a regular file"),
        "urandom": ("/dev/urandom", "is a character device, not a regular file"),
        "loop": (str(loop), "symbolic link loop"),
        "long": (str(tmp_path / ("x" * 300 + ".log")), "name too long"),
        "slash": (f"{afile}/", "is a file, not a directory"),
    }


@pytest.mark.timeout(120)  # a hang (the bug) fails here instead of stalling the suite
def test_non_regular_inputs_are_refused_not_read(tmp_path, capsys):
    """A FIFO must not hang, a device must not stream forever: exit 2 with the reason."""
    for name, (path, why) in _non_regular(tmp_path).items():
        for cmd in (["ingest"], ["classify"], ["diagnose", "x", "--log"]):
            code, out, err = run(capsys, *cmd, path)
            assert code == 2, (name, cmd, code, err)
            assert why in err and err.startswith("Error: ") and err.count("\n") == 1, (name, err)
    # among real logs, a FIFO is skipped with its reason; the rest is ingested
    d = tmp_path / "mixed"
    d.mkdir()
    os.mkfifo(d / "pipe.log")
    (d / "ok.log").write_bytes(LOG.read_bytes())
    code, out, err = run(capsys, "ingest", "--json", str(d))
    assert code == 0, err
    summary = json.loads(out)
    assert summary["files_skipped"] == {"not-regular": 1}
    assert (
        f"{d / 'pipe.log'}: is a FIFO (named pipe), not a regular file (skipped)"
        in (summary["warnings"])
    )


def test_classify_memory_is_bounded_by_a_run_not_the_file(tmp_path):
    """classify streams: a run's rows are dropped once the next begins, and each table of the
    run in progress is cut to its cap (KEEP_ROWS), whatever the file's size."""
    from forensics import classifier as C

    block = SERVED.read_bytes()
    noise = b"".join(b"[2026-01-01 00:00:00] worker note %d\n" % i for i in range(30_000))
    p = tmp_path / "many.log"
    p.write_bytes(block + noise + block)
    seen: list[int] = []
    orig = C.stream.analyze  # where the streaming classifier looks it up

    def spy(tables, run_index, **kw):
        seen.append(max((len(df) for df in tables.values() if not df.is_empty()), default=0))
        return orig(tables, run_index, **kw)

    C.stream.analyze = spy
    try:
        verdicts = C.classify_source(open_log(LocalHost(), str(p)), C.load_model(None))
    finally:
        C.stream.analyze = orig
    assert [v.signature for v in verdicts][-1] == "illegal_memory_access"
    assert max(seen) <= 2 * max(C.KEEP_ROWS.values()), seen
    # the whole-file parse kept every noise line of the run
    whole = C.parse_path(p).lines
    assert len(whole.filter(pl.col("kind") == "unknown")) >= 30_000


def test_streamed_classify_agrees_with_the_whole_parse_on_real_logs(shared_dir, monkeypatch):
    """Streaming one run at a time (2 KiB chunks for files up to 64 KiB, 32 KiB above, so runs
    and tracebacks straddle chunk ends) gives exactly the verdicts of parsing the whole file
    in ingest's own chunks: the 68 real logs and the fixtures."""
    from forensics import classifier as C
    from forensics import logsource

    model = C.load_model(None)
    files = sorted((shared_dir / "real-logs-dev").glob("*.log")) + sorted(FIX.glob("*.log*"))
    checked = 0
    whole_chunk = logsource.READ_CHUNK
    for f in files:
        if f.name == "binary.log":
            continue
        monkeypatch.setattr(logsource, "READ_CHUNK", whole_chunk)
        src = open_log(LocalHost(), str(f))
        whole = C.analyses_for(C.parse_path(f), src.where, mtime=src.stat.mtime)
        small = 2048 if f.stat().st_size <= 65536 else 32768
        monkeypatch.setattr(logsource, "READ_CHUNK", small)
        src = open_log(LocalHost(), str(f))
        want = [C.verdict(a, model).as_dict() for a in whole]
        assert [v.as_dict() for v in C.classify_source(src, model)] == want, f
        checked += 1
    assert checked >= 80


@pytest.mark.ssh
@pytest.mark.timeout(180)
def test_remote_logs_read_through_the_same_source(ssh_config, tmp_path, capsys):
    """Over SFTP (a real sshd): a FIFO is refused from its stat (no hang), an xz or UTF-16
    log reads as its plain original."""
    d = tmp_path / "remote"
    d.mkdir()
    os.mkfifo(d / "fifo.log")
    (d / "x.log").write_bytes(lzma.compress(LOG.read_bytes()))
    (d / "u16.log").write_bytes((FIX / "edge_utf16.log").read_bytes())
    for cmd in (["ingest"], ["classify"], ["diagnose", "x", "--log"]):
        code, _, err = run(capsys, *cmd, f"sshtest:{d}/fifo.log")
        assert code == 2 and "is a FIFO (named pipe), not a regular file" in err, (cmd, err)
    plain = _verdicts(capsys, LOG)
    for name in ("x.log", "u16.log"):
        assert _verdicts(capsys, Path(f"sshtest:{d}/{name}")) == plain, name
