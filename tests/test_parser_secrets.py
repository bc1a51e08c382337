"""Secrets never reach the store or any output (issue 14): the parser redacts them once,
before any rule reads a line, so every table and the parser state see only the marks.

A log full of secrets is ingested into a real store; every file of the store (raw bytes, and
every string cell of every parquet part) and every `--json` output is searched for them."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.cli import main
from forensics_parsers.secrets import redact
from forensics_parsers.sglang import parse_text

SECRETS = {
    "api_key": "sk-live-7Qm2RkZp9XwLc3VbN8aT",
    "admin_api_key": "adminPassW0rd-1234",
    "ssl_keyfile_password": "keyfile-pw-9f8e7d",
    "hf_long": "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "hf_short": "hf_Xy12ab",
    "bearer": "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.dG9rZW4",
    "url_password": "urlP4ssw0rd",
    "env_token": "hf_EnvT0kenValue42",
    "query_token": "qTok3nValue99",
}
S = SECRETS
LOG = f"""[2026-03-01 09:00:00] server_args=ServerArgs(model_path='https://bob:{S["url_password"]}@models.example.com/llama', api_key='{S["api_key"]}', admin_api_key='{S["admin_api_key"]}', ssl_keyfile_password='{S["ssl_keyfile_password"]}', tp_size=1, port=30000, speculative_algorithm=None)
[2026-03-01 09:00:01] HF_TOKEN={S["env_token"]} huggingface-cli login --token {S["hf_long"]}
[2026-03-01 09:00:02 TP0] Load weight begin. avail mem=70.00 GB token={S["hf_short"]}
[2026-03-01 09:00:09 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=54.00 GB, mem usage=16.00 GB.
[2026-03-01 09:00:10 TP0] max_total_num_tokens=100000, chunked_prefill_size=8192, api_key={S["api_key"]}
[2026-03-01 09:00:11] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)
[2026-03-01 09:00:12] The server is fired up and ready to roll!
[2026-03-01 09:00:13] WARNING: request with header Authorization: Bearer {S["bearer"]} refused
[2026-03-01 09:00:14] fetching https://hub.example.com/x?token={S["query_token"]}&rev=main
[2026-03-01 09:00:15 TP0] Decode batch, #running-req: 1, #token: 90, token usage: 0.00, cuda graph: True, gen throughput (token/s): 88.25, #queue-req: 0
[2026-03-01 09:00:16 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl/scheduler.py", line 10, in run
    connect("https://bob:{S["url_password"]}@db/", api_key="{S["api_key"]}")
RuntimeError: auth failed for Bearer {S["bearer"]} with {S["hf_long"]}
"""


def leaks(text: str) -> list[str]:
    return [k for k, v in SECRETS.items() if v in text]


def test_every_table_of_a_parse_is_free_of_secrets():
    f = parse_text(LOG, "secrets.log")
    for name, df in f.tables().items():
        for col, dtype in df.schema.items():
            if dtype == pl.String:
                for cell in df[col].drop_nulls():
                    assert not leaks(cell), (name, col, cell)
    # and the records are still there, with the marks in place of the values
    assert f.errors.filter(pl.col("kind") == "traceback")["exc_type"].to_list() == ["RuntimeError"]
    args = json.loads(f.runs["server_args"][0])
    assert args["api_key"].startswith("«redacted:") and args["tp_size"] == 1
    assert f.decode["gen_throughput"].to_list() == [pytest.approx(88.25)]


def test_the_same_secret_gets_the_same_mark_and_ordinary_text_is_kept():
    a, b = redact(f"api_key='{S['api_key']}'"), redact(f"x api_key={S['api_key']}")
    assert a.split("«")[1].split("»")[0] == b.split("«")[1].split("»")[0]
    for plain in (
        "api_key=None, hf_token=None, speculative_token_map=None",
        "max_total_num_tokens=412305, #token: 300, token usage: 0.37",
        "hf_transfer is enabled; reading hf_quant_config.json",
        "Decode batch, #running-req: 1, gen throughput (token/s): 91.50",
    ):
        assert redact(plain) == plain


def cli(capsys, store: Path, *args: str) -> str:
    with pytest.raises(SystemExit) as exc:
        main(["--store", str(store), *args])
    out, err = capsys.readouterr()
    assert exc.value.code in (0, 3), (args, exc.value.code, err)
    return out + err


def test_a_store_and_every_json_output_hold_no_secret(tmp_path, capsys):
    log = tmp_path / "sglang_secrets.log"
    log.write_text(LOG)
    store = tmp_path / "st"
    outputs = [cli(capsys, store, "ingest", str(log), "--json")]
    for args in (
        ("runs", "--json"),
        ("show", "sglang_secrets", "--json"),
        ("diagnose", "sglang_secrets", "--json"),
        ("diagnose", "x", "--log", str(log), "--json"),
        ("classify", str(log), "--json"),
        ("signatures", "--json"),
    ):
        outputs.append(cli(capsys, store, *args))
    for out in outputs:
        assert not leaks(out), out
    assert "«redacted:" in outputs[2]  # show: the run's server_args
    files = [p for p in store.rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in files)
    for p in files:
        raw = p.read_bytes()
        assert not [k for k, v in SECRETS.items() if v.encode() in raw], p
        if p.suffix == ".parquet":
            df = pl.read_parquet(p)
            for col, dtype in df.schema.items():
                if dtype == pl.String:
                    for cell in df[col].drop_nulls():
                        assert not leaks(cell), (p, col)


def test_the_prefilter_leaves_metrics_lines_to_polars_issue15():
    """The vectorised hint must not send SGLang's own metrics lines through the per-line
    redaction (`#new-token` once made every Prefill batch line a Python call: 2.4 s per
    100 MB), while the secret flags it exists for still pass it."""
    import polars as pl

    from forensics_parsers.secrets import HINT

    lines = pl.Series(
        [
            "[2025-01-01 00:00:00 TP0] Prefill batch. #new-seq: 1, #new-token: 512, "
            "#cached-token: 0, token usage: 0.01, #running-req: 0, #queue-req: 0",
            "[2025-01-01 00:00:01 TP0] Decode batch. #running-req: 1, #token: 530, "
            "token usage: 0.01, accept len: 2.50, gen throughput (token/s): 80.1",
            "python -m sglang.launch_server --hf-token hf_abcdefghijklmnop --port 1",
            "cmd --api-token=xyz",
        ]
    )
    assert lines.str.contains(HINT).to_list() == [False, False, True, True]


_HINT_PARTS = [
    "hf_",
    "--api-token",
    "--Token",
    "api_org_",
    "sK-",
    "BEARER ",
    "://",
    "_TOKEN",
    "Token=",
    "apiKey",
    "api-KEY",
    "api_key",
    "PassWord",
    "passwd",
    "Secret",
    "Authorization: ",
    "access_KEY",
    "?key=",
    "&sig=",
    "?signature=",
    "\u212a",
    "\u017f",
    "x",
    " ",
    "-",
    "_",
    "=",
    ": ",
    "'",
    "AKIA",
    "ghp_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "AIza",
    "eyJ",
    ".eyJ",
    "-----BEGIN RSA PRIVATE KEY-----",
    "user:pw@",
    "akia",
    "EYJ",
]
_TOKENISH = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", max_size=40
)


@given(
    st.lists(st.sampled_from(_HINT_PARTS) | _TOKENISH | st.text(max_size=4), max_size=8).map(
        "".join
    )
)
@settings(max_examples=600, deadline=None)
def test_the_hint_sieve_keeps_every_line_with_a_secret_issue15(line):
    """redact_lines redacts only the lines HINT_SIEVE picks: it must pick every line that
    ``redact`` changes (Unicode case folding included: the Kelvin sign, the long s)."""
    import polars as pl

    from forensics_parsers.secrets import HINT_SIEVE, redact, redact_lines

    s = pl.Series([line])
    if redact(line) != line:
        assert any(s.str.contains(p)[0] for p in HINT_SIEVE)
        assert redact_lines(s)[0].to_list() == [redact(line)]


@given(
    st.lists(
        st.text(alphabet=st.sampled_from(list("aAkK_=-:@/%PpTtoOeEnN 0123\\'\"")), max_size=40)
    )
)
@settings(max_examples=300, deadline=None)
def test_the_sieve_is_one_pass_of_its_patterns_issue15(lines):
    """redact_lines runs HINT_SIEVE as one regex (``_SIEVE_RX``): it picks exactly the lines
    one of its patterns picks, each with its own flags (the first one's ``(?i)`` only)."""
    import polars as pl

    from forensics_parsers.secrets import _SIEVE_RX, HINT_SIEVE

    s = pl.Series(lines + ["API_K", "Bearer x", "AKIA", "akia", "x--y", "Token 5", "tOkEn: x"])
    one = s.str.contains(_SIEVE_RX).to_list()
    each = pl.select(pl.any_horizontal(s.str.contains(p) for p in HINT_SIEVE)).to_series()
    assert one == each.to_list()
