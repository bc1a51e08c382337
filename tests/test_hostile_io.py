"""Issue 14 hostile cases, third round: the other members of the data-loss, secrets and
non-regular-input classes (docs/bad-inputs.md, "Third round").

* "Output paths" (data loss): nothing inside forensics' home is ever an output (`report -o
  $FORENSICS_HOME/manifest.json` replaced the store's manifest with HTML); a device reached
  through a magic link (`-o /dev/stdout` on a pipe) is written in place
  (forensics/output.py, `check_out_path`).
* "Secrets": provider tokens known by their prefix (AWS key ids, GitHub, GitLab, Slack, Google,
  JWTs, a one-line PEM private key), `key = value` with spaces, `redis://:pw@` with no user
  never reach a table (parsers/secrets.py `RULES`); an address `user:password@host` (SSH
  errors, `hosts list`) and every `--json`/table/CSV output pass through forensics/urls.py
  (`URL_SECRETS`).
* "Interrupts": SIGTERM and SIGHUP are handled as Ctrl-C (forensics/entry.py
  `INTERRUPT_SIGNALS`): what was finished is committed, the store stays consistent, exit 130.
* "Odd names": ingest of a file whose name is not UTF-8 is a skip with its reason (exit 2 when
  it is the only input), not an internal error that left a source without its verdicts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from forensics.cli import main
from forensics.urls import redact_url
from forensics_parsers.secrets import redact

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"
LOG = FIX / "sglang_fail_capture.log"

SECRETS = {
    "AKIAIOSFODNN7EXAMPL1": "aws creds AKIAIOSFODNN7EXAMPL1 in use",
    "xJalrXUtnFEMI/K7MDENGbPxRfiCYEXAMPLE012": (
        "aws_secret_access_key = xJalrXUtnFEMI/K7MDENGbPxRfiCYEXAMPLE012"
    ),
    "RedisPw0019": "connect redis://:RedisPw0019@127.0.0.1:6379/0",
    "ghp_a1B2c3D4e5a1B2c3D4e5a1B2c3D4e5ZZZZZZ": "git ghp_a1B2c3D4e5a1B2c3D4e5a1B2c3D4e5ZZZZZZ",
    "glpat-AbCdEfGhIjKlMnOpQrSt12": "gitlab glpat-AbCdEfGhIjKlMnOpQrSt12",
    "xoxb-123456789012-AbCdEfGhIjKl": "slack xoxb-123456789012-AbCdEfGhIjKl",
    "AIzaSyA1234567890abcdefghijklmnopqrstuv": "maps AIzaSyA1234567890abcdefghijklmnopqrstuv",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.SfLKxwRJSMeKKF2QT4fw": (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.SfLKxwRJSMeKKF2QT4fw"
    ),
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC": (
        "-----BEGIN PRIVATE KEY----- MIIEvQIBADANBgkqhkiG9w0BAQEFAASC -----END PRIVATE KEY-----"
    ),
}


def run(capsys, *args: str, store: str | Path = "st") -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(["--store", str(store), *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return exc.value.code, out, err


def one_line_error(err: str) -> str:
    lines = [x for x in err.strip().splitlines() if not x.startswith("Warning:")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    assert "internal error" not in err
    return lines[0]


def store_text(st: Path) -> str:
    """Every byte of every store file, and every text column of every parquet part."""
    texts = []
    for f in st.rglob("*"):
        if not f.is_file():
            continue
        texts.append(f.read_bytes().decode("utf-8", "replace"))
        if f.suffix == ".parquet":
            df = pl.read_parquet(f)
            texts += [str(v) for c in df.columns if df[c].dtype == pl.String for v in df[c]]
    return "\n".join(texts)


# --- secrets (class: "Secrets") ---


@pytest.mark.parametrize("secret", list(SECRETS))
def test_secret_forms_redacted_by_the_parser_rules(secret):
    assert secret not in redact(SECRETS[secret])


@pytest.mark.parametrize(
    "text", ["max_prefill_tokens = 5", "password = None", "#new-token: 5", "hf_transfer x"]
)
def test_not_secrets_left_as_they_are(text):
    assert redact(text) == text


def test_a_store_and_its_outputs_hold_none_of_the_secrets(tmp_path, capsys):
    log = tmp_path / "sec.log"
    lines = [f"[2025-04-28 10:00:01] {v}" for v in SECRETS.values()]
    log.write_text("\n".join(lines) + "\n" + LOG.read_text())
    st = tmp_path / "st"
    rc, _, err = run(capsys, "ingest", str(log), store=st)
    assert rc == 0, err
    outs = [store_text(st)]
    for args in (("runs", "--json"), ("show", "sec", "--json"), ("diagnose", "sec", "--json")):
        rc, out, err = run(capsys, *args, store=st)
        assert rc == 0, err
        outs.append(out + err)
    blob = "\n".join(outs)
    assert [s for s in SECRETS if s in blob] == []


@pytest.mark.parametrize(
    "text, hidden",
    [
        ("Error: u:Pw0040@127.0.0.1:1: connection refused", "Pw0040"),
        ("ssh://u:Pw0040@h:99/x.log", "Pw0040"),
        ("x:Pw0040@[::1]:22", "Pw0040"),
        ("http://h/?api_key=Pw0040&a=1", "Pw0040"),
    ],
)
def test_url_and_address_passwords_hidden(text, hidden):
    assert hidden not in redact_url(text)
    assert "***" in redact_url(text)


@pytest.mark.parametrize("text", ["user@host:22", "root@1.2.3.4", "a: b@c"])
def test_addresses_without_password_unchanged(text):
    assert redact_url(text) == text


def test_ssh_password_never_in_error_line_nor_hosts_list(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc, _, err = run(capsys, "ingest", "ssh://u:Pw0041@127.0.0.1:99999/x.log")
    assert rc == 2 and "Pw0041" not in one_line_error(err)
    (tmp_path / "forensics.toml").write_text('[hosts.g]\naddress = "root:Pw0042@127.0.0.1:1"\n')
    rc, out, err = run(capsys, "hosts", "list", "--json")
    assert rc == 0, err
    assert "Pw0042" not in out and "***" in out


# --- output paths (class: "Data loss and damage", output paths) ---


@pytest.mark.parametrize("target", ["manifest.json", "tables/x.html", "x.html", "link"])
def test_no_output_inside_the_store(tmp_path, capsys, target):
    st = tmp_path / "st"
    rc, _, err = run(capsys, "ingest", str(LOG), store=st)
    assert rc == 0, err
    before = {p: p.read_bytes() for p in st.rglob("*") if p.is_file()}
    out = st / target
    if target == "link":
        out = tmp_path / "r.html"
        out.symlink_to(st / "manifest.json")
    rc, _, err = run(capsys, "report", "-o", str(out), store=st)
    assert rc == 2, err
    assert "store folder" in one_line_error(err)
    assert {p: p.read_bytes() for p in st.rglob("*") if p.is_file()} == before


def test_report_to_dev_stdout_on_a_pipe(tmp_path):
    st = tmp_path / "st"
    env = {**os.environ, "FORENSICS_HOME": str(st)}
    cmd = [sys.executable, "-m", "forensics"]
    subprocess.run([*cmd, "ingest", str(LOG)], env=env, check=True, capture_output=True)
    p = subprocess.run([*cmd, "report", "-o", "/dev/stdout"], env=env, capture_output=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.lstrip().lower().startswith(b"<!doctype html")


# --- interrupts (class: "Data loss", kill and SIGTERM mid-ingest) ---


@pytest.mark.parametrize("sig", [signal.SIGTERM])
def test_sigterm_mid_ingest_is_an_interrupt(tmp_path, sig):
    logs = tmp_path / "logs"
    logs.mkdir()
    for i in range(40):
        (logs / f"l{i}.log").write_text(LOG.read_text() + f"x {i}\n")
    env = {**os.environ, "FORENSICS_HOME": str(tmp_path / "st")}
    cmd = [sys.executable, "-m", "forensics"]
    p = subprocess.Popen([*cmd, "ingest", str(logs)], env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (tmp_path / "st" / "manifest.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # the first batch is committed: the ingest is well under way
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode in (130, 0), err  # 0: it finished before the signal came
    assert b"Traceback" not in err
    check = subprocess.run([*cmd, "store", "check"], env=env, capture_output=True)
    assert check.returncode == 0, check.stdout
    again = subprocess.run([*cmd, "ingest", str(logs)], env=env, capture_output=True)
    assert again.returncode == 0, again.stderr
    runs = subprocess.run([*cmd, "runs", "--json"], env=env, capture_output=True, check=True)
    ids = [r["run_id"] for r in json.loads(runs.stdout)]
    assert len(ids) == len(set(ids)) == 40
    # the re-ingest also stored the verdicts an interrupted verdict step left out
    from forensics.store import Store
    from forensics.verdicts import unverdicted

    assert unverdicted(Store.open(tmp_path / "st")) == set()


# --- odd names (class: "Non-regular inputs and names") ---


def test_ingest_of_a_non_utf8_name_is_a_skip_not_an_internal_error(tmp_path, capsys):
    bad = os.fsdecode(bytes(tmp_path) + b"/\xff\xfe.log")
    Path(bad).write_bytes(LOG.read_bytes())
    st = tmp_path / "st"
    rc, _, err = run(capsys, "ingest", bad, store=st)
    assert rc == 2 and "not valid UTF-8" in one_line_error(err)
    (tmp_path / "ok.log").write_bytes((FIX / "sglang_baseline.log").read_bytes())
    rc, _, err = run(capsys, "ingest", str(tmp_path), store=st)
    assert rc == 0, err
    rc, out, err = run(capsys, "runs", "--json", store=st)
    assert rc == 0 and len(json.loads(out)) == 1, err


# --- compressed and binary (class: "Compressed or binary files named .log") ---


@pytest.mark.parametrize(
    "head, what",
    [
        (b"Rar!\x1a\x07\x00", "RAR archive"),
        (b"\x80\x04\x95\x10\x00", "pickle"),
        (b"\x00asm\x01\x00\x00\x00", "WebAssembly"),
        (b"GIF89a", "GIF image"),
        (b"!<arch>\n", "ar archive"),
        (b"", "binary data"),  # random bytes: most of them not UTF-8
    ],
)
def test_binary_kinds_named_log_are_refused_with_what_they_are(tmp_path, capsys, head, what):
    f = tmp_path / "x.log"
    f.write_bytes(head + os.urandom(3000))
    rc, _, err = run(capsys, "classify", str(f), store=tmp_path / "st")
    assert rc == 2 and what in one_line_error(err)
    rc, _, err = run(capsys, "ingest", str(f), store=tmp_path / "st")
    assert rc == 2 and what in one_line_error(err)
    assert not (tmp_path / "st" / "manifest.json").exists()  # nothing stored


def test_a_log_with_some_bad_bytes_is_still_a_log(tmp_path, capsys):
    f = tmp_path / "x.log"
    f.write_bytes(LOG.read_bytes().replace(b"Load weight", b"Load \xff\xfe weight"))
    rc, out, err = run(capsys, "classify", str(f), store=tmp_path / "st")
    assert rc == 0 and "capture" in out, err


def test_a_decompression_bomb_stops_at_its_cap_and_keeps_what_decoded(
    tmp_path, capsys, monkeypatch
):
    import zstandard

    from forensics import logsource

    # the cap lowered to 2 MiB, a 10 MiB bomb: the proportions of the real 64 MiB cap (a bigger
    # bomb only parses more lines before the same stop)
    monkeypatch.setattr(logsource, "BOMB_MIN", 2 << 20)
    line = b"[2025-04-28 10:00:02 TP0] Load weight begin. avail mem=70.00 GB\n"
    data = zstandard.ZstdCompressor(level=3).compress(line * ((10 << 20) // len(line)))
    f = tmp_path / "bomb.log"
    f.write_bytes(data)
    assert len(data) * logsource.BOMB_RATIO < 2 << 20  # it is a bomb at these settings
    rc, out, err = run(capsys, "ingest", "--json", str(f), store=tmp_path / "st")
    assert rc in (0, 4), err
    summary = json.loads(out)
    assert "decompression bomb" in err + json.dumps(summary), summary.keys()
    lines = summary["lines_total"]
    assert 0 < lines * len(line) < 5 << 20  # stopped near the cap, not at 10 MB


@pytest.mark.parametrize("table", ["journal", "launches"])
def test_tables_written_outside_the_parser_are_redacted_on_append(tmp_path, table):
    """Secrets class: a relaunch's journal (the chain's commands) and a launch's recipe reach
    the store through Transaction.append, not the parser: forensics.tables marks them
    `redact` and every text column is redacted there."""
    from forensics.store import Store
    from forensics.tables import TABLES

    col = {"journal": "cmd", "launches": "recipe"}[table]
    text = 'python -m sglang.launch_server --api-key Key0050 {"hf_token": "hf_Tok0051abcdefgh"}'
    row = {c: None for c in TABLES[table].schema} | {col: text, "launch_id": "L1"}
    st = Store.open(tmp_path / "st")
    with st.transaction() as tx:
        tx.append(table, pl.DataFrame([row], schema=TABLES[table].schema))
    blob = store_text(tmp_path / "st")
    assert "Key0050" not in blob and "Tok0051" not in blob
    assert "launch_server --api-key «redacted:" in st.table(table)[col][0]


# --- store correctness (class: a log written while it is ingested, P03) ---


def _rows(st: Path) -> dict[str, int]:
    from forensics.store import Store

    s = Store.open(st)
    return {t: s.table(t).height for t in ("runs", "lines", "events", "decode", "errors")}


@pytest.mark.parametrize(
    "log, cut",
    [
        ("sglang_fail_capture.log", 300),  # inside server_args (the first line)
        ("sglang_fail_capture.log", 3091),  # mid-line, inside the sniff window
        ("sglang_baseline.log", 2000),
        ("sglang_baseline.log", 0.6),  # past the sniff window
    ],
)
def test_a_log_ingested_while_written_then_complete_is_one_run(tmp_path, capsys, log, cut):
    """A file ingested while its server was still writing it (a small one: still inside the
    parser's sniff window), then again once complete: the same rows as one ingest of the whole
    file. It used to resume at offset 0 with a state that had seen the run: two runs."""
    data = (FIX / log).read_bytes()
    n = cut if isinstance(cut, int) else int(len(data) * cut)
    f = tmp_path / "w.log"
    f.write_bytes(data[:n])
    assert run(capsys, "ingest", str(f), store=tmp_path / "a")[0] == 0
    f.write_bytes(data)
    rc, out, err = run(capsys, "ingest", "--json", str(f), store=tmp_path / "a")
    assert rc == 0, err
    ref = tmp_path / "ref.log"
    ref.write_bytes(data)
    assert run(capsys, "ingest", str(ref), store=tmp_path / "b")[0] == 0
    assert _rows(tmp_path / "a") == _rows(tmp_path / "b")
    phases = [
        json.loads(run(capsys, "runs", "--json", store=s)[1])
        for s in (tmp_path / "a", tmp_path / "b")
    ]
    assert [r["phase"] for r in phases[0]] == [r["phase"] for r in phases[1]]


def test_plot_to_dev_null_needs_no_extension(tmp_path, capsys):
    """Output paths: a device takes the image in place (PNG when it has no extension);
    /dev/null stays the device."""
    import stat

    st = tmp_path / "st"
    assert run(capsys, "ingest", str(FIX / "sglang_baseline.log"), store=st)[0] == 0
    rc, _, err = run(capsys, "plot", "trend", "-o", "/dev/null", store=st)
    assert rc == 0, err
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    rc, _, err = run(capsys, "plot", "trend", "-o", str(tmp_path / "x"), store=st)
    assert rc == 2 and "unknown image format" in one_line_error(err)
