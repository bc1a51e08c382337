"""Secrets, sixth round (issue 14, class "Secrets"): the escaped forms (JSON-escaped, a
Python repr, URL-encoded, shell-escaped quotes), the env lines and headers of every provider,
passwords in URLs and addresses, keys of a TOML host config; and the files of a launch that
are written after the launch concluded, on a remote host, and in a log the user named.

One test builds a log and a launch full of secrets of every form and runs every command that
can show or store them (ingest, then every table of the store read back, as bytes and as
rows; runs / show / diagnose / classify / report / plot, `--json` and text; lint; a journaled
launch with `--log`, its journal and work files; `hosts list`; error lines), and greps
everything for every secret value. Real files, real processes, a real sshd."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import polars as pl
import pytest

from forensics.cli import main
from forensics_parsers.secrets import mask, redact, secret_spans

# one value per form; none of them is a substring of another or of the log's other text
V = {
    "json_escaped": "Vjsonesc1Qx7",
    "json_dict": "Vjsondict2Rw8",
    "repr": "Vrepr3Tz9Kp",
    "serverargs": "Vsrvargs4Lm2",
    "url_query_enc": "Vurlq5Nb3",
    "url_pw_enc": "Vurlpw6Hc4",
    "bearer": "Vbearer7Jd5xyz",
    "hf_flag": "Vhfflag8Ke6",
    "hf_env": "Vhfenv9Lf7",
    "hfhub_env": "Vhfhub10Mg8",
    "openai_env": "Vopenai11Nh9",
    "wandb_env": "Vwandb12Pj1",
    "curl_header": "Vcurlhdr13Qk2",
    "ssh_url": "Vsshurl14Rl3",
    "http_url": "Vhttpurl15Sm4",
    "address": "Vaddr16Tn5",
    "toml_password": "Vtomlpw17Up6",
    "passphrase": "Vpassphr18Vq7",
    "shell_escaped": "Vshesc19Wr8",
    "double_json": "Vdbljson20Xs9",
    "auth_encoded": "Vauthenc21Yt1",
    "x_api_key": "Vxapikey22Zu2",
}

FORMS = {
    "json_escaped": f'request={{\\"api_key\\": \\"{V["json_escaped"]}\\", \\"n\\": 1}}',
    "json_dict": f'server_args={{"admin_api_key": "{V["json_dict"]}", "port": 30000}}',
    "repr": f"args: {{'ssl_keyfile_password': '{V['repr']}', 'tp_size': 1}}",
    "serverargs": f"ServerArgs(model_path='m', api_key='{V['serverargs']}', port=30000)",
    "url_query_enc": f"GET /v1/models?api%5Fkey={V['url_query_enc']}&x=1",
    "url_pw_enc": f"redirect=https%3A%2F%2Fbob%3A{V['url_pw_enc']}%40hub.example.com%2F",
    "bearer": f"headers: Authorization: Bearer {V['bearer']}",
    "hf_flag": f"argv: python3 -m sglang.launch_server --hf-token {V['hf_flag']}",
    "hf_env": f"HF_TOKEN={V['hf_env']}",
    "hfhub_env": f"HUGGING_FACE_HUB_TOKEN={V['hfhub_env']}",
    "openai_env": f"export OPENAI_API_KEY={V['openai_env']}",
    "wandb_env": f"WANDB_API_KEY={V['wandb_env']}",
    "curl_header": f"curl -H 'Authorization: Token {V['curl_header']}' http://h/v1",
    "ssh_url": f"ssh://root:{V['ssh_url']}@gpu1:22/var/log/x.log",
    "http_url": f"http://bob:{V['http_url']}@127.0.0.1:30000/health",
    "address": f"connecting to root:{V['address']}@10.0.0.7",
    "toml_password": f'password = "{V["toml_password"]}"',
    "passphrase": f'key_passphrase = "{V["passphrase"]}"',
    "shell_escaped": f"bash -c 'x api_key=\\'{V['shell_escaped']}\\''",
    "double_json": f'{{"msg": "{{\\\\\\"api_key\\\\\\": \\\\\\"{V["double_json"]}\\\\\\"}}"}}',
    "auth_encoded": f"h=Authorization%3A%20Bearer%20{V['auth_encoded']}",
    "x_api_key": f'curl -H "X-API-Key: {V["x_api_key"]}" http://h/generate',
}


def leaks(data: bytes | str) -> list[str]:
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    return [k for k, v in V.items() if v.encode() in raw]


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_is_redacted_and_masked(form):
    line = FORMS[form]
    assert V[form] not in redact(line), redact(line)
    assert "«redacted:" in redact(line)
    masked, _ = mask(line.encode())
    assert len(masked) == len(line.encode()) and V[form].encode() not in masked
    assert secret_spans(line)
    assert redact(redact(line)) == redact(line)  # idempotent: a mark stays a mark


def test_what_is_not_a_secret_stays():
    for line in (
        "tokenizer_path='/models/tok', token usage: 0.50",
        "GET /v1/models?limit=10%25 HTTP/1.1",  # percent-encoding without a secret
        'msg="a \\"quoted\\" word"',
        "progress: 50% done, 20%3 of",
    ):
        assert redact(line) == line, line


def _log() -> str:
    head = (
        "[2026-03-01 09:00:00] server_args=ServerArgs(model_path='m', tp_size=1, port=30000)\n"
        "[2026-03-01 09:00:02 TP0] Load weight begin. avail mem=70.00 GB\n"
    )
    body = "".join(
        f"[2026-03-01 09:00:{10 + k:02d}] {FORMS[f]}\n" for k, f in enumerate(sorted(FORMS))
    )
    tail = (
        "[2026-03-01 09:01:00 TP0] Decode batch, #running-req: 1, #token: 90, token usage: "
        "0.00, cuda graph: True, gen throughput (token/s): 88.25, #queue-req: 0\n"
        "[2026-03-01 09:01:01 TP0] Scheduler hit an exception: Traceback (most recent call "
        "last):\n"
        f'  File "/s.py", line 1, in run\n    connect({FORMS["json_escaped"]!r})\n'
        f"RuntimeError: refused {FORMS['bearer']}\n"
    )
    return head + body + tail


def _cli(capsys, *args: str, ok=(0,)) -> str:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    assert (exc.value.code or 0) in ok, (args, exc.value.code, out, err)
    assert "Traceback" not in err, err
    return out + err


def _tree_leaks(*roots: Path, inputs: tuple[Path, ...] = ()) -> list[str]:
    """Every file under ``roots`` but the user's own ``inputs`` (the log given to ingest, the
    config): its bytes, and for a parquet part every cell as text."""
    found = []
    for root in roots:
        for p in [root] if root.is_file() else root.rglob("*"):
            if not p.is_file() or p.is_symlink() or p.name == "scrub.py" or p in inputs:
                continue
            data = p.read_bytes()
            if p.suffix == ".parquet":
                data += pl.read_parquet(p).write_ndjson().encode()
            found += [f"{p}: {k}" for k in leaks(data)]
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_log_and_a_launch_full_of_secrets_leave_none_anywhere(tmp_path, capsys):
    log = tmp_path / "sglang_sec6.log"
    log.write_text(_log())
    outs = [_cli(capsys, "ingest", str(log), "--json"), _cli(capsys, "ingest", str(log))]
    runs = [r["run_id"] for r in json.loads(_cli(capsys, "runs", "--json"))]
    assert len(runs) == 2  # the `ServerArgs(` line starts a second run
    for args in (
        ("runs", "--json"), ("runs", "--csv"), ("runs",),
        *[(cmd, run, *fmt) for run in runs for cmd in ("show", "diagnose")
          for fmt in (("--json",), ())],
        ("diagnose", "x", "--log", str(log), "--json"), ("diagnose", "x", "--log", str(log)),
        ("classify", str(log), "--json"), ("classify", str(log)),
        ("report", "--json", "-o", str(tmp_path / "r.html")),
        ("report", "-o", str(tmp_path / "r2.html")),
        ("plot", "decode", runs[0], "-o", str(tmp_path / "d.svg")),
        ("plot", "decode", runs[0], "--json", "-o", str(tmp_path / "d2.svg")),
        ("advise", "--json"),
    ):  # fmt: skip
        outs.append(_cli(capsys, *args, ok=(0, 3)))
    # lint and a journaled launch of a chain full of them, its log named by the user
    chain = (
        f"export HF_TOKEN={V['hf_env']} WANDB_API_KEY={V['wandb_env']}; "
        f"echo {FORMS['json_escaped']!r}; echo {FORMS['url_pw_enc']!r}; "
        f"curl -s -H 'Authorization: Bearer {V['bearer']}' http://127.0.0.1:1/ || true; "
        f"echo {FORMS['double_json']!r} {FORMS['auth_encoded']!r}; "
        f"python3 -m sglang.launch_server --model-path sim://k2 --port {_free_port()} "
        f"--hf-token {V['hf_flag']} --api-key {V['serverargs']} > {tmp_path}/user.log 2>&1 &"
    )
    outs.append(_cli(capsys, "lint", "--shell", chain, ok=(0, 1)))
    outs.append(_cli(capsys, "lint", "--shell", chain, "--json", ok=(0, 1)))
    user_log = tmp_path / "named" / "u6.log"
    user_log.parent.mkdir()
    outs.append(
        _cli(capsys, "launch", "--shell", chain, "--replay", "--sim", "--name", "u6",
             "--log", str(user_log), "--deadline", "8", "--json", ok=(0, 1, 4))
    )  # fmt: skip
    try:
        outs.append(_cli(capsys, "launch", "--list", "--json"))
        # error lines that quote what was typed
        outs.append(_cli(capsys, "show", f"x {FORMS['http_url']}", ok=(3,)))
        outs.append(_cli(capsys, "ingest", FORMS["ssh_url"], ok=(2, 3, 4, 5)))
        Path("forensics.toml").write_text(
            f'[hosts.g1]\naddress = "root:{V["address"]}@127.0.0.1"\n'
            f'[hosts.g2]\naddress = "h"\n{FORMS["toml_password"]}\n'
        )
        outs.append(_cli(capsys, "hosts", "list", ok=(0, 2)))
        outs.append(_cli(capsys, "hosts", "list", "--json", ok=(0, 2)))
        Path("forensics.toml").write_text(f'[hosts.g1]\naddress = "root:{V["address"]}@h"\n')
        outs.append(_cli(capsys, "hosts", "list", "--json", ok=(0, 2)))
        time.sleep(1.5)  # the follower's pass after the launch (launcher.scrub)
        for out in outs:
            assert not leaks(out), out
        assert "«redacted:" in "".join(outs[3:12])  # show --json: marks where the values were
        home = Path(os.environ["FORENSICS_HOME"])
        # every file forensics, the launch and its server wrote: the store, the home, the
        # journal and work files beside the named log, the log the chain's server wrote
        inputs = (log, tmp_path / "forensics.toml")
        assert _tree_leaks(home, tmp_path, inputs=inputs) == []
        assert (tmp_path / "user.log").exists() and list((tmp_path / "named").iterdir())
        journal = user_log.with_name("u6.log.journal.jsonl").read_text()
        assert '"tail"' in journal and "****" in journal  # the steps' echoes, masked
    finally:
        _cli(capsys, "stop", "u6", ok=(0, 1, 3, 4))


def _wait_for(predicate, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.2)
    return False


@pytest.fixture(params=["local", "ssh"])
def where(request):
    if request.param == "ssh":
        request.getfixturevalue("ssh_config")
        return "sshtest"
    return None


def test_what_a_server_prints_after_the_launch_concluded_is_masked(tmp_path, capsys, where):
    """The launch ends (its health deadline passes) while the server runs on; then the
    server prints a token into the log the user named: the follower the launch left on the
    host masks it, and ends once the server's group is gone. Locally and over SSH (the
    loopback host shares this file system). The server prints when the test says so (a file
    it waits for), not after a fixed sleep: a launch slower than the sleep under load saw
    the token printed before it concluded."""
    log = tmp_path / "late" / "late.log"
    log.parent.mkdir()
    go = tmp_path / "late" / "go"
    late = V["hf_env"] + "late"
    chain = (
        f"nohup sh -c 'echo start; for i in $(seq 600); do [ -e {go} ] && break; sleep 0.1; "
        f"done; echo HF_TOKEN={late}; echo api_key={late}x; sleep 60' > {log} 2>&1 &"
    )
    args = ["launch", "--shell", chain, "--replay", "--name", "late6", "--deadline", "1",
            "--json", *(["--host", where] if where else [])]  # fmt: skip
    out = _cli(capsys, *args, ok=(0, 1, 4, 6))  # 6: the health wait passed its deadline
    try:
        assert json.loads(out)["status"] == "timeout", out
        assert late.encode() not in log.read_bytes()  # not printed yet
        go.touch()  # the server prints the token now, after the launch concluded
        assert _wait_for(lambda: b"HF_TOKEN=****" in log.read_bytes()), log.read_bytes()
        assert _wait_for(lambda: late.encode() not in log.read_bytes())
        followers = _followers(log)
        assert followers, "no follower runs while the server does"
    finally:
        _cli(capsys, "stop", "late6", ok=(0, 1, 3, 4))
    # the server's group gone: the follower ends by itself
    assert _wait_for(lambda: not _followers(log), timeout=15), _followers(log)


def _followers(log: Path) -> list[int]:
    """The follower processes (`python3 ./scrub.py follow`, its arguments in its environment)
    of the launch logging to ``log``; their command line names no path of the launch."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                argv = (d / "cmdline").read_bytes().split(b"\0")
                env = (d / "environ").read_bytes()
            except OSError:
                continue
            if argv[1:3] == [b"./scrub.py", b"follow"] and str(log).encode() in env:
                assert not any(str(log.parent).encode() in a for a in argv)
                out.append(int(d.name))
    return out
