"""Secrets, seventh round (issue 14, class "Secrets"): the spellings a probe of the installed CLI
still found stored or printed (a bare `token=X`, an environment dump's `KEY value`, `Cookie:`,
`--access-key`, `private_key`, S3 presigned URLs, `\\uXXXX` escapes, the passwords of more
programs, a PEM key across the parser's 4 MiB chunks, a secret in a log's file name), the
false positives that mangled ordinary text (`/etc/passwd: no runs`, `mask_token=<|MASK|>`),
the scrub follower's journal read, and a launch host without python3. Real files, the real
parser and CLI, real `dd` on this machine's shell."""

from __future__ import annotations

import json
import os
import tracemalloc

import polars as pl
import pytest

from forensics_parsers.secrets import mask, redact, redact_lines
from tests.test_secrets_round6 import _cli

# one unique value per spelling (none a substring of another or of the text around it)
FORMS = {
    "bare_token_eq": ("token=Vbtok1Qx7Kp", "Vbtok1Qx7Kp"),
    # a quoted all-digit value of a `*_token` key may be a credential: only unquoted numbers pass
    "digits_token_quoted": ('{"access_token": "73918264"}', "73918264"),
    "bare_token_json": ('{"token": "Vbtok2Qx7Kp", "n": 1}', "Vbtok2Qx7Kp"),
    "bare_token_yaml": ("  TOKEN: Vbtok3Qx7Kp", "Vbtok3Qx7Kp"),
    "bare_token_repr": ("ServerArgs(token='Vbtok4Qx7Kp', port=1)", "Vbtok4Qx7Kp"),
    "env_space_wandb": ("WANDB_API_KEY Venv5Qx7Kp9", "Venv5Qx7Kp9"),
    "env_space_hf": ("HF_TOKEN Venv6Qx7Kp9", "Venv6Qx7Kp9"),
    "env_space_password": ("password Venv7Qx7Kp9", "Venv7Qx7Kp9"),
    "cookie": ("Cookie: session=Vcook8Qx7Kp", "Vcook8Qx7Kp"),
    "access_key_flag": ("tool --access-key Vacc9Qx7Kp --port 1", "Vacc9Qx7Kp"),
    "private_key_kv": ("private_key=Vpriv10Qx7Kp", "Vpriv10Qx7Kp"),
    "s3_signature": (
        "GET /k?X-Amz-Algorithm=A&X-Amz-Signature=Vsig11Qx7Kp&X-Amz-Date=1",
        "Vsig11Qx7Kp",
    ),
    "s3_token": ("GET /k?X-Amz-Security-Token=Vsts12Qx7Kp&x=1", "Vsts12Qx7Kp"),
    "query_password": ("GET /login?user=bob&password=Vqpw13Qx7Kp", "Vqpw13Qx7Kp"),
    "unicode_key": ('{"api\\u005fkey": "Vuni14Qx7Kp"}', "Vuni14Qx7Kp"),
    "unicode_value": ('{"token": "\\u0040Vuni15Qx7Kp"}', "Vuni15Qx7Kp"),
    "mongo": ("mongosh -u admin -p Vmongo16Qx7 --host db", "Vmongo16Qx7"),
    "zip": ("zip -P Vzip17Qx7Kp out.zip f", "Vzip17Qx7Kp"),
    "7z": ("7z a -pV7z18Qx7Kp out.7z f", "V7z18Qx7Kp"),
    "ipmitool": ("ipmitool -I lanplus -H bmc -U admin -P Vipmi19Qx7 power status", "Vipmi19Qx7"),
    "keytool": ("keytool -list -keystore k.jks -storepass Vkey20Qx7Kp", "Vkey20Qx7Kp"),
    "sqlcmd": ("sqlcmd -S srv -U sa -P Vsql21Qx7Kp -Q x", "Vsql21Qx7Kp"),
    "lftp": ("lftp -u bob,Vlftp22Qx7Kp ftp://h", "Vlftp22Qx7Kp"),
    "file_name": ("/data/logs/sglang_api_key=Vfile23Qx7Kp.log", "Vfile23Qx7Kp"),
    "file_name_hf": ("/data/logs/sglang_hf_Vfile24Qx7Kp9.log", "Vfile24Qx7Kp9"),
    "json_escaped_upper": ('body="{\\"TOKEN\\": \\"Vesc25Qx7Kp\\"}"', "Vesc25Qx7Kp"),
}

