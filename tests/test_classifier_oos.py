"""Out-of-sample rule rows: serving proof that is not a Decode line, text after a harness.

The excerpts are written here (shapes of a CI harness log and a PD router log), not copied."""

from __future__ import annotations

import pytest

from forensics import classifier, signatures

ROUTER_START = """\
Collecting sglang-router
Successfully installed sglang-router-0.2.1
[2026-03-01 10:00:00] server_args=ServerArgs(model_path='m', tp_size=8)
INFO:     Started server process [4242]
INFO:     Uvicorn running on http://127.0.0.1:6688 (Press CTRL+C to quit)
"""

BENCH_BLOCK = """\
============ Serving Benchmark Result ============
Backend:                                 sglang
Successful requests:                     512
Benchmark duration (s):                  301.22
Output token throughput (tok/s):         1754.10
Accept length:                           2.41
Mean TPOT (ms):                          38.20
==================================================
"""

HARNESS_FAIL = """\
Traceback (most recent call last):
  File "/opt/py/site-packages/sglang/test/test_utils.py", line 90, in _callTestMethod
    method()
  File "/opt/py/unittest/case.py", line 700, in fail
    raise self.failureException(msg)
AssertionError: 1754.1 not greater than or equal to 1800.0
----------------------------------------------------------------------
Ran 1 test in 420.112s

FAILED (errors=1)
"""

KUBECTL_TAIL = """\
error: resource(s) were provided, but no name was specified
configmap "sglang-info" deleted
"""

ACCURACY = """\
100%|##########| 200/200 [00:41<00:00,  4.83it/s]
Accuracy: 0.945
Invalid: 0.000
Latency: 41.402 s
"""

ACCESS = """\
INFO:     127.0.0.1:50012 - "POST /v1/chat/completions HTTP/1.1" 200 OK
INFO:     127.0.0.1:50014 - "POST /v1/chat/completions HTTP/1.1" 200 OK
INFO:     127.0.0.1:50016 - "POST /v1/chat/completions HTTP/1.1" 200 OK
"""

PERF_TABLE = """\
                       NVIDIA AIPerf | LLM Metrics
| Metric                               |     avg |
| Output Token Throughput (tokens/sec) | 1754.10 |
"""

CASES = {
    "perf_table": ROUTER_START + PERF_TABLE + KUBECTL_TAIL,
    "bench_result": ROUTER_START + BENCH_BLOCK + "\nOK\n" + KUBECTL_TAIL,
    "eval_accuracy": ROUTER_START + ACCURACY + KUBECTL_TAIL,
    "http_200_generate": ROUTER_START + ACCESS + KUBECTL_TAIL,
    "harness_after_serving": ROUTER_START + BENCH_BLOCK + HARNESS_FAIL,
    "after_harness": ROUTER_START + BENCH_BLOCK + "Ran 1 test in 3.2s\n\nOK\n" + KUBECTL_TAIL,
}


@pytest.fixture(scope="module")
def model():
    return classifier.load_model(None)


@pytest.mark.parametrize("case", sorted(CASES))
def test_client_proof_of_serving_is_ok(case, model):
    (v,) = classifier.classify_text(CASES[case], model)
    assert (v.phase, v.signature) == ("ok", None), (v.explanation, v.evidence)


def test_every_serving_proof_row_has_a_case():
    ids = {p["id"] for p in signatures.SERVING_PROOF}
    assert ids <= set(CASES)


def test_one_http_200_is_the_warmup_not_serving(model):
    """One generate call before ready is the server's own warm-up: it proves nothing."""
    text = ROUTER_START + ACCESS.splitlines()[0] + "\n"
    (v,) = classifier.classify_text(text, model)
    assert v.phase != "ok"


def test_router_start_alone_is_not_ok(model):
    (v,) = classifier.classify_text(ROUTER_START, model)
    assert v.phase != "ok"


VLLM = """\
(APIServer pid=101) INFO 02-03 10:00:00 [api_utils.py:300] vLLM API server version 9.9.9
(APIServer pid=101) INFO 02-03 10:00:01 [utils.py:200] non-default args: {'model': 'm'}
(EngineCore_DP0 pid=202) INFO 02-03 10:00:09 [core.py:90] Initializing a V1 LLM engine
(APIServer pid=101) INFO 02-03 10:00:30 [launcher.py:40] Route: /v1/completions
(APIServer pid=101) INFO:     Application startup complete.
"""


def test_another_servers_log_says_so_undecided(model):
    """A vLLM log is not SGLang's: the verdict says so, undecided, at low confidence."""
    (v,) = classifier.classify_text(VLLM, model)
    assert not v.decided and v.basis == "foreign" and v.confidence < 0.5
    assert v.explanation.startswith("not an SGLang server log (vLLM's server log)")


def test_the_vllm_row_matches_its_case():
    assert signatures.foreign_log(VLLM.splitlines()) == "vllm"  # every row: test_classifier_gaps
