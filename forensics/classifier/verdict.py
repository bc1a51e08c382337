"""Combining rules and model: a run's verdict, its explanation and next steps."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from forensics import signatures as sigs
from forensics.classifier.decide import BASIS_CONFIDENCE, UNPLACED, _refine, _unknown_text
from forensics.classifier.features import features
from forensics.classifier.model import Model
from forensics.classifier.phases import PHASES, _later
from forensics.classifier.records import Analysis

NEXT_STEPS_OK = ["nothing failed; compare its tok/s with other runs: forensics runs"]


NEXT_STEPS_HUNG_STAGE = {
    "load": (
        "the log stops during loading: check the host is still loading (nvidia-smi memory "
        "grows, disk reads) or stuck on the network/filesystem; check the GPUs are free",
    ),
    "capture": (
        "the log stops during CUDA-graph capture: a stuck capture usually means a deadlock "
        "between ranks or a kernel that never returns",
        "retry with a smaller --cuda-graph-max-bs (e.g. {graph_bs_down}; "
        "--cuda-graph-max-bs-decode on SGLang >= 0.5.14)",
        "confirm with --disable-cuda-graph",
    ),
    "runtime": ("the server stopped making progress while serving",),
    "pre-exec": ("the server printed nothing after it was started",),
}


@dataclass
class Verdict:
    path: str
    run_index: int
    phase: str
    hung: bool
    signature: str | None
    confidence: float
    evidence: list[dict[str, Any]]
    explanation: str
    next_steps: list[str]
    rule_phase: str | None = None
    model_phase: str | None = None
    capture_cause: str | None = None
    decided: bool = True  # the log's text places the phase; False: the likeliest guess
    basis: str = ""  # what placed it (a BASIS_CONFIDENCE key)
    settle: list[str] = field(default_factory=list)  # what evidence would settle an undecided one

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "run_index": self.run_index,
            "phase": self.phase,
            "hung": self.hung,
            "signature": self.signature,
            "confidence": round(self.confidence, 3),
            "decided": self.decided,
            "evidence": self.evidence,
            "explanation": self.explanation,
            "next_steps": self.next_steps,
        }


def explain(a: Analysis, phase: str, hung: bool) -> tuple[str, list[str]]:
    """One-line explanation and next steps, each about the evidence the verdict cites."""

    def fit(remedies) -> list[str]:
        return sigs.fit(remedies, a.settings)  # fitted to the run's own values

    sid = a.signature
    sig = sigs.BY_ID.get(sid or "")
    steps: list[str] = []
    if a.basis == "evidence" and phase == "cleanup" and sig is not None:
        pids = [str(f["pid"]) for f in a.host_findings if isinstance(f.get("pid"), int)]
        text = "cleanup: the GPUs are held: " + "; ".join(f["message"] for f in a.host_findings[:4])
        if pids:
            steps.append(f"kill {' '.join(pids)} (kill -9 if they stay), then check nvidia-smi")
        return text, steps + fit(sig.remedies)
    if phase == "ok":
        noise = sorted({e.noise for e in a.errors if e.noise})
        text = "the server reached ready" + (
            f" and served ({a.decode_lines} decode log lines)" if a.served else ""
        )
        if a.shutdown:
            text += ", then shut down on request"
        if noise:
            text += f"; the error-looking lines ({', '.join(noise)}) are not fatal"
        return text, list(NEXT_STEPS_OK)
    if sig is not None:
        killer = ""
        if sig.reads_exit_code and a.cause is not None:
            m = re.search(r"exit code:? (-?\d+)|Exit code: (-?\d+)", _all_text(a))
            code = (m.group(1) or m.group(2)) if m else None
            if code == "-9":
                killer = " (exit code -9 = SIGKILL: usually the kernel's OOM killer, host RAM)"
                steps.append(
                    "host RAM ran out: load fewer shards in parallel, add swap, or "
                    "stop other processes on the host"
                )
            elif code:
                killer = f" (exit code {code})"
        cause_txt = "see the error"
        if sig.causes:
            c = next((c for c in sigs.CAPTURE_CAUSES if c["id"] == a.capture_cause), None)
            cause_txt = c["explanation"] if c else "see the error"
            if c:
                steps += fit(c["remedies"])
        text = sigs.render(sig.explanation, cause=cause_txt, killer=killer)
        if not sig.causes:
            steps += fit(sig.remedies)
    elif sid and sid.startswith("unknown:") and a.cause is not None:
        text = f"{phase}: an error no catalog entry knows: {_unknown_text(a.cause)[:160]}"
        steps.append(
            "read the traceback at the cited line; `forensics classify train` after "
            "`forensics label RUN PHASE` teaches the classifier this failure"
        )
    elif hung:
        last = a.stages[-1][0] if a.stages else "start"
        text = f"the log stops after `{last}` with no error: it hung (or was killed) during {phase}"
        steps += fit(NEXT_STEPS_HUNG_STAGE.get(phase, ()))
    else:
        text = f"stopped during {phase} without an error in the log"
        steps.append("look at the host (dmesg, nvidia-smi) for what stopped it")
    if hung and sig is not None and sig.hung:
        text += " (hung: it stopped making progress without exiting on its own)"
    return text, [s for s in steps if s]


def _all_text(a: Analysis) -> str:
    return "\n".join(e.text for e in a.errors)


def verdicts(analyses: list[Analysis], model: Model | None) -> list[Verdict]:
    """Verdicts for many runs (one model call)."""
    if model is None or not analyses:
        return [verdict(a, model) for a in analyses]
    probs = model.proba([features(a) for a in analyses])
    return [verdict(a, model, p=list(p)) for a, p in zip(analyses, probs, strict=True)]


# What would settle an undecided verdict, by what the log lacks.
SETTLE = {
    "served_open": "the rest of the log (after its last line) says whether the run ended well",
    "forward": "the frames above the model's forward (the whole traceback) or the stage lines "
    "before it say whether it was capture, warm-up or serving",
    "foreign": "this is not an SGLang server log (signatures.NOT_SGLANG); forensics reads "
    "SGLang's logs: give the SGLang server's own log",
    "not_sglang": "give the SGLang server's own log (the file its stdout and stderr went to); a "
    "launch that failed before the server printed anything leaves an empty log, or one with "
    "the shell's or python's error",
    "stopped_then_text": "the server's own lines stop and another program's text follows: "
    "what stopped it is on the host (dmesg, the launcher's journal: `forensics diagnose NAME "
    "--relaunch`)",
    "fragment": "the full log (its stage lines place the failure); or `forensics diagnose NAME "
    "--relaunch` to replay the launch with evidence collected",
}


def unplaced(a: Analysis) -> Verdict:
    """The outcome of a text that is no SGLang log at all (an UNPLACED basis): no phase."""
    what = next(n["what"] for n in sigs.NOT_SGLANG if n["id"] == a.foreign)
    return Verdict(
        path=a.path,
        run_index=a.run_index,
        phase=None,  # type: ignore[arg-type] - no phase: nothing of a launch to place
        hung=False,
        signature=NOT_SGLANG_SIGNATURE,
        confidence=BASIS_CONFIDENCE[a.basis],
        evidence=[],
        explanation=f"not an SGLang server log: {what}",
        next_steps=[SETTLE[a.basis]],
        decided=False,
        basis=a.basis,
        settle=[SETTLE[a.basis]],
    )


NOT_SGLANG_SIGNATURE = "not_sglang"


def verdict(a: Analysis, model: Model | None, *, p: list[float] | None = None) -> Verdict:
    """The verdict of one run: the rules' phase when the text decides it (logic before
    statistics), else the likeliest phase no earlier than what the log proves, undecided;
    no phase for a text that is no SGLang log at all (UNPLACED)."""
    if a.basis in UNPLACED:
        return unplaced(a)
    mphase = None
    if a.decided and a.rule_phase in PHASES:
        phase, conf = a.rule_phase, BASIS_CONFIDENCE[a.basis]
    else:
        allowed = [c for c in PHASES if a.floor is None or c == "ok" or _later(c, a.floor) == c]
        if a.cause is not None:
            allowed = [c for c in allowed if c != "ok"] or allowed
        if model is not None:
            if p is None:
                p = list(model.proba([features(a)])[0])
            probs = dict(zip(model.classes, p, strict=False))
            mphase = max(probs, key=probs.get)
        else:
            probs = {}
        if a.rule_phase in allowed:
            phase = a.rule_phase
        else:
            phase = max(allowed, key=lambda c: probs.get(c, 0.0)) if probs else allowed[0]
        share = probs.get(phase, 0.5) / (sum(probs.get(c, 0.0) for c in allowed) or 1.0)
        conf = BASIS_CONFIDENCE.get(a.basis, 0.35) * (0.75 + 0.25 * share)
    hung = a.rule_hung if phase == a.rule_phase else (phase != "ok" and a.cause is None)
    if phase == "ok":
        hung = False
    # the signature must fit the phase that was decided
    if phase != a.rule_phase:
        if phase == "ok":
            a.signature = None
        else:
            a.signature = _refine(a, a.signature, phase)
    text, steps = explain(a, phase, hung)
    settle: list[str] = []
    if not a.decided:
        key = a.basis if a.basis in SETTLE else "fragment"
        settle.append(SETTLE[key])
        if key != "fragment":
            settle.append(SETTLE["fragment"])
        text = f"{text} (undecided: the text does not place it; {settle[0]})"
        if a.foreign:
            what = next(n["what"] for n in sigs.NOT_SGLANG if n["id"] == a.foreign)
            text = f"not an SGLang server log ({what}): {text}"
    return Verdict(
        path=a.path,
        run_index=a.run_index,
        phase=phase,
        hung=hung,
        signature=a.signature if phase != "ok" else None,
        confidence=float(conf),
        evidence=a.evidence,
        explanation=text,
        next_steps=steps + [s for s in settle[1:] if s not in steps],
        rule_phase=a.rule_phase,
        model_phase=mphase,
        capture_cause=a.capture_cause,
        decided=a.decided,
        basis=a.basis,
        settle=settle,
    )
