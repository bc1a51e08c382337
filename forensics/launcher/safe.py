"""Safe patterns for a replay: broad kill patterns replaced by a per-replay token, so that a
replayed chain can touch nothing outside itself (``--safe-patterns``)."""

from __future__ import annotations

import re
import secrets
import shlex

from forensics.kills import mass_kills, self_kill_match, step_kills
from forensics.recipe import rewrite_steps
from forensics_parsers.shell import Chain, launching_command_line


def new_token() -> str:
    """A per-replay marker: nothing else on the host has it in its command line."""
    return "fxr" + secrets.token_hex(6)


def safe_chain(chain: Chain, token: str, marker: str, shell: str = "bash") -> str:
    """The chain with broad kill patterns replaced by the per-replay ``token``.

    A ``pkill -f``/``pgrep -f`` pattern that matches the launching shell's command line becomes
    ``token`` (which the replayed chain contains, so the self-kill is kept; the simulated server
    carries it too via ``--sim-tag``); one that does not becomes a pattern nothing matches.
    Name patterns (``killall python``, ``pkill python3``) become the token's first 15 chars (no
    process has that name). ``fuser -k /dev/nvidia*`` targets ``marker``, a per-replay file no
    process holds. Nothing outside the replay can be touched.
    """
    cmdline = launching_command_line(chain.text, shell)
    replacements: dict[int, str] = {}
    for step in chain.steps:
        text = step.text
        for spec in step_kills(step):
            if spec.full:
                new = token if self_kill_match(spec, cmdline) else f"^[f]xr-nomatch-{token}$"
            else:
                new = token[:15]
            text = _replace_word(text, spec.pattern, new)
        if re.search(r"\bfuser\b", text):
            text = re.sub(r"(?<![\w/])/dev/nvidia[^\s;&|)]*", shlex.quote(marker), text)
        if re.search(r"\bkillall_sglang\.sh\b", text) or mass_kills(step):
            text = ": skipped by --safe-patterns: " + shlex.quote(step.text)
        if text != step.text:
            replacements[step.index] = text
    return rewrite_steps(chain, replacements)


def _replace_word(text: str, pattern: str, new: str) -> str:
    """Replace the (possibly quoted) kill pattern in a step's text, keeping everything else."""
    for quoted in (f'"{pattern}"', f"'{pattern}'", shlex.quote(pattern), pattern):
        k = text.rfind(quoted)
        if k >= 0:
            return text[:k] + shlex.quote(new) + text[k + len(quoted) :]
    return text
