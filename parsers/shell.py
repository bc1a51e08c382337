"""A typed shell chain -> steps, keeping the meaning of the operators (pure, never evaluates).

A *step* is one pipeline: the unit between the list operators ``&&``, ``||``, ``;``, ``&`` and
newlines. Each step keeps its exact source text (so a replay runs exactly what the user typed),
the operator that follows it, whether it runs in the background (its and-or list ends in ``&``),
and its commands (argv words with quotes removed, variable assignments, redirections).

Handled: single and double quotes, backslash escapes and line continuations, ``$(...)``,
backticks and ``${...}`` kept inside their word, comments, redirections (``>``, ``>>``, ``<``,
``2>&1``, ``&>``, ``>|``, ``<>``, with an fd prefix), parenthesised groups and ``{ ...; }`` kept as
one step. Not handled (kept as text, reported in ``warnings``): here-documents.
The parser never raises on any text: an unterminated quote ends at the end of the text and is
reported in ``warnings``.

Steps are numbered from 1, as people count them ("step 3 `pkill -9 -f python3`").
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

import polars as pl

LIST_OPS = ("&&", "||", ";", "&", "\n")
# Longest first: the tokenizer takes the first operator that matches.
REDIR_OPS = ("&>>", "&>", ">>", ">&", "<&", ">|", "<>", ">", "<")
# Commands that run the rest of their argv as another command.
WRAPPERS = {
    "nohup": 0,
    "setsid": 0,
    "exec": 0,
    "command": 0,
    "builtin": 0,
    "time": 0,
    "nice": 0,
    "ionice": 0,
    "stdbuf": 0,
    "env": 0,
    "timeout": 1,  # one positional (the duration) before the command
    "sudo": 0,
    "numactl": 0,
    "taskset": 1,
}
SHELLS = ("sh", "bash", "dash", "zsh", "ksh")


@dataclass
class Redirect:
    op: str  # one of REDIR_OPS
    target: str  # the word after the operator, quotes removed ('1' in 2>&1)
    fd: int | None = None  # explicit fd before the operator (2 in 2>&1)

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
        return 0 if self.op in ("<", "<&", "<>") else 1


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


# --------------------------------------------------------------------------- tokenizer


@dataclass
class _Tok:
    kind: str  # word | op | redir
    value: str  # word: unquoted text; op/redir: the operator
    start: int
    end: int
    fd: int | None = None


def _substitution_end(text: str, i: int) -> int | None:
    """End of a ``$(...)``, ``${...}`` or backtick substitution starting at ``i`` (kept whole,
    never evaluated), or None when none starts there. An unclosed one runs to the end."""
    j = _substitution_span(text, i)
    return None if j is None else abs(j)


def _substitution_span(text: str, i: int) -> int | None:
    """Like ``_substitution_end``, negated when the substitution is never closed."""
    n = len(text)
    c = text[i]
    if c == "$" and i + 1 < n and text[i + 1] in "({":
        return _skip_balanced(text, i + 2, text[i + 1], ")" if text[i + 1] == "(" else "}")
    if c == "`":
        j = text.find("`", i + 1)
        return -n if j < 0 else j + 1
    return None


def substitutions(text: str) -> list[str]:
    """The bodies of the ``$(...)`` and backtick command substitutions in ``text`` that the
    shell would run (outside single quotes, nested ones left inside their parent's body)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            j = text.find("'", i + 1)
            i = n if j < 0 else j + 1
            continue
        is_cmd = c == "`" or text.startswith("$(", i)
        j = _substitution_end(text, i) if c in "$`" else None
        if j is None:
            i += 1
            continue
        if is_cmd and not text.startswith("$((", i):
            start = i + (1 if c == "`" else 2)
            closed = text[j - 1] == ("`" if c == "`" else ")") and j - 1 >= start
            out.append(text[start : j - 1] if closed else text[start:])
        i = j
    return out


def _skip_balanced(text: str, i: int, open_: str, close: str) -> int:
    """Index after the bracket closing the one at text[i-1] (quotes inside are honoured);
    minus the text's length when it is never closed."""
    depth = 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            j = text.find("'", i + 1)
            i = n if j < 0 else j + 1
            continue
        if c == '"':
            j = _skip_dquote(text, i + 1)[1]
            i = n if j < 0 else j  # unterminated: the rest of the text
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -n


def _skip_dquote(text: str, i: int) -> tuple[str, int]:
    """Read a double-quoted string body from i (after the quote): (value, index after)."""
    out: list[str] = []
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            return "".join(out), i + 1
        if c == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "\n":
                i += 2
                continue
            if nxt in '$`"\\':
                out.append(nxt)
                i += 2
                continue
            out.append(c)
            i += 1
            continue
        j = _substitution_end(text, i)
        if j is not None:
            out.append(text[i:j])
            i = j
            continue
        out.append(c)
        i += 1
    return "".join(out), -1  # unterminated


def tokenize(text: str) -> tuple[list[_Tok], list[str], list[str]]:
    """(tokens, notes, syntax errors the shell would refuse the text for)."""
    toks: list[_Tok] = []
    warnings: list[str] = []
    errors: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t":
            i += 1
            continue
        if c == "\\" and i + 1 < n and text[i + 1] == "\n":
            i += 2
            continue
        if c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if c == "\n":
            toks.append(_Tok("op", "\n", i, i + 1))
            i += 1
            continue
        two = text[i : i + 2]
        if two in ("&&", "||", ";;"):
            toks.append(_Tok("op", two, i, i + 2))
            i += 2
            continue
        # redirections (with an optional fd prefix handled in the word reader)
        matched = next((op for op in REDIR_OPS if text.startswith(op, i)), None)
        if matched:
            if matched == "<" and text.startswith("<<", i):
                warnings.append(f"here-document at offset {i} is kept as text, not parsed")
            toks.append(_Tok("redir", matched, i, i + len(matched)))
            i += len(matched)
            continue
        if c in ";&|()":
            toks.append(_Tok("op", c, i, i + 1))
            i += 1
            continue
        # a word
        start = i
        out: list[str] = []
        while i < n:
            c = text[i]
            if c in " \t\n;&|()<>":
                break
            if c == "\\":
                if i + 1 < n:
                    if text[i + 1] != "\n":
                        out.append(text[i + 1])
                    i += 2
                else:
                    out.append(c)
                    i += 1
                continue
            if c == "'":
                j = text.find("'", i + 1)
                if j < 0:
                    errors.append(f"unterminated single quote at offset {i}")
                    out.append(text[i + 1 :])
                    i = n
                    break
                out.append(text[i + 1 : j])
                i = j + 1
                continue
            if c == '"':
                value, j = _skip_dquote(text, i + 1)
                out.append(value)
                if j < 0:
                    errors.append(f"unterminated double quote at offset {i}")
                    i = n
                    break
                i = j
                continue
            j = _substitution_span(text, i)
            if j is not None:
                if j < 0:
                    errors.append(
                        f"unterminated {'`' if c == '`' else text[i : i + 2]} at offset {i}"
                    )
                out.append(text[i : abs(j)])
                i = abs(j)
                continue
            out.append(c)
            i += 1
        word = "".join(out)
        # "2>&1": a word of digits glued to a redirection operator is its fd
        if i < n and text[i] in "<>" and word.isdigit() and i == start + len(word):
            matched = next(op for op in REDIR_OPS if text.startswith(op, i))
            toks.append(_Tok("redir", matched, start, i + len(matched), fd=int(word)))
            i += len(matched)
            continue
        toks.append(_Tok("word", word, start, i))
    return toks, warnings, errors


# --------------------------------------------------------------------------- parser


def _is_assignment(word: str) -> bool:
    if "=" not in word:
        return False
    name = word.split("=", 1)[0]
    return bool(name) and (name[0].isalpha() or name[0] == "_") and name.replace("_", "a").isalnum()


def _command(text: str, toks: list[_Tok]) -> Command:
    argv: list[str] = []
    assignments: dict[str, str] = {}
    redirects: list[Redirect] = []
    k = 0
    while k < len(toks):
        t = toks[k]
        if t.kind == "redir":
            target = toks[k + 1].value if k + 1 < len(toks) and toks[k + 1].kind == "word" else ""
            redirects.append(Redirect(t.value, target, t.fd))
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


# What the shell refuses before running anything ("syntax error near unexpected token"):
# token -> the tokens right before it after which it may not come ("start": the beginning;
# "redir": a redirection still waiting for its file; "end": the end of the text).
_OPERATORS = ("&&", "||", "|", ";", "&", ";;")
_NO_COMMAND_YET = ("start", "(", "\n", "redir", *_OPERATORS)
SYNTAX_RULES: dict[str, tuple[str, ...]] = {
    **{op: _NO_COMMAND_YET for op in _OPERATORS},
    ")": ("start", "(", "&&", "||", "|", "redir"),
    "\n": ("redir",),
    "end": ("&&", "||", "|", "redir"),
}


def _syntax_errors(toks: list[_Tok]) -> list[str]:
    """Operators where a command must be, unmatched ``)``/``}``, ``;;`` outside ``case``."""
    errors: list[str] = []
    in_case = any(t.kind == "word" and t.value == "case" for t in toks)
    prev, parens, braces = "start", 0, 0
    for t in [*toks, _Tok("end", "end", -1, -1)]:
        key = t.value if t.kind in ("op", "end") else t.kind
        command_position = prev in ("start", "(", "\n", *_OPERATORS)
        if in_case and key in (")", ";;"):
            prev = key
            continue
        if key == ";;":
            errors.append("syntax error near unexpected token `;;` (only a `case` uses it)")
        elif prev in SYNTAX_RULES.get(key, ()):
            if key == "end":
                errors.append(
                    f"the chain ends with '{prev}'"
                    if prev != "redir"
                    else "syntax error: the redirection at the end names no file"
                )
            else:
                errors.append(
                    f"syntax error near unexpected token `{key.replace(chr(10), 'newline')}`"
                )
        elif key == ")" and parens == 0:
            errors.append("syntax error near unexpected token `)`: no `(` opens it")
        parens += (key == "(") - (key == ")" and parens > 0)
        if key == "word" and command_position and t.value in ("{", "}"):
            if t.value == "}" and braces == 0:
                errors.append("syntax error near unexpected token `}`: no `{` opens it")
            braces = max(0, braces + (1 if t.value == "{" else -1))
        prev = key
    return errors


def parse_chain(text: str) -> Chain:
    """Split a shell chain into steps. Never raises; oddities go to ``Chain.warnings``, what
    the shell would refuse to run at all also to ``Chain.errors``."""
    text = text if isinstance(text, str) else str(text)
    toks, notes, errors = tokenize(text)
    errors.extend(_syntax_errors(toks))
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
            if t.kind == "op" and t.value == "|" and d == 0:
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
    return Chain(text=text, steps=steps, warnings=[*errors, *notes], errors=errors)


# --------------------------------------------------------------------------- helpers


def unwrap(argv: list[str]) -> tuple[list[str], list[str]]:
    """Peel wrappers (nohup, setsid, env K=V, timeout 10, nice -n 5...) off an argv."""
    wrappers: list[str] = []
    a = list(argv)
    while a:
        name = a[0].rsplit("/", 1)[-1]
        if name not in WRAPPERS:
            break
        wrappers.append(name)
        a = a[1:]
        positional = WRAPPERS[name]
        # options of the wrapper (and their values for the few that take one)
        while a and a[0].startswith("-") and a[0] != "--":
            opt = a.pop(0)
            if name in ("nice", "ionice", "timeout", "sudo", "stdbuf") and opt in (
                "-n",
                "-c",
                "-k",
                "-s",
                "-u",
                "-i",
                "-o",
                "-e",
                "--signal",
                "--kill-after",
            ):
                if a:
                    a.pop(0)
        if a and a[0] == "--":
            a = a[1:]
        if name == "env":
            while a and _is_assignment(a[0]):
                a = a[1:]
        for _ in range(positional):
            if a:
                a = a[1:]
    return a, wrappers


def shell_script(argv: list[str]) -> str | None:
    """The script of ``bash -c SCRIPT`` / ``sh -c SCRIPT`` (after wrappers), else None."""
    inner, _ = unwrap(argv)
    if not inner or inner[0].rsplit("/", 1)[-1] not in SHELLS:
        return None
    args = inner[1:]
    for k, arg in enumerate(args):
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
            return args[k + 1] if k + 1 < len(args) else None
        if not arg.startswith("-"):
            return None
    return None


# Commands that run a script given as an argument: name -> how the script is found.
SCRIPT_RUNNERS = {
    "eval": lambda args: " ".join(args),  # eval "pkill -f x" runs its joined arguments
    "su": lambda args: next((args[k + 1] for k, a in enumerate(args[:-1]) if a == "-c"), None),
}
NESTING_LIMIT = 8  # bash -c "bash -c '...'" deeper than this is left unread


def nested_scripts(cmd: Command) -> list[str]:
    """The shell text a command runs besides itself: ``bash -c SCRIPT`` / ``sh -c``,
    ``eval ARGS``, ``su -c SCRIPT`` (after wrappers), and its ``$(...)`` / backtick
    substitutions."""
    script = shell_script(cmd.argv)
    inner, _ = unwrap(cmd.argv)
    if script is None and inner and inner[0].rsplit("/", 1)[-1] in SCRIPT_RUNNERS:
        script = SCRIPT_RUNNERS[inner[0].rsplit("/", 1)[-1]](inner[1:])
    # a substitution inside the script is the script's own (read when the script is)
    out = [b for b in substitutions(cmd.text) if not (script and b in script)]
    return [*out, script] if script else out


def nested_steps(step: Step, _depth: int = 0) -> list[Step]:
    """Every step the shell would run inside ``step`` (``bash -c``, ``eval``, ``$(...)``,
    backticks), recursively; their ``index`` is that of the outer step."""
    if _depth >= NESTING_LIMIT:
        return []
    out: list[Step] = []
    for cmd in step.commands:
        for script in nested_scripts(cmd):
            for sub in parse_chain(script).steps:
                sub.index = step.index
                out.append(sub)
                out.extend(nested_steps(sub, _depth + 1))
    return out


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
