"""Hostile servers and values of issue 14's "Bounded everything" class: every read from a
socket has a byte cap, a deadline bounds the whole command, credentials never show.

Real HTTP against tests/plugins/faultserver.py (endless bodies, a /flush_cache that hangs) and a
listening socket that never answers; docs/bad-inputs.md lists each case and its mechanism.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import polars as pl
import pytest

from forensics import bench
from forensics.bench import BenchConfig, SSEError, SSEParser, run_bench
from forensics.cli import main
from forensics.store import Store
from forensics.urls import redact_url


def cfg(url: str, **kw) -> BenchConfig:
    kw.setdefault("num_prompts", 1)
    kw.setdefault("warmup", 0)
    kw.setdefault("health_every", 0)
    return BenchConfig(url=url, **kw)


def run(capsys, *args: str, store: str | Path = "st") -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(["--store", str(store), *args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_sse_parser_caps_a_line_and_an_event():
    """Pure: a line without end, an event without its blank line: SSEError at the cap."""
    p = SSEParser()
    with pytest.raises(SSEError, match="line over 8 MiB"):
        for _ in range(bench.MAX_SSE_EVENT // 65536 + 2):
            p.feed(b"x" * 65536)
    p = SSEParser()
    with pytest.raises(SSEError, match="event over 8 MiB"):
        for _ in range(bench.MAX_SSE_EVENT // 900):
            p.feed(b"data: " + b"y" * 994 + b"\n")
    # under the cap, a long event is whole
    p = SSEParser()
    assert [e.data for e in p.feed(b"data: " + b"z" * 100_000 + b"\n\n")] == ["z" * 100_000]


@pytest.mark.timeout(120)
def test_endless_answers_end_at_their_caps(faultserver):
    """An SSE line or event that never ends is that request's protocol_error; an endless
    /server_info is dropped with a warning; an endless /health body is no healthy answer."""
    for scen, why in (("endless_line", "line over 8 MiB"), ("endless_event", "event over 8 MiB")):
        rep = run_bench(cfg(faultserver.fresh(scen), flush_cache=False))
        (res,) = rep.results
        assert res.reason == "protocol_error" and why in res.detail, (scen, res)
    rep = run_bench(cfg(faultserver.fresh("endless_info"), flush_cache=False))
    assert rep.server_info is None
    assert any("/server_info: the answer is over 1,048,576 bytes" in w for w in rep.warnings)
    rep = run_bench(cfg(faultserver.fresh("endless_health"), health_every=0.1, num_prompts=3))
    assert rep.health["count"] >= 1 and rep.health["non_200"] == rep.health["count"]


def test_launcher_health_probe_caps_the_body(faultserver):
    """The launcher's /health probe (urllib) reads at most its cap: an endless 200 is None."""
    from forensics import launcher
    from forensics.hosts import LocalHost

    ok = launcher.http_status(LocalHost(), faultserver.fresh("ok") + "/health", set(), timeout=10)
    assert ok == 200
    url = faultserver.fresh("endless_health") + "/health"
    assert launcher.http_status(LocalHost(), url, set(), timeout=10) is None


def test_launcher_health_probe_of_a_non_http_answer_or_a_bad_port_is_no_answer():
    """A health port that answers bytes that are not HTTP (http.client's BadStatusLine), and a
    chain's `--port notaport` (InvalidURL), are "nothing answers", never an internal error
    (the launch of such a chain ended in a traceback once the server had started)."""
    from forensics import launcher
    from forensics.hosts import LocalHost

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def answer_garbage():
        for _ in range(2):
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                conn.sendall(b"SSH-2.0-OpenSSH_9.2 not http\r\n\r\n")

    t = threading.Thread(target=answer_garbage, daemon=True)
    t.start()
    port = srv.getsockname()[1]
    try:
        url = f"http://127.0.0.1:{port}/health"
        assert launcher.http_status(LocalHost(), url, set(), timeout=10) is None
    finally:
        srv.close()
    bad = "http://127.0.0.1:notaport/health"
    assert launcher.http_status(LocalHost(), bad, set(), timeout=10) is None


