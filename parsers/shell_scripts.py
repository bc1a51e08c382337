"""How a WRAPPERS row finds the shell text it runs (pure): an option's value (``flock F -c``,
``env -S``, ``su -c``), its words joined (``eval``, ``watch``), ssh's remote command, GNU
parallel's commands, ``find -exec``'s, the keys typed into tmux or screen, and what an
interpreter's inline code amounts to (``INLINE_CODE``: ``python3 -c 'os.kill(-1, 9)'``).
The table itself is ``parsers/shell_runners.py``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable


def option_cluster(word: str, takes: frozenset[str]) -> bool:
    """``-dmS`` (flags, the last taking the next word) as opposed to ``-n5`` (a glued value)."""
    return (
        len(word) > 2
        and word[0] == "-"
        and word[1] != "-"
        and word[1:].isalpha()
        and "-" + word[-1] in takes
    )


def after_options(words: list[str], takes: frozenset[str]) -> list[str]:
    """The words after the leading options (and a ``--``), skipping the values of ``takes``."""
    k = 0
    while k < len(words) and words[k].startswith("-") and words[k] != "--":
        k += 2 if words[k] in takes or option_cluster(words[k], takes) else 1
    return words[k + 1 :] if k < len(words) and words[k] == "--" else words[k:]


def option_value(words: list[str], option: str) -> str | None:
    """The value of ``option`` in one word or two: ``-c X``, ``-cX``, ``--command=X``."""
    if not words:
        return None
    w = words[0]
    if len(option) == 2 and len(w) > 2 and w[0] == "-" and w[1:].isalpha() and w[-1] == option[1]:
        return words[1] if len(words) > 1 else None  # a cluster ending in it: `script -qc X`
    if not w.startswith(option):
        return None
    if words[0] == option:
        return words[1] if len(words) > 1 else None
    rest = words[0][len(option) :]
    if option.startswith("--"):
        return rest[1:] if rest.startswith("=") else None
    return rest


def script_option(*options: str) -> Callable[[list[str]], str | None]:
    """A runner given its script by an option (``su -c TEXT``, ``flock F -c TEXT``, ``env -S
    TEXT``): the option's value, looked for among the options and at most one other word
    (the user, the lock file) before the command."""

    def script(words: list[str]) -> str | None:
        others = 0
        for k, w in enumerate(words):
            if w == "--":
                return None
            for option in options:
                if (value := option_value(words[k:], option)) is not None:
                    return value
            if not w.startswith("-"):
                others += 1
                if others > 1:
                    return None
        return None

    return script


def joined(options: str = "") -> Callable[[list[str]], str | None]:
    """A runner that hands its words after its options to a shell, joined by spaces (``eval``,
    ``watch``): ``watch -n1 'kill -9 -1'`` runs ``sh -c 'kill -9 -1'``."""
    takes = frozenset(options.split())
    return lambda words: " ".join(after_options(words, takes)) or None


def trap_action(words: list[str]) -> str | None:
    """``trap 'ACTION' SIG…``: the shell runs ACTION when a signal comes or at EXIT (``trap
    'pkill -f x' EXIT`` kills at the chain's end); ``trap - SIG``, ``trap '' SIG``, ``-p``,
    ``-l`` run nothing."""
    words = words[1:] if words[:1] == ["--"] else words
    if len(words) < 2 or words[0] in ("", "-") or words[0].startswith("-"):
        return None
    return words[0]


def capsh_script(words: list[str]) -> str | None:
    """``capsh [options] -- -c CMD``: the words after ``--`` are bash's (``-c CMD`` a script)."""
    if "--" not in words:
        return None
    rest = words[words.index("--") + 1 :]
    return rest[1] if rest[:1] == ["-c"] and len(rest) > 1 else None


# Inline code of an interpreter (`python3 -c CODE`, `perl -e`, `ruby -e`, `node -e`): the shell
# commands it amounts to. Per language: the option that gives the code, and rows (a regex over
# the code, the command it stands for): kills by API (`os.kill(-1, 9)` is `kill -9 -- -1`) and
# shell text handed to the system (`os.system('…')`, `subprocess.run([...])`, backticks).
_SHELL_CALL = (
    r"(?:os\.system|os\.popen|subprocess\.\w+|check_output|Popen|system|exec|execSync|"
    r"shell_exec|passthru|popen|spawnSync)\s*\(\s*(?P<q>['\"`])(?P<cmd>.*?)(?P=q)"
)
_ARGV_CALL = (
    r"(?:subprocess\.\w+|check_output|Popen|execFileSync|spawnSync|spawn|execvp?|system)"
    r"\s*\(\s*\[(?P<list>[^\]]*)\]"
)
_BACKTICKS = r"`(?P<cmd>[^`]+)`"
INLINE_CODE: dict[str, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]] = {
    "python": (
        ("-c",),
        (
            (
                r"\bos\.kill\(\s*(?P<pid>-?\w+)\s*,\s*(?:signal\.)?(?P<sig>\w+)",
                "kill -{sig} -- {pid}",
            ),
            (
                r"\bos\.killpg\(\s*(?P<pid>-?\w+)\s*,\s*(?:signal\.)?(?P<sig>\w+)",
                "kill -{sig} -- -{pid}",
            ),
            (_SHELL_CALL, "{cmd}"),
            (_ARGV_CALL, "{list}"),
        ),
    ),
    "perl": (
        ("-e", "-E"),
        (
            (
                r"(?<![\w.])kill\s*\(?\s*['\"]?-?(?P<sig>\w+)['\"]?\s*(?:,|=>)\s*(?P<pid>-?\w+)",
                "kill -{sig} -- {pid}",
            ),
            (_SHELL_CALL, "{cmd}"),
            (_BACKTICKS, "{cmd}"),
        ),
    ),
    "ruby": (
        ("-e",),
        (
            (
                r"\bProcess\.kill\(\s*[:'\"]?(?P<sig>\w+)['\"]?\s*,\s*(?P<pid>-?\w+)",
                "kill -{sig} -- {pid}",
            ),
            (_SHELL_CALL, "{cmd}"),
            (_BACKTICKS, "{cmd}"),
        ),
    ),
    "node": (
        ("-e", "--eval", "-p", "--print"),
        (
            (
                r"\bprocess\.kill\(\s*(?P<pid>-?\w+)\s*(?:,\s*['\"](?P<sig>\w+)['\"])?",
                "kill -{sig} -- {pid}",
            ),
            (_SHELL_CALL, "{cmd}"),
        ),
    ),
}


