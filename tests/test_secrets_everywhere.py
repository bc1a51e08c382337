"""Secrets, fourth round (issue 14): nothing a command stores or prints outside the parser
holds a secret either. A store and a home are written full of secrets through every command
that stores or prints (ingest, runs/show/diagnose/classify/advise --json and --csv, report -o,
plot -o .svg, bench against a URL with a password, a failing launch whose chain has
`--api-key X`, evidence of a process whose command line has one, a command output spilled to
$FORENSICS_HOME/evidence); then every byte under $FORENSICS_HOME and every output is searched
for the secret values. Real files, real processes, the real simulated server over HTTP.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from forensics.cli import main
from forensics.hosts.local import LocalHost
from forensics_parsers.secrets import StreamRedactor, redact
from tests.test_bench_sim import sim, sim_factory  # noqa: F401 - fixtures
from tests.test_parser_secrets import LOG, SECRETS

PEM_BODY = ["MIIEowIBAAKCAQEAsecretPemLine1xyz", "secretPemLine2QWERTYuiop0987"]
MORE = {
    "cli_api_key": "cliKey-77aa88bb99",
    "cli_hf_token": "hf_CliT0kenAbcdefgh12",
    "pem_1": PEM_BODY[0],
    "pem_2": PEM_BODY[1],
    "bench_pw": "benchPw-31337x",
}
ALL = {**SECRETS, **MORE}
EXTRA_LOG = (
    "[2026-03-01 09:00:17] launch: python -m sglang.launch_server --model-path m "
    f"--api-key {MORE['cli_api_key']} --hf-token {MORE['cli_hf_token']}\n"
    "[2026-03-01 09:00:18] loaded key:\n-----BEGIN RSA PRIVATE KEY-----\n"
    + "\n".join(PEM_BODY)
    + "\n-----END RSA PRIVATE KEY-----\n"
)


def leaks(data: bytes | str) -> list[str]:
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    return [k for k, v in ALL.items() if v.encode() in raw]


def cli(capsys, *args: str, ok=(0,)) -> str:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    assert (exc.value.code or 0) in ok, (args, exc.value.code, err)
    return out + err


def home_leaks() -> list[str]:
    home = Path(os.environ["FORENSICS_HOME"])
    return [
        f"{p}: {leaks(p.read_bytes())}"
        for p in home.rglob("*")
        if p.is_file() and leaks(p.read_bytes())
    ]


def test_every_output_and_every_stored_byte_of_a_secret_log(tmp_path, capsys):
    log = tmp_path / "sglang_secrets.log"
    log.write_text(LOG + EXTRA_LOG)
    outs = [cli(capsys, "ingest", str(log), "--json")]
    for args in (
        ("runs", "--json"),
        ("runs", "--csv"),
        ("runs",),
        ("show", "sglang_secrets", "--json"),
        ("show", "sglang_secrets"),
        ("diagnose", "sglang_secrets", "--json"),
        ("diagnose", "sglang_secrets"),
        ("diagnose", "x", "--log", str(log), "--json"),
        ("classify", str(log), "--json"),
        ("advise", "--json"),
    ):
        outs.append(cli(capsys, *args, ok=(0, 3)))
    files = {
        "report": tmp_path / "r.html",
        "decode": tmp_path / "d.svg",
        "startup": tmp_path / "s.svg",
    }
    outs.append(cli(capsys, "report", "-o", str(files["report"])))
    outs.append(cli(capsys, "plot", "decode", "sglang_secrets", "-o", str(files["decode"])))
    outs.append(cli(capsys, "plot", "startup", "-o", str(files["startup"]), ok=(0, 3)))
    for out in outs:
        assert not leaks(out), out
    assert "«redacted:" in outs[4]  # show --json: the server_args, with the marks
    for p in files.values():
        if p.exists():
            assert not leaks(p.read_bytes()), p
    assert files["report"].exists() and files["decode"].exists()
    assert home_leaks() == []


def test_a_spilled_command_output_is_redacted_before_it_is_written(tmp_path):
    """An output over its cap is spilled whole to $FORENSICS_HOME/evidence: redacted line by
    line as it is written (a secret across two reads and a PEM block included)."""
    spill = Path(os.environ["FORENSICS_HOME"]) / "evidence" / "launch1"
    secret_lines = (LOG + EXTRA_LOG).replace("'", "'\\''")
    script = f"printf '%s' '{secret_lines}'; seq 1 20000; printf 'HF_TOKEN={MORE['cli_hf_token']}'"
    res = LocalHost().run(script, timeout=60, max_output=256, spill_dir=spill, spill_name="env")
    assert res.stdout_spill, res
    data = Path(res.stdout_spill).read_bytes()
    assert leaks(data) == [] and data.count(b"\xc2\xabredacted:") >= len(ALL) - 3
    assert b"\n20000\n" in data  # the whole output is there, only the secrets replaced
    assert data.endswith(redact(f"HF_TOKEN={MORE['cli_hf_token']}").encode())


def test_the_stream_redactor_gives_what_redact_gives_whatever_the_pieces():
    text = (LOG + EXTRA_LOG).encode()
    for size in (1, 7, 64, 4096):
        r = StreamRedactor()
        got = b"".join(r.feed(text[i : i + size]) for i in range(0, len(text), size)) + r.finish()
        assert got.decode() == redact(text.decode()), size


def test_evidence_of_a_process_with_a_secret_command_line(tmp_path):
    """`ps` in the evidence shows the server's argv: the records (printed, kept) are redacted."""
    from forensics import evidence

    p = subprocess.Popen(
        ["sh", "-c", "sleep 60", "sglang", "--api-key", MORE["cli_api_key"]],
        start_new_session=True,
    )
    try:
        got = evidence.collect(LocalHost(), pgid=p.pid, deadline=60, py_spy=False)
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    text = json.dumps(got["commands"], default=str, ensure_ascii=False)
    assert not leaks(text)
    assert "--api-key «redacted:" in text  # ps saw it: the mark stands in its place


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_failing_launch_with_secrets_in_its_chain(tmp_path, capsys):
    """`launch --json` of a chain with `--api-key X` that fails: the printed result (journal
    rows, log tail, evidence) and every byte of $FORENSICS_HOME hold no secret."""
    args = [
        "launch", "--sim", "--sim-fail", "capture-oom", "--port", str(_free_port()),
        "--deadline", "20", "--log", str(tmp_path / "logs" / "s.log"), "--name", "sec1",
        "--json", "--", "--model-path", "sim://kimi-k2.5",
        "--api-key", MORE["cli_api_key"], "--ssl-keyfile-password", SECRETS["ssl_keyfile_password"],
    ]  # fmt: skip
    out = cli(capsys, *args, ok=(0, 1))
    assert not leaks(out)
    assert (
        "«redacted:" in out and json.loads(out.splitlines()[0] if False else out)["name"] == "sec1"
    )
    out = cli(capsys, "launch", "--list", "--json")
    assert not leaks(out)
    assert home_leaks() == []
    # the journal the wrapper writes beside the log records the steps redacted too
    journal = (tmp_path / "logs" / "s.log.journal.jsonl").read_text()
    assert '"orig"' in journal and "\\u00abredacted:" in journal and not leaks(journal)


def test_bench_with_a_password_in_the_url(sim, capsys):  # noqa: F811
    url = sim.url.replace("http://", f"http://bob:{MORE['bench_pw']}@")
    out = cli(capsys, "bench", url, "--num-prompts", "2", "--max-new-tokens", "16", "--json",
              ok=(0, 4))  # fmt: skip
    assert not leaks(out)
    out = cli(capsys, "runs", "--json", ok=(0, 3))
    assert not leaks(out)
    assert home_leaks() == []


def test_an_error_line_that_quotes_a_secret(capsys):
    """The one `Error:` line goes through the parser's redaction too (a message may quote
    what the user typed: a chain, a name with `--api-key X`)."""
    out = cli(capsys, "show", f"x --api-key {MORE['cli_api_key']}", ok=(3,))
    assert out.startswith("Error: ") and "«redacted:" in out and not leaks(out)