@pytest.mark.timeout(120)
def test_deadline_cuts_a_flush_cache_that_hangs(faultserver):
    """After --deadline nothing more is waited for: the /flush_cache that answers only after
    FLUSH_HANG_S (4 s) is cut at the deadline plus its 1 s grace, never answered (the old
    10 s grace waited it out: "ok"); the run is marked deadline_hit."""
    rep = run_bench(cfg(faultserver.fresh("hang_flush"), warmup=1, deadline=1.0))
    assert rep.deadline_hit
    assert rep.flush == "skipped"  # cut while waiting: it never answered
    assert rep.results == [] or all(not r.ok for r in rep.results)


@pytest.mark.timeout(120)
def test_bench_deadline_against_a_server_that_never_answers(capsys, tmp_path):
    """A port that accepts and never speaks: bench --deadline ends with exit 6, one line."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(64)
        url = f"http://127.0.0.1:{srv.getsockname()[1]}"
        code, _, err = run(capsys, "bench", url, "--deadline", "2", "--num-prompts", "2")
    assert code == 6 and "passed --deadline 2s" in err and err.count("Error:") == 1, err


class _Basic(BaseHTTPRequestHandler):
    """Answers 401 without the right basic auth (what the password is for), else a tiny
    SGLang-like stream."""

    seen: list[str] = []

    def log_message(self, *a):  # quiet
        pass

    def _auth_ok(self) -> bool:
        import base64

        want = "Basic " + base64.b64encode(b"user:S3CRET-pw").decode()
        self.seen.append(self.headers.get("Authorization", ""))
        return self.headers.get("Authorization") == want

    def do_GET(self):
        self.send_response(200 if self._auth_ok() else 401)
        self.end_headers()
        self.wfile.write(b"{}")

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        self.rfile.read(n)
        if not self._auth_ok():
            self.send_response(401)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        meta = {"finish_reason": {"type": "length"}, "completion_tokens": 4, "prompt_tokens": 3}
        self.wfile.write(b"data: " + json.dumps({"text": "a b c d", "meta_info": meta}).encode())
        self.wfile.write(b"\n\ndata: [DONE]\n\n")


def test_url_credentials_are_used_but_never_shown_or_stored(capsys, tmp_path):
    """bench http://user:PASSWORD@host/: the server gets basic auth; no output, JSON, stored
    row or error message holds the password."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Basic)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        port = srv.server_address[1]
        url = f"http://user:S3CRET-pw@127.0.0.1:{port}"
        code, out, err = run(capsys, "bench", url, "--num-prompts", "2", "--json", store="st")
        assert code == 0, err
        assert any(h.startswith("Basic ") for h in _Basic.seen)  # the password was used
        assert "S3CRET" not in out + err
        assert json.loads(out)["url"] == f"http://user:***@127.0.0.1:{port}"
        code, out, err = run(capsys, "bench", url, "--num-prompts", "1", store="st")
        assert code == 0 and "S3CRET" not in out + err and "user:***@" in out
        # a refused request, an error line: still no password
        bad = f"http://user:S3CRET-pw@127.0.0.1:{port}:99999"
        code, out, err = run(capsys, "bench", bad, store="st")
        assert code == 2 and "S3CRET" not in out + err and "user:***@" in err
        code, out, err = run(capsys, "bench", "user:S3CRET-pw@127.0.0.1:1", "--deadline", "3")
        assert "S3CRET" not in out + err
    finally:
        srv.shutdown()
        srv.server_close()
    st = Store(tmp_path / "st")
    for name in ("bench", "bench_requests", "bench_health"):
        df = st.table(name)
        if not df.is_empty():
            text = df.select(pl.all().cast(pl.String)).write_csv()
            assert "S3CRET" not in text, name
    for p in (tmp_path / "st").rglob("*"):
        if p.is_file():
            assert b"S3CRET" not in p.read_bytes(), p