def inline_code(language: str) -> Callable[[list[str]], str | None]:
    options, rows = INLINE_CODE[language]
    find = script_option(*options)

    def script(words: list[str]) -> str | None:
        code = find(words)
        if not code:
            return None
        out = []
        for pattern, command in rows:
            for m in re.finditer(pattern, code, re.S):
                fields = {k: v or "TERM" for k, v in m.groupdict().items()}
                if "list" in fields:  # ["pkill", "-9", "-f", "x"]: the argv's literals
                    fields["list"] = " ".join(re.findall(r"['\"]([^'\"]*)['\"]", fields["list"]))
                out.append(command.format(**fields))
        return "\n".join(out) or None

    return script


# ssh's options that take a value (the next word or glued): the host comes after them.
SSH_VALUE_OPTIONS = frozenset(
    "-b -B -c -D -E -e -F -I -i -J -L -l -m -O -o -p -P -Q -R -S -W -w".split()
)


def ssh_command(args: list[str]) -> str | None:
    """``ssh [options] HOST COMMAND...``: the command the remote login shell runs (joined as
    ssh joins it), None when there is none (an interactive login)."""
    rest = after_options(args, SSH_VALUE_OPTIONS)[1:]
    return " ".join(rest) if rest else None


PARALLEL_OPTIONS = frozenset(
    "-j -P -S -a -n -N -I -C -E -d -L -s --jobs --sshlogin --arg-file --max-args --colsep "
    "--delay --timeout --joblog --results --tagstring --tmpdir --eof --workdir --wd --env "
    "--delimiter --halt --memfree --load --retries --sshloginfile --max-lines --max-chars".split()
)
_PARALLEL_SOURCES = (":::", ":::+", "::::", "::::+")


