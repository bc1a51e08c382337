"""A typed shell chain -> steps, keeping the meaning of the operators (pure, never evaluates).

A *step* is one pipeline: the unit between the list operators ``&&``, ``||``, ``;``, ``&`` and
newlines. Each step keeps its exact source text (so a replay runs exactly what the user typed),
the operator that follows it, whether it runs in the background (its and-or list ends in ``&``),
and its commands (argv words with quotes removed, variable assignments, redirections).

Handled: single and double quotes, backslash escapes and line continuations, ``$(...)``,
backticks and ``${...}`` kept inside their word, comments, redirections (``>``, ``>>``, ``<``,
``2>&1``, ``&>``, ``>|``, ``<>``, with an fd prefix), parenthesised groups and ``{ ...; }`` kept as
one step, here-documents and here-strings (their text is the command's stdin,
``Redirect.body``, never steps of the chain; a shell reading one runs it: ``stdin_scripts``).
The parser never raises on any text: an unterminated quote ends at the end of the text and is
reported in ``warnings``.

Steps are numbered from 1, as people count them ("step 3 `pkill -9 -f python3`").
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

import polars as pl

# the tokenizer lives in shell_lexer; `tokenize` and `substitutions` stay importable from here
from forensics_parsers.shell_lexer import HERE_DOCS, HERE_STRING, _Tok, substitutions, tokenize
from forensics_parsers.shell_runners import (  # what a command runs: re-exported from here
    ECHOES,
    NESTING_LIMIT,
    SHELLS,
    WRAPPERS,
    Wrapper,
    _is_assignment,
    echoed,
    fetched_scripts,
    nested_scripts,
    nested_steps,
    runner_script,
    shell_script,
    stdin_scripts,
    unwrap,
)
from forensics_parsers.shell_scripts import SSH_VALUE_OPTIONS
from forensics_parsers.shell_syntax import syntax_errors

LIST_OPS = ("&&", "||", ";", "&", "\n")


@dataclass
class Redirect:
    op: str  # one of shell_lexer.REDIR_OPS
    target: str  # the word after the operator, quotes removed ('1' in 2>&1)
    fd: int | None = None  # explicit fd before the operator (2 in 2>&1)
    body: str | None = None  # a here-document's / here-string's text (`<<EOF`, `<<<`)

    @property
    def text(self) -> str:
        fd = "" if self.fd is None else str(self.fd)
        target = self.target if self.op in (">&", "<&") else shlex.quote(self.target)
        return f"{fd}{self.op}{target}"

    @property
    def stream(self) -> int:
        """The fd this redirection changes (0 for input, 1 for output, both for &>)."""
        if self.fd is not None:
            return self.fd
        return 0 if self.op in ("<", "<&", "<>", HERE_STRING, *HERE_DOCS) else 1


@dataclass
class Command:
    argv: list[str]
    text: str
    assignments: dict[str, str] = field(default_factory=dict)
    redirects: list[Redirect] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.argv[0].rsplit("/", 1)[-1] if self.argv else ""

    def unwrapped(self) -> tuple[list[str], list[str]]:
        """(the command a wrapper chain finally runs, the wrappers peeled: nohup, setsid...)."""
        return unwrap(self.argv)

    def stdout_target(self) -> str | None:
        """The file stdout is redirected to (last one wins), or None."""
        target = None
        for r in self.redirects:
            if r.op in (">", ">>", ">|", "&>", "&>>") and r.stream == 1:
                target = r.target
        return target

    def stdin_target(self) -> str | None:
        target = None
        for r in self.redirects:
            if r.op in ("<", "<>") and r.stream == 0:
                target = r.target
        return target


@dataclass
class Step:
    index: int  # 1-based
    text: str  # exact source text of the pipeline
    commands: list[Command]
    connector: str | None  # the operator after this step: && || ; & (None at the end)
    background: bool  # runs in an and-or list that ends with '&'
    list_index: int  # which and-or list (0-based) the step belongs to
    start: int  # offsets of ``text`` in the chain
    end: int
    prev_connector: str | None = None  # the operator before this step

    @property
    def command(self) -> Command | None:
        return self.commands[0] if self.commands else None


@dataclass
class Chain:
    text: str
    steps: list[Step]
    warnings: list[str] = field(default_factory=list)  # everything odd, syntax errors included
    # what the shell itself refuses before running anything (``syntax error near ...``)
    errors: list[str] = field(default_factory=list)

    def and_or_lists(self) -> list[list[Step]]:
        out: dict[int, list[Step]] = {}
        for s in self.steps:
            out.setdefault(s.list_index, []).append(s)
        return [out[k] for k in sorted(out)]


# --------------------------------------------------------------------------- parser


def _command(text: str, toks: list[_Tok]) -> Command:
    argv: list[str] = []
    assignments: dict[str, str] = {}
    redirects: list[Redirect] = []
    k = 0
    while k < len(toks):
        t = toks[k]
        if t.kind == "redir":
            target = toks[k + 1].value if k + 1 < len(toks) and toks[k + 1].kind == "word" else ""
            redirects.append(Redirect(t.value, target, t.fd, t.body))
            k += 2 if target or (k + 1 < len(toks) and toks[k + 1].kind == "word") else 1
            continue
        if t.kind == "word":
            if not argv and _is_assignment(t.value):
                key, value = t.value.split("=", 1)
                assignments[key] = value
            else:
                argv.append(t.value)
        elif t.kind == "op" and t.value in "(){}":
            argv.append(t.value)
        k += 1
    src = text[toks[0].start : toks[-1].end] if toks else ""
    return Command(argv=argv, text=src, assignments=assignments, redirects=redirects)


def parse_chain(text: str) -> Chain:
    """Split a shell chain into steps. Never raises; oddities go to ``Chain.warnings``, what
    the shell would refuse to run at all also to ``Chain.errors``."""
    text = text if isinstance(text, str) else str(text)
    toks, notes, errors = tokenize(text)
    errors.extend(syntax_errors(toks))
    steps: list[Step] = []
    cur: list[_Tok] = []  # tokens of the current step
    depth = 0
    list_index = 0
    pending: list[Step] = []  # steps of the current and-or list (to mark background)

    def close_step(connector: str | None) -> None:
        if not cur:
            return
        # split the pipeline into commands on top-level '|'
        cmds: list[list[_Tok]] = [[]]
        d = 0
        for t in cur:
            if t.kind == "op" and t.value == "(":
                d += 1
            elif t.kind == "op" and t.value == ")":
                d -= 1
            if t.kind == "op" and t.value in ("|", "|&") and d == 0:
                cmds.append([])
                continue
            cmds[-1].append(t)
        start, end = cur[0].start, cur[-1].end
        step = Step(
            index=len(steps) + 1,
            text=text[start:end],
            commands=[_command(text, c) for c in cmds if c],
            connector=connector,
            background=False,
            list_index=list_index,
            start=start,
            end=end,
        )
        step.prev_connector = steps[-1].connector if steps else None
        steps.append(step)
        pending.append(step)
        cur.clear()

    for t in toks:
        if t.kind == "op" and t.value == "(":
            depth += 1
        elif t.kind == "op" and t.value == ")":
            depth = max(0, depth - 1)
        elif t.kind == "word" and t.value == "{" and not cur:
            depth += 1
        elif t.kind == "word" and t.value == "}" and depth:
            depth -= 1
        if depth == 0 and t.kind == "op" and t.value in (*LIST_OPS, ";;"):
            if t.value == "\n" and not cur:
                continue
            connector = ";" if t.value in ("\n", ";;") else t.value
            close_step(connector)
            if connector in (";", "&"):
                if connector == "&":
                    for s in pending:
                        s.background = True
                pending.clear()
                list_index += 1
            continue
        if depth > 0 and t.kind == "op" and t.value == "\n":
            continue
        cur.append(t)
    if depth:
        errors.append("unbalanced group: a '(' or '{' is not closed")
    close_step(None)
    if steps and steps[-1].connector == ";":
        steps[-1].connector = None
    resolve_words(steps)
    return Chain(text=text, steps=steps, warnings=[*errors, *notes], errors=errors)


# --------------------------------------------------------------------------- command words

# A word the shell turns into a command name before running it, so every rule sees the name:
# `$(which pkill)`, `$(command -v pkill)`, `` `type -P pkill` `` (program -> its options that
# print the path), variables set earlier in the chain (`P=pkill; $P -f x`,
# `export K="kill -9"`) and aliases (`alias k=pkill; k -f x`).
NAME_LOOKUPS: dict[str, frozenset[str]] = {
    "which": frozenset({"-a"}),
    "command": frozenset({"-v", "-V"}),
    "type": frozenset({"-p", "-P", "-a", "-t"}),
    "whereis": frozenset({"-b"}),
    "realpath": frozenset(),
    "readlink": frozenset({"-f", "-e", "-m"}),
}
ASSIGNERS = ("export", "readonly", "declare", "typeset", "local")
_VAR = re.compile(r"^\$(?:\{(\w+)\}|(\w+))$")
_WHOLE_SUB = re.compile(r"^(?:\$\((.*)\)|`(.*)`)$", re.S)


def _looked_up(word: str, first: bool = False) -> list[str] | None:
    """``$(which pkill)`` -> ``[pkill]``, ``$(echo kill -9)`` -> ``[kill, -9]`` (an ECHOES
    command stands for the text it prints: split into words where a command starts, else one
    word); None when the word is no such substitution."""
    m = _WHOLE_SUB.match(word.strip())
    if not m:
        return None
    try:
        argv = shlex.split(m.group(1) if m.group(1) is not None else m.group(2))
    except ValueError:
        return None
    if argv and (text := echoed(argv)) is not None:
        return _split(text) if first else [text]
    if not argv or argv[0] not in NAME_LOOKUPS:
        return None
    names = [a for a in argv[1:] if a not in NAME_LOOKUPS[argv[0]] and not a.startswith("-")]
    ok = names and (argv[0] != "command" or "-v" in argv or "-V" in argv)
    return names[:1] if ok else None


def _split(value: str) -> list[str]:
    if _WHOLE_SUB.match(value.strip()):  # `$(pgrep x)` stays one word, as typed
        return [value.strip()]
    try:
        return shlex.split(value)
    except ValueError:
        return value.split()


_INNER_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
# Variables the shell sets itself, as the rules need them: `kill${IFS}-9${IFS}-1` is
# `kill -9 -1` (IFS splits the word where it is expanded).
SHELL_VARIABLES = {"IFS": " "}


def _expand(word: str, env: dict[str, str], first: bool = False) -> list[str]:
    """A word as the shell runs it: a variable of the chain (or SHELL_VARIABLES) as the whole
    word or inside it (then split, as an unquoted expansion is), a lookup or an echo."""
    m = _VAR.match(word)
    name = m and (m.group(1) or m.group(2))
    if name in env:
        return _split(env[name]) or [""]
    if _INNER_VAR.search(word) and any(
        (v.group(1) or v.group(2)) in env for v in _INNER_VAR.finditer(word)
    ):
        text = _INNER_VAR.sub(lambda v: env.get(v.group(1) or v.group(2), v.group(0)), word)
        return text.split() or [""]
    return _looked_up(word, first) or [word]


def resolve_words(steps: list[Step]) -> None:
    """Replace, in each command's argv, the words that stand for something set earlier in the
    chain (NAME_LOOKUPS, variables, ``for NAME in WORDS``, ``read NAME <<< WORD``, aliases)
    by what the shell would run; the step's text (what a replay runs) stays as typed."""
    env: dict[str, str] = dict(SHELL_VARIABLES)
    aliases: dict[str, str] = {}
    for step in steps:
        for cmd in step.commands:
            if not cmd.argv:
                env.update(cmd.assignments)
                continue
            if cmd.argv[0] in aliases:
                cmd.argv[:1] = _split(aliases[cmd.argv[0]])
            cmd.argv[:] = [x for k, w in enumerate(cmd.argv) for x in _expand(w, env, k == 0)]
            if not cmd.argv:
                continue
            if cmd.argv[0] in ASSIGNERS:
                env.update(dict(a.split("=", 1) for a in cmd.argv[1:] if _is_assignment(a)))
            elif cmd.argv[0] == "alias":
                aliases.update(dict(a.split("=", 1) for a in cmd.argv[1:] if "=" in a))
            elif cmd.argv[0] == "for" and cmd.argv[2:3] == ["in"]:
                env[cmd.argv[1]] = " ".join(cmd.argv[3:])
            elif cmd.argv[0] == "read" and (here := [r.body for r in cmd.redirects if r.body]):
                env[cmd.argv[-1]] = here[-1].strip()


