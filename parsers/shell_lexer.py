"""The shell chain's tokenizer (pure, never evaluates): words with their quotes removed,
operators, redirections with their fd, and ``$(...)``, backticks and ``${...}`` kept whole
inside their word; the one scanner of quoted text (``_unquoted``); the bodies of command
substitutions. parsers/shell.py builds steps from these tokens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Longest first: the tokenizer takes the first operator that matches.
REDIR_OPS = ("&>>", "&>", ">>", ">&", "<&", ">|", "<>", "<<<", "<<-", "<<", ">", "<")
# Redirections whose text is the command's standard input itself: a here-document's lines
# (read by the tokenizer after the next newline, up to the line that is the delimiter word)
# and a here-string's word. A shell reading one runs it (parsers/shell.py `stdin_script`).
HERE_DOCS = ("<<", "<<-")
HERE_STRING = "<<<"
# ANSI-C quoting `$'…'`: the escapes bash decodes there (`$'\x6b'ill` is `kill`).
_ANSI_C = re.compile(
    r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}|c.|.)", re.S
)
_ANSI_C_SIMPLE = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r",
                  "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}  # fmt: skip
# The start of a word that an array assignment's `(…)` continues (`x=(1 2 3)`, `a[1]+=(x)`).
_ARRAY_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=")


@dataclass
class _Tok:
    kind: str  # word | op | redir
    value: str  # word: unquoted text; op/redir: the operator
    start: int
    end: int
    fd: int | None = None
    body: str | None = None  # a here-document's or here-string's text (its stdin)


def _ansi_c_char(m: re.Match[str]) -> str:
    s = m.group(1)
    if s[0] in "xuU" and len(s) > 1:
        code = int(s[1:], 16)
        return chr(code) if code <= 0x10FFFF else ""
    if s[0] in "01234567":
        return chr(int(s, 8) & 0xFF)
    if s[0] == "c" and len(s) == 2:
        return chr(ord(s[1]) & 0x1F)
    return _ANSI_C_SIMPLE.get(s, "\\" + s)


def ansi_c(body: str) -> str:
    """The text of a ``$'…'`` quote as bash decodes it."""
    return _ANSI_C.sub(_ansi_c_char, body)


def _ansi_c_end(text: str, i: int) -> int:
    """Index of the quote closing a ``$'…'`` body that starts at ``i`` (``\\'`` does not
    close it); -1 when it is never closed."""
    n = len(text)
    while i < n:
        if text[i] == "\\":
            i += 2
        elif text[i] == "'":
            return i
        else:
            i += 1
    return -1


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


def _unquoted(text: str, i: int, *, dquotes: bool = False) -> int:
    """The first index from ``i`` that is not inside a backslash escape or single quotes (nor,
    with ``dquotes``, double quotes): the one scanner of quoted text. ``len(text)`` when the
    rest is quoted (an unterminated quote runs to the end)."""
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif c == "'":
            j = text.find("'", i + 1)
            i = n if j < 0 else j + 1
        elif c == '"' and dquotes:
            j = _skip_dquote(text, i + 1)[1]
            i = n if j < 0 else j
        else:
            return i
    return n


def substitutions(text: str) -> list[str]:
    """The bodies of the ``$(...)`` and backtick command substitutions in ``text`` that the
    shell would run (outside single quotes, nested ones left inside their parent's body)."""
    out: list[str] = []
    i, n = 0, len(text)
    while (i := _unquoted(text, i)) < n:
        c = text[i]
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
    depth, n = 1, len(text)
    while (i := _unquoted(text, i, dquotes=True)) < n:
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
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
    pending: list[int] = []  # here-documents (their redir tokens) whose lines come next
    while i < n:
        c = text[i]
        if c in " \t":
            i += 1
        elif c == "\\" and text.startswith("\n", i + 1):
            i += 2
        elif c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith(("&&", "||", ";;", "|&"), i):
            toks.append(_Tok("op", text[i : i + 2], i, i + 2))
            i += 2
        elif text.startswith(("<(", ">("), i):  # a process substitution is a word
            word, j = _read_word(text, i, errors)
            toks.append(_Tok("word", word, i, j))
            i = j
        elif _redirection_at(text, i):  # (an fd prefix is read with the word before it)
            i = _redirect_tok(toks, warnings, text, i, i)
            if toks[-1].value in HERE_DOCS:
                pending.append(len(toks) - 1)
        elif c in "\n;&|()":
            toks.append(_Tok("op", c, i, i + 1))
            i += 1
            if c == "\n" and pending:
                i = _here_doc_bodies(text, i, pending, toks)
                pending.clear()
        else:
            start = i
            word, i = _read_word(text, i, errors)
            # "2>&1": a word of digits glued to a redirection operator is its fd
            if i < n and text[i] in "<>" and word.isdigit() and i == start + len(word):
                i = _redirect_tok(toks, warnings, text, i, start, fd=int(word))
                if toks[-1].value in HERE_DOCS:
                    pending.append(len(toks) - 1)
            else:
                toks.append(_Tok("word", word, start, i))
                if len(toks) > 1 and toks[-2].kind == "redir" and toks[-2].value == HERE_STRING:
                    toks[-2].body = word + "\n"
    if pending:  # a here-document on the last line: no body
        for k in pending:
            toks[k].body = ""
    return toks, warnings, errors


def _here_doc_bodies(text: str, i: int, docs: list[int], toks: list[_Tok]) -> int:
    """Read the lines of each here-document (``docs``: the indices of their tokens) from ``i``
    (the start of the line after the one that opened them), up to its delimiter line (`<<-`:
    leading tabs stripped); one never closed runs to the end, as in bash. The index after the
    last body."""
    for k in docs:
        doc = toks[k]
        delim = toks[k + 1].value if k + 1 < len(toks) and toks[k + 1].kind == "word" else ""
        lines: list[str] = []
        while i < len(text):
            j = text.find("\n", i)
            line = text[i:] if j < 0 else text[i:j]
            i = len(text) if j < 0 else j + 1
            if (line.lstrip("\t") if doc.value == "<<-" else line) == delim:
                break
            lines.append(line)
        doc.body = "\n".join(lines) + ("\n" if lines else "")
    return i


def _redirection_at(text: str, i: int) -> str | None:
    return next((op for op in REDIR_OPS if text.startswith(op, i)), None)


def _redirect_tok(
    toks: list[_Tok], warnings: list[str], text: str, i: int, start: int, fd: int | None = None
) -> int:
    """Append the redirection operator at ``i`` (its fd prefix from ``start``); the index after."""
    op = _redirection_at(text, i) or ""
    toks.append(_Tok("redir", op, start, i + len(op), fd=fd))
    return i + len(op)


def _read_word(text: str, i: int, errors: list[str]) -> tuple[str, int]:
    """One word from ``i``, quotes removed, substitutions kept whole; (word, index after)."""
    out: list[str] = []
    n, start = len(text), i
    while i < n:
        c = text[i]
        group = c == "(" and (
            (i == start + 1 and text[start] in "<>")  # <(…) / >(…)
            or _ARRAY_ASSIGNMENT.fullmatch(text, start, i) is not None  # x=(1 2 3)
        )
        if group:
            j = _skip_balanced(text, i + 1, "(", ")")
            if j < 0:
                errors.append(f"unterminated `(` at offset {i}")
            out.append(text[i : abs(j)])
            i = abs(j)
            continue
        if c in " \t\n;&|()<>" and not (i == start and text.startswith(("<(", ">("), i)):
            break
        if c == "\\":
            if i + 1 >= n:  # a trailing backslash is itself
                out.append(c)
            elif text[i + 1] != "\n":  # an escaped character; a line continuation is nothing
                out.append(text[i + 1])
            i = min(n, i + 2)
            continue
        if c == "'":
            j = text.find("'", i + 1)
            if j < 0:
                errors.append(f"unterminated single quote at offset {i}")
                return "".join(out) + text[i + 1 :], n
            out.append(text[i + 1 : j])
            i = j + 1
            continue
        if c == '"':
            value, j = _skip_dquote(text, i + 1)
            out.append(value)
            if j < 0:
                errors.append(f"unterminated double quote at offset {i}")
                return "".join(out), n
            i = j
            continue
        if c == "$" and text.startswith(("$'", '$"'), i):  # $'…' ANSI-C, $"…" translated
            if text[i + 1] == '"':
                i += 1
                continue
            j = _ansi_c_end(text, i + 2)
            if j < 0:
                errors.append(f"unterminated $' quote at offset {i}")
                return "".join(out) + ansi_c(text[i + 2 :]), n
            out.append(ansi_c(text[i + 2 : j]))
            i = j + 1
            continue
        j = _substitution_span(text, i)
        if j is not None:
            if j < 0:
                errors.append(f"unterminated {'`' if c == '`' else text[i : i + 2]} at offset {i}")
            out.append(text[i : abs(j)])
            i = abs(j)
            continue
        out.append(c)
        i += 1
    return "".join(out), i
