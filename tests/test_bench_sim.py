"""forensics bench against the real simulated SGLang server (a subprocess on a free port).

Correctness, not timing: the simulator reports, on each request's final chunk, the decode
time it modelled; the client's figures must agree with it (loosely), and its field names per
SGLang version must give the same accept length.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from forensics.bench import BenchConfig, run_bench
from forensics.sim.engine import MAX_LAG_S

ROOT = Path(__file__).resolve().parent.parent
SPEC = [
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "4",
    "--speculative-num-draft-tokens",
    "5",
]
BASE_TOK_S = "400"  # fast, so the tests are short; the figures scale with it


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sim:
    def __init__(self, tmp: Path, style: str, spec: bool = True):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / f"sim-{style}-{self.port}.log"
        args = [sys.executable, "-m", "forensics.sim", "--model-path", "sim://m"]
        args += ["--port", str(self.port), "--sim-speed", "50", "--sim-style", style]
        args += ["--sim-base-tok-s", BASE_TOK_S] + (SPEC if spec else [])
        self._fh = open(self.log, "wb")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(args, stdout=self._fh, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout: float = 30.0) -> Sim:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(
                    f"simulator exited {self.proc.returncode}: {self.log.read_text()[-2000:]}"
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        pytest.fail(f"simulator not healthy within {timeout}s: {self.log.read_text()[-2000:]}")

    def server_info(self) -> dict:
        with urllib.request.urlopen(self.url + "/server_info", timeout=5) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._fh.close()


@pytest.fixture
def sim_factory(tmp_path):
    started: list[Sim] = []

    def make(style: str = "0.5.23", spec: bool = True) -> Sim:
        sim = Sim(tmp_path, style, spec)
        started.append(sim)
        return sim

    yield make
    for s in started:
        s.stop()


@pytest.fixture
def sim(sim_factory):
    return sim_factory().wait_ready()


def test_single_stream_is_never_faster_than_the_model(sim):
    """Tokens from the server's counters; the client never reports a speed the server did not
    deliver. One-sided on purpose: a busy machine only makes the stream slower, so this checks
    the client's arithmetic without a timing assertion (accuracy is measured by `make bench`)."""
    rep = run_bench(BenchConfig(url=sim.url, num_prompts=4, max_new_tokens=96))
    assert rep.summary["completed"] == 4 and rep.summary["failed"] == 0
    for r in rep.results:
        assert r.output_tokens == 96  # ignore_eos by default, counted by the server
        # the request as the client timed it holds the server's own time for it (sent before
        # the server saw it, read after it finished), and that holds the decode time the
        # simulator modelled (its sleeps only overshoot; its schedule catches up at most
        # MAX_LAG_S). e2e minus TTFT is not one-sided: a client starved of CPU reads its first
        # token late and the rest in one burst (this failed under load).
        truth = r.meta["sim"]["decode_s"] - MAX_LAG_S
        assert r.e2e_s >= r.meta["e2e_latency"] >= truth, (r.e2e_s, r.meta["e2e_latency"], truth)
    # the median decode speed is the median of the per-request ones
    per_req = sorted(r.output_tokens / (r.e2e_s - r.ttft_s) for r in rep.results)
    assert min(per_req) <= rep.summary["decode_tok_s_median"] <= max(per_req) * 1.05


@pytest.mark.parametrize("style", ["0.4.6", "0.5.9", "0.5.23"])
def test_accept_length_per_version_style(sim_factory, style):
    """0.4.6 gives spec_verify_ct only; 0.5.9 and 0.5.23 give spec_accept_length too."""
    sim = sim_factory(style).wait_ready()
    rep = run_bench(BenchConfig(url=sim.url, num_prompts=3, max_new_tokens=48, concurrency=3))
    assert rep.summary["completed"] == 3
    rounds = [r.meta["sim"]["rounds"] for r in rep.results]
    want = sum(r.output_tokens for r in rep.results) / sum(rounds)
    assert rep.summary["accept_len_client"] == pytest.approx(want, rel=0.02)
    assert 1.0 < rep.summary["accept_len_client"] <= 4.0
    # the server-side figure covers the window after /flush_cache (decode rounds only)
    assert rep.flush == "ok"
    assert rep.accept_len_server is not None
    assert rep.accept_len_server == pytest.approx(rep.summary["accept_len_client"], rel=0.15)


def test_openai_and_native_agree_on_token_counts(sim):
    native = run_bench(BenchConfig(url=sim.url, num_prompts=2, max_new_tokens=40))
    chat = run_bench(BenchConfig(url=sim.url, num_prompts=2, max_new_tokens=40, api="openai"))
    comp = run_bench(
        BenchConfig(url=sim.url, num_prompts=2, max_new_tokens=40, api="openai-completions")
    )
    assert [r.output_tokens for r in native.results] == [40, 40]
    assert [r.output_tokens for r in chat.results] == [40, 40]
    assert [r.output_tokens for r in comp.results] == [40, 40]
    assert not any(r.tokens_estimated for r in chat.results + comp.results)


