"""How often lint's shell-syntax verdict agrees with bash's own, on random chains.

    python scripts/shell_syntax_agreement.py [SEED] [N]      # defaults: 0 and 3000

Builds N chains from fragments (commands, operators, brackets, reserved words, quotes,
substitutions, redirections), asks ``bash -n -c CHAIN`` whether bash would refuse each, and
compares with ``parse_chain(CHAIN).errors`` (what ``forensics lint`` reports as shell-syntax).
Prints the false errors (valid bash that lint would refuse: a relaunch would refuse to replay
it) and the misses (what bash refuses and lint lets through), a few of each, and the counts.
The curated cases of the same comparison are tests/test_lint_hostile.py.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys

from forensics_parsers.shell import parse_chain

FRAGMENTS = [
    "a", "b", "echo x", "pkill -f y", "sleep 1", "(", ")", "{", "}", ";", "&", "&&", "||", "|",
    "|&", "\n", "if", "then", "else", "elif", "fi", "while", "until", "do", "done",
    "for x in 1 2", "case $x in", "a)", ";;", "esac", "[[ a ]]", "!", "time", "> f", "2>&1",
    "< /dev/null", "f()", "function g", "'q'", '"d"', "$(a)", "`b`", "x=1", "x=(1 2)", "<(ls)",
    "#c", "nohup", "bash -c 'a; b'", "in",
    # sixth round: tests and function headers alone (`[[ ]]`: scripts/…SILENT_ABORT)
    "[[", "]]", "-f x", "function", "function f", "{ a; }", "f() { a; }", "[[ -n $x ]]",
    # seventh round: the rest of `[[ … ]]`, arithmetic, select, coproc, here-strings
    "[[ ]]", "function x=(1 2)", "[[ ( a ) ]]", "[[ a && b ]]", "[[ ! a ]]", "[[ a < b ]]",
    "[[ $x =~ ^a+$ ]]", "((x++))", "$((1+2))", "select y in a", "coproc", "<<<x", "&>f", ">|f",
]  # fmt: skip


# `[[ ]]` where a command starts (after an operator, a bracket, a newline or a reserved word
# that starts a command; an approximation: `a while [[ ]]` is counted too)
SILENT_ABORT = re.compile(
    r"(?:^|[;&|(){}\n]|\b(?:then|do|else|elif|if|while|until|time|coproc|function\s+\S+)|!)\s*"
    r"\[\[\s+\]\](?=$|[\s;&|()])"
)


def main(seed: int = 0, n: int = 3000) -> int:
    if shutil.which("bash") is None:
        print("bash is not installed here", file=sys.stderr)
        return 2
    rng = random.Random(seed)
    false_errors: list[str] = []
    misses: list[str] = []
    for _ in range(n):
        chain = " ".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 9)))
        done = subprocess.run(["bash", "-n", "-c", "--", chain], capture_output=True)
        # bash -n reports the errors inside `[[ … ]]` (one never closed, `[[ | b`) with exit
        # status 0, on stderr: any message is a refusal (it prints nothing for a valid text)
        refused = done.returncode != 0 or bool(done.stderr.strip())
        # `[[ ]]` (a `]]` right after `[[`): bash 5 -n says nothing and exits 0, but its
        # parser gives up there silently: `bash -c 'echo a; [[ ]]; echo b'` runs nothing at
        # all, not even `echo a`. A chain holding it never runs: a refusal.
        refused = refused or bool(SILENT_ABORT.search(chain))
        ours = bool(parse_chain(chain).errors)
        if ours and not refused:
            false_errors.append(chain)
        elif refused and not ours:
            misses.append(chain)
    for chain in false_errors[:10]:
        print(f"false error: {chain!r}: {parse_chain(chain).errors[0]}")
    for chain in misses[:5]:
        print(f"missed:      {chain!r}")
    agree = n - len(false_errors) - len(misses)
    print(f"{n} chains (seed {seed}): agree {agree}, false errors {len(false_errors)}, "
          f"missed {len(misses)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(*map(int, sys.argv[1:3])))