# ordinary text that must come out as it went in (false positives mangle what they touch)
PLAIN = [
    "[2026-03-01] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00",
    "[2026-03-01] Decode batch. #running-req: 1, #token: 530, token usage: 0.01",
    "Please set a HF_TOKEN to enable higher rate limits and faster downloads.",
    "OPENAI_API_KEY environment variable is not set",
    "WANDB_API_KEY is not set, running offline",
    "the password must be at least 8 characters",
    "passwd: no such user",
    "/etc/passwd: no runs in the store",
    "/etc/passwd: permission denied",
    "password_reset_job: no runs in the store",
    "password: not set",
    "password=$DB_PASSWORD",
    "DFLASH draft runner ready. mask_token=<|MASK|>, mask_token_id=12",  # the real corpus
    "eos_token='</s>', pad_token=0",
    "token=128 tokens generated",
    "ssh -p 2222 root@h",
    "mkdir -p /tmp/x",
    "hf_transfer is enabled",
    "max_tokens=128",
    "tokenizer_path='/models/tok'",
    "GET /v1/models?limit=10 HTTP/1.1",
    # a `*_token` key holding an unquoted number is a count or a rate: our own --json output
    # (`advise --json`'s baseline) and SGLang's server_args (lead, seventh stop)
    '"ms_per_token": 12.5,',
    "new_token=8192, cached_token=0",
    "kv_bytes_per_token: 70272",
    "profile_max_num_token=1e3)",
]


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_spelling_is_redacted_masked_and_sieved(form):
    line, value = FORMS[form]
    assert value not in redact(line), redact(line)
    masked, _ = mask(line.encode())
    assert len(masked) == len(line.encode()) and value.encode() not in masked
    # the parser's vectorised sieve picks the line (a rule the sieve misses stores it raw)
    assert redact_lines(pl.Series([line])).lines.to_list() == [redact(line)]
    assert redact(redact(line)) == redact(line)


@pytest.mark.parametrize("line", PLAIN)
def test_ordinary_text_is_not_changed(line):
    assert redact(line) == line
    assert redact_lines(pl.Series([line])).lines.to_list() == [line]


def test_an_error_line_that_ends_a_path_in_passwd_is_not_redacted(capsys):
    # false positive of the last round: `…/passwd: no runs` read as the key `passwd`
    out = _cli(capsys, "runs", "../../etc/passwd", ok=(3,))
    assert "../../etc/passwd: no runs" in out and "redacted" not in out


HEAD = (
    "[2026-03-01 09:00:00] server_args=ServerArgs(model_path='m', tp_size=1, port=30000)\n"
    "[2026-03-01 09:00:02 TP0] Load weight begin. avail mem=70.00 GB\n"
)
FILL = (
    "[2026-03-01 09:01:00 TP0] Decode batch, #running-req: 1, #token: 90, token usage: "
    "0.00, cuda graph: True, gen throughput (token/s): 88.25, #queue-req: 0\n"
)
PEM_BODY = ["MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
            "Vpembody2AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"]  # fmt: skip


def _store_text(home) -> bytes:
    out = b""
    for p in home.rglob("*"):
        if p.is_file():
            out += p.read_bytes()
            if p.suffix == ".parquet":
                out += pl.read_parquet(p).write_ndjson().encode()
    return out