def launching_command_line(chain_text: str, shell: str = "bash") -> str:
    """The command line (as ``ps``/``pkill -f`` see it) of the shell that runs the chain.

    Over SSH, sshd runs ``<login shell> -c '<the whole chain>'``; /proc/PID/cmdline separates
    the arguments with NULs, which ``pkill -f`` matches as spaces.
    """
    return f"{shell} -c {chain_text}"


def steps_frame(chain: Chain) -> pl.DataFrame:
    """The steps as a frame (one row per step)."""
    rows = []
    for s in chain.steps:
        cmd = s.command
        inner, wrappers = cmd.unwrapped() if cmd else ([], [])
        rows.append(
            {
                "step": s.index,
                "text": s.text,
                "connector": s.connector,
                "background": s.background,
                "list_index": s.list_index,
                "program": inner[0].rsplit("/", 1)[-1] if inner else None,
                "wrappers": ",".join(wrappers),
                "argv": json.dumps(cmd.argv if cmd else []),
                "redirects": json.dumps(
                    [r.text for c in s.commands for r in c.redirects], ensure_ascii=False
                ),
                "pipeline_len": len(s.commands),
            }
        )
    schema = {
        "step": pl.Int64,
        "text": pl.String,
        "connector": pl.String,
        "background": pl.Boolean,
        "list_index": pl.Int64,
        "program": pl.String,
        "wrappers": pl.String,
        "argv": pl.String,
        "redirects": pl.String,
        "pipeline_len": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema)


# the reader's own names and those of shell_runners / shell_lexer it re-exports
__all__ = [
    "ECHOES",
    "LIST_OPS",
    "NAME_LOOKUPS",
    "NESTING_LIMIT",
    "SHELLS",
    "SHELL_VARIABLES",
    "SSH_VALUE_OPTIONS",
    "WRAPPERS",
    "Chain",
    "Command",
    "Redirect",
    "Step",
    "Wrapper",
    "echoed",
    "fetched_scripts",
    "launching_command_line",
    "nested_scripts",
    "nested_steps",
    "parse_chain",
    "resolve_words",
    "runner_script",
    "shell_script",
    "stdin_scripts",
    "steps_frame",
    "substitutions",
    "tokenize",
    "unwrap",
]