def test_redact_url_forms():
    cases = {
        "http://user:PASSWORD@host/": "http://user:***@host/",
        "https://u:p@ss@h:1/x?token=abc&n=1": "https://u:***@h:1/x?token=***&n=1",
        "ssh://root:pw@gpu8/data/x.log": "ssh://root:***@gpu8/data/x.log",
        "see http://a:b@c:5 and http://d/": "see http://a:***@c:5 and http://d/",
        "http://user@host/?api_key=K": "http://user@host/?api_key=***",
        "http://host:30000/health": "http://host:30000/health",
    }
    for raw, want in cases.items():
        assert redact_url(raw) == want, raw


def test_sim_model_steps_are_bounded(capsys):
    """sim model --steps 1000000000 never returned: refused (exit 2); the model's own sum
    is closed-form, so any accepted depth answers at once."""
    from forensics.sim import perf

    code, _, err = run(capsys, "sim", "model", "--steps", "1000000000")
    assert code == 2 and "out of range" in err
    code, out, _ = run(
        capsys, "sim", "model", "--steps", str(perf.MAX_STEPS), "--quality", "1", "--json"
    )
    assert code == 0 and 1 < json.loads(out)[0]["accept_len"] <= perf.MAX_STEPS + 1
    spec = perf.SpecConfig(algorithm="EAGLE3", num_steps=5, topk=1, num_draft_tokens=6, quality=0.7)
    p = perf.level_accept_prob(spec)
    assert perf.expected_accept_len(spec) == pytest.approx(1 + sum(p**j for j in range(1, 6)))


# --------------------------------------------------------------------------------------
# Config values (forensics.toml): jump cycles and connect_timeout
# --------------------------------------------------------------------------------------
JUMP_CASES = {
    "self": ('[hosts.a]\naddress = "r@10.0.0.1"\njump = "a"\n', "(a -> a)"),
    "pair": (
        '[hosts.a]\naddress = "r@10.0.0.1"\njump = "b"\n'
        '[hosts.b]\naddress = "r@10.0.0.2"\njump = "a"\n',
        "(a -> b -> a)",
    ),
    "tail": (
        '[hosts.a]\naddress = "r@10.0.0.1"\njump = "b"\n'
        '[hosts.b]\naddress = "r@10.0.0.2"\njump = "c"\n'
        '[hosts.c]\naddress = "r@10.0.0.3"\njump = "b"\n',
        "(b -> c -> b)",
    ),
    "unknown": ('[hosts.a]\naddress = "r@10.0.0.1"\njump = "nope"\n', "'nope': no such host"),
}


@pytest.mark.parametrize("case", sorted(JUMP_CASES))
def test_jump_cycles_and_unknown_jumps_are_config_errors(capsys, tmp_path, case):
    """A host jumping to itself or A -> B -> A was a RecursionError: exit 2 naming the cycle."""
    text, needle = JUMP_CASES[case]
    (tmp_path / "forensics.toml").write_text(text)
    code, out, err = run(capsys, "ingest", "a:/x.log")
    assert code == 2 and needle in err and "forensics.toml: hosts." in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("value", ["inf", "nan", "-inf", "1e308", "-1", "0", "601"])
def test_connect_timeout_must_be_finite_and_bounded(capsys, tmp_path, value):
    (tmp_path / "forensics.toml").write_text(
        f'[hosts.a]\naddress = "r@10.0.0.1"\nconnect_timeout = {value}\n'
    )
    code, out, err = run(capsys, "ingest", "a:/x.log")
    assert code == 2 and "hosts.a.connect_timeout" in err and "at most 600" in err, err


def test_a_jump_chain_that_ends_is_accepted(tmp_path, monkeypatch):
    from forensics.hosts import load_config

    (tmp_path / "forensics.toml").write_text(
        '[hosts.a]\naddress = "r@10.0.0.1"\njump = "b"\n'
        '[hosts.b]\naddress = "r@10.0.0.2"\njump = "r@10.0.0.9"\nconnect_timeout = 600\n'
    )
    hosts = load_config([tmp_path / "forensics.toml"])["hosts"]
    assert hosts["a"].jump == "b" and hosts["b"].connect_timeout == 600.0