def test_a_pem_key_across_the_4_mib_chunk_boundary_and_a_secret_file_name(tmp_path, capsys):
    """The parser reads a log in chunks of 4 MiB (logsource.READ_CHUNK): a PEM block whose
    BEGIN line is in one chunk and body in the next kept its body (the block's state was not
    carried). And a log whose file name holds a secret (`…api_key=X.log`) showed it in the
    run's name and path, in every output and the store."""
    from forensics.logsource import READ_CHUNK

    parts, size = [HEAD], len(HEAD)
    while size < READ_CHUNK - 100:
        parts.append(FILL)
        size += len(FILL)
    parts.append("-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(PEM_BODY) * 3 + "\n")
    parts.append("-----END RSA PRIVATE KEY-----\n" + FILL)
    log = tmp_path / "sglang_api_key=Vfname7Qx7Kp.log"
    log.write_text("".join(parts))
    assert log.stat().st_size > READ_CHUNK
    outs = [_cli(capsys, "ingest", str(log), "--json"), _cli(capsys, "ingest", str(log))]
    outs += [_cli(capsys, "runs", "--json"), _cli(capsys, "runs", "--csv"), _cli(capsys, "runs")]
    run = json.loads(outs[2])[0]["run_id"]
    outs += [_cli(capsys, "show", run, "--json"), _cli(capsys, "show", run)]
    everything = "".join(outs).encode() + _store_text(tmp_path / "forensics-home")
    for secret in (*PEM_BODY, "Vfname7Qx7Kp"):
        assert secret.encode() not in everything, secret
    assert "unchanged" in outs[1]  # the source is still known by its real path


def test_the_parser_carries_an_open_pem_block_from_one_feed_to_the_next():
    from forensics_parsers.sglang.parser import LogParser

    # (past the parser's first look at the file, its sniff window: then it has a state)
    text = (HEAD + FILL * 3000 + "-----BEGIN RSA PRIVATE KEY-----\n" + PEM_BODY[0] + "\n" + PEM_BODY[1]
            + "\n-----END RSA PRIVATE KEY-----\n" + FILL).encode()  # fmt: skip
    # after the first body line: the block is open when the next feed (or ingest) starts
    cut = text.index(PEM_BODY[0].encode()) + len(PEM_BODY[0]) + 1
    p = LogParser("x.log")
    frames = [p.feed(text[:cut])]
    state = json.loads(json.dumps(p.state()))  # a grown log's ingest resumes from it
    p2 = LogParser("x.log", state=state)
    frames += [p2.feed(text[cut:]), p2.finish()]
    lines = "\n".join(t for f in frames for t in f.lines["text"].to_list() if t)
    assert "BEGIN RSA PRIVATE KEY" in lines
    for body in PEM_BODY:
        assert body not in lines


def test_the_follower_reads_the_journal_in_bounded_blocks(tmp_path):
    """launcher.scrub._Launch.read read the journal whole: a journal of any size (a line of
    any length) cost its size in memory. Now a block at a time (scrub.BLOCK); an overlong
    line is skipped and the events after it still count."""
    from forensics.launcher import scrub

    j = tmp_path / "journal"
    with j.open("wb") as f:
        f.write(b'{"launch_id":"L","event":"server","pgid":4242,"step":3}\n')
        f.write(b"x" * (6 * scrub.BLOCK) + b"\n")
        for i in range(5000):
            f.write(
                json.dumps({"launch_id": "L", "event": "out", "i": i, "pad": "y" * 300}).encode()
                + b"\n"
            )
        f.write(b'{"launch_id":"L","event":"exit"}\n')
    tracemalloc.start()
    launch = scrub._Launch(str(j), "L")
    launch.read()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert launch.pgid == 4242 and launch.exited and launch.pos == j.stat().st_size
    assert peak < 4 * scrub.BLOCK, peak  # the journal is 8 MiB; a block at a time


def test_a_host_without_python3_is_masked_from_here_in_place(tmp_path):
    """launcher.scrub_remote: a launch's host without python3 kept every secret (the follower
    is a python3 script). Its files are now masked over the connection: read here, `*`
    written back in place by dd (conv=notrunc): the same length, nothing else touched."""
    from forensics.hosts.local import LocalHost
    from forensics.launcher.scrub_remote import scrub_over

    work = tmp_path / "work" / "L1"
    work.mkdir(parents=True)
    log = tmp_path / "srv.log"
    data = (b"hello\n--api-key Vnopy1Qx7Kp ok\n" + b"y" * 3_000_000 + b"\nHF_TOKEN=Vnopy2Qx7Kp\n"
            b"caf\xc3\xa9 password: p\xc3\xa4Vnopy3\n-----BEGIN RSA PRIVATE KEY-----\n"
            b"Vnopy4body\n-----END RSA PRIVATE KEY-----\ntail")  # fmt: skip
    log.write_bytes(data)
    (work / "step1.out").write_bytes(b"x api_key='Vnopy5Qx7Kp'\n")
    (work / "scrub.py").write_bytes(b"# the follower itself: not a launch file\n")
    assert scrub_over(LocalHost(), [str(log)], str(tmp_path / "work")) == 5
    after = log.read_bytes()
    assert len(after) == len(data) and b"Vnopy" not in after
    assert after.startswith(b"hello\n--api-key *********** ok\n") and after.endswith(b"\ntail")
    assert b"Vnopy5" not in (work / "step1.out").read_bytes()
    assert os.path.getsize(work / "scrub.py") == 41


def test_a_pem_block_ends_at_a_line_no_key_has():
    """A BEGIN line never closed (a truncated dump) no longer swallows the log after it: a
    block holds base64 lines and headers only; any other line ends it, in both line readers
    (the compiled one hands over no metrics line: `gaps` stand for them)."""
    lines = ["-----BEGIN PRIVATE KEY-----", "QUJDREVGVpem1", "Proc-Type: 4,ENCRYPTED",
             "[2026-03-01 09:00:10] Load weight end.", "QUJDREVG"]  # fmt: skip
    out = redact_lines(pl.Series(lines))
    assert out.lines.to_list()[3:] == lines[3:] and "Vpem1" not in "".join(out.lines.to_list())
    assert not out.pem_open
    gapped = redact_lines(pl.Series([lines[0], lines[4]]), gaps=pl.Series([False, True]))
    assert gapped.lines.to_list() == [lines[0], lines[4]]  # a metrics line came between