def test_concurrency_mode_completes_all_requests(sim):
    """Also H06: the simulator's /health stays 200 while it serves 8 streams."""
    rep = run_bench(
        BenchConfig(url=sim.url, num_prompts=24, concurrency=8, max_new_tokens=24, health_every=0.1)
    )
    assert (rep.summary["completed"], rep.summary["failed"]) == (24, 0)
    assert rep.summary["output_tokens"] == 24 * 24
    assert rep.health["count"] == len(rep.health_samples) >= 1  # the first probe goes at 0 s
    assert [s.status for s in rep.health_samples] == [200] * rep.health["count"]
    assert rep.health["non_200"] == 0 and rep.health["longest_non_200_s"] == 0.0


def test_accept_length_from_the_run_log_in_the_bench_window(sim):
    """The server-side figure from the run's own Decode batch lines, in the bench's window."""
    from click.testing import CliRunner

    from forensics.cli import cli

    runner = CliRunner()
    r = runner.invoke(cli, ["ingest", str(sim.log)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    name = sim.log.stem
    r = runner.invoke(
        cli,
        ["bench", sim.url, "--run", name, "--num-prompts", "4", "--max-new-tokens", "160",
         "--json"],
        catch_exceptions=False,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["run_name"] == name
    assert out["accept_len_log_lines"] >= 2
    # the log's accept len is per verify round; the requests' is tokens per verify round:
    # both measure the same drafter, so they agree closely
    assert out["accept_len_log"] == pytest.approx(out["accept_len_client"], rel=0.15)
    stored = json.loads(runner.invoke(cli, ["runs", name, "--json"]).output)[0]
    assert stored["bench_tok_s"] == pytest.approx(out["output_tok_s"])


def test_bench_by_launch_name_targets_the_launched_server(tmp_path, capsys):
    """`forensics bench NAME` after `forensics launch --name NAME`: the launch's host and
    port, not a host called NAME."""
    from forensics import launcher
    from forensics.cli import main
    from forensics.recipe import Recipe
    from forensics.store import Store

    store = Store.open(tmp_path / "store", create=True)
    port = _free_port()
    recipe = Recipe(
        name="by_name",
        server=["python3", "-m", "sglang.launch_server", "--model-path", "m", *SPEC],
        log_path=str(tmp_path / "by_name.log"),
        health_url=None,
    )
    sim = {"speed": 100.0, "port": port, "python": sys.executable}
    res = launcher.launch(store, recipe, sim=sim, deadline=30)
    try:
        assert res["status"] == "ready", res
        args = ["--store", str(tmp_path / "store"), "bench", "by_name", "--num-prompts", "2"]
        with pytest.raises(SystemExit) as exc:
            main([*args, "--json", "--no-store", "--max-new-tokens", "16"])
        out = json.loads(capsys.readouterr().out)
        assert exc.value.code == 0 and out["completed"] == 2
        assert out["url"] == f"http://127.0.0.1:{port}"
    finally:
        launcher.stop(store, "by_name", grace_s=3)


def test_bench_of_a_configured_host_goes_through_ssh_to_its_loopback(ssh_config, tmp_path, capsys):
    """SGLang listens on the host's 127.0.0.1: `forensics bench HOST` reaches it through an
    SSH tunnel (the test sshd on 127.0.0.1 plays the GPU host; the simulator its server)."""
    from forensics.cli import main

    sim = Sim(tmp_path, "0.5.23").wait_ready()
    try:
        args = ["--store", str(tmp_path / "store"), "bench", f"sshtest:{sim.port}"]
        with pytest.raises(SystemExit) as exc:
            main([*args, "--num-prompts", "3", "--max-new-tokens", "16", "--json"])
        out = json.loads(capsys.readouterr().out)
        assert exc.value.code == 0 and out["completed"] == 3
        assert out["via"] == "ssh sshtest" and out["url"] == f"http://127.0.0.1:{sim.port}"
        assert out["flush_cache"] == "ok"  # every route went through the tunnel too
        # --direct: straight to the configured address (127.0.0.1 here), no tunnel
        with pytest.raises(SystemExit) as exc:
            main([*args, "--num-prompts", "1", "--max-new-tokens", "8", "--json", "--direct"])
        out = json.loads(capsys.readouterr().out)
        assert exc.value.code == 0 and out["via"] is None
    finally:
        sim.stop()