def parallel_script(words: list[str]) -> str | None:
    """``parallel [CMD] ::: ARGS``: one command per argument, the argument in place of ``{}``
    (else appended); with no CMD each argument is a command. GNU parallel runs them through
    a shell. Without ``:::`` it reads its arguments from stdin, as xargs does (no script)."""
    rest = after_options(words, PARALLEL_OPTIONS)
    cut = next((k for k, w in enumerate(rest) if w in _PARALLEL_SOURCES), None)
    if cut is None:
        return None
    cmd, values = rest[:cut], [w for w in rest[cut + 1 :] if w not in _PARALLEL_SOURCES]
    if not cmd:
        return "\n".join(values)
    text = " ".join(cmd)
    return "\n".join(text.replace("{}", v) if "{}" in text else f"{text} {v}" for v in values)


_FIND_ACTIONS = ("-exec", "-execdir", "-ok", "-okdir")


def find_exec_script(words: list[str]) -> str | None:
    """``find PATHS TESTS -exec CMD {} ;`` (-execdir, -ok): CMD with ``{}`` standing for what
    find lists, written ``$(find PATHS TESTS)`` (``kill -9 {}`` over ``/proc`` is a kill of
    every process)."""
    starts = [k for k, w in enumerate(words) if w in _FIND_ACTIONS]
    if not starts:
        return None
    listing = "$(find " + " ".join(shlex.quote(w) for w in words[: starts[0]]) + ")"
    out = []
    for k in starts:
        end = next((j for j in range(k + 1, len(words)) if words[j] in (";", "+")), len(words))
        out.append(" ".join(_quoted_with(w, "{}", listing) for w in words[k + 1 : end]))
    return "\n".join(out) or None


def _quoted_with(word: str, placeholder: str, value: str) -> str:
    """A word quoted for the shell, with ``placeholder`` replaced by ``value`` as typed."""
    if word == placeholder:
        return value
    return shlex.quote(word.replace(placeholder, value)) if word else "''"


# tmux: the commands that start a shell command, and those that type keys into a pane.
_TMUX_RUNS = frozenset(
    "new-session new new-window neww split-window splitw run-shell run respawn-pane respawnp "
    "respawn-window respawnw display-popup popup".split()
)
_TMUX_KEYS = frozenset({"send-keys", "send"})
_TMUX_VALUES = frozenset("-t -s -n -c -x -y -e -F -f -L -S -N -T -p".split())
# keys that end a typed line (tmux send-keys NAME, screen's ^M, a \\n in the text)
_ENTER_KEYS = {"Enter": "\n", "C-m": "\n", "KPEnter": "\n", "^M": "\n", "\\n": "\n", "\\r": "\n"}


def _typed(text: str) -> str:
    for key, value in _ENTER_KEYS.items():
        text = text.replace(key, value)
    return text


def tmux_script(words: list[str]) -> str | None:
    """``tmux new-session 'CMD'`` (new-window, split-window, run-shell…): the shell command;
    ``tmux send-keys -t P 'TEXT' Enter``: the keys typed into the pane's shell."""
    rest = after_options(words, frozenset({"-L", "-S", "-f", "-c"}))
    if words[:1] == ["-c"] and len(words) > 1:  # tmux -c CMD: the shell command
        return words[1]
    if not rest or rest[0] not in _TMUX_RUNS | _TMUX_KEYS:
        return None
    args = after_options(rest[1:], _TMUX_VALUES)
    if rest[0] in _TMUX_KEYS:
        return "".join(_typed(a) if a in _ENTER_KEYS else _typed(a) for a in args) or None
    return " ".join(args) or None


def screen_keys(words: list[str]) -> str | None:
    """``screen -X stuff 'TEXT'`` (``-S NAME -p 0 -X stuff``): the text typed into its shell;
    ``screen -dmS NAME CMD…`` runs CMD (an exec row)."""
    for k, w in enumerate(words[:-2]):
        if w == "-X" and words[k + 1] == "stuff":
            return _typed(words[k + 2])
    return None
