"""What the shell refuses before running anything ("syntax error near unexpected token"),
read from the tokens of parsers/shell_lexer.py as tables (pure, never evaluates):

- SYNTAX_RULES: a token -> the tokens after which it may not come (`|| b`, `a && && b`, `)))`,
  `( a ) b`, a chain ending in `&&`);
- KEYWORDS: the reserved words where a command starts -> what must be open before them and
  what they open (`fi` without `if`, `do` outside a loop, an `if` never closed);
- brackets: a `)`, `}` or `]]` that nothing opened, a `{` or `[[` never closed, `{ }`;
- `function` with no name after it.

Not checked: the grammar inside ``[[ … ]]`` and of a ``case``'s patterns.
"""

from __future__ import annotations

import re

from forensics_parsers.shell_lexer import _Tok

_OPERATORS = ("&&", "||", "|", "|&", ";", "&", ";;")
# Reserved words where a command starts: word -> (what must be open for it, what it opens).
# Nothing needed: it opens a construct; else it continues (or, opening nothing, ends) one.
KEYWORDS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "if": ((), "if"),
    "then": (("if", "elif"), "then"),
    "elif": (("then",), "elif"),
    "else": (("then",), "else"),
    "fi": (("then", "else"), None),
    "while": ((), "loop"),
    "until": ((), "loop"),
    "for": ((), "for"),
    "select": ((), "for"),
    "do": (("loop", "for"), "do"),
    "done": (("do",), None),
    "case": ((), "case"),
    "esac": (("case",), None),
    "in": (("for x", "case x"), None),  # only in `for x in` / `case x in`, never a command
}
CLOSED_BY = {"if": "fi", "then": "fi", "elif": "fi", "else": "fi", "loop": "done", "for": "done",
             "do": "done", "case": "esac"}  # fmt: skip
# After these a command starts (a keyword there is a keyword).
BODY_KEYWORDS = ("if", "then", "elif", "else", "while", "until", "do")
PREFIXES = ("!", "time", "coproc")  # words before a pipeline
_COMMAND_STARTS = ("start", "(", "{", "\n", "fdef)", "case)", "case;;", *PREFIXES,
                   *BODY_KEYWORDS, *_OPERATORS)  # fmt: skip
# After these a compound command has ended: only an operator, a redirection or a closer follows.
# ("fbody": `function x=(1 2)`, which bash reads as the function `x=` with the body `(1 2)`)
_ENDS = (")", "}", "fi", "done", "esac", "]]", "fbody")
_CLOSERS = ("then", "elif", "else", "fi", "do", "done", "esac", "}")
# ("function": the word `function` where a command starts, still waiting for its name)
_NO_COMMAND_YET = ("start", "(", "{", "\n", "redir", "function", *BODY_KEYWORDS, *_OPERATORS)
# token -> the tokens right before it after which it may not come ("start": the beginning;
# "redir": a redirection still waiting for its file; "end": the end of the text; "{" / "}":
# braces where a command starts; "fdef)": the `()` of a function definition).
SYNTAX_RULES: dict[str, tuple[str, ...]] = {
    # (`f() ;`, `function g &&`: a function header with no body)
    **{op: (*_NO_COMMAND_YET, "fdef)", "fname", "coproc") for op in _OPERATORS},
    # `! && a`, `! | a`: a `!` needs a pipeline before a pipe or a list operator (`! ;` is fine)
    **{op: (*_NO_COMMAND_YET, "fdef)", "fname", "coproc", "!") for op in ("&&", "||", "|", "|&")},
    "!": ("|", "|&"),  # `a | !`: `!` only starts a pipeline (`a | time` is bash's own)
    "redir": ("function", "fname"),  # `function g < f`: a name then its body, nothing else
    # a `(` after a word: only `NAME()` where a command starts defines a function
    "(": ("word", "assign", "fname", "redir", "function", *_ENDS),
    ")": ("start", "(", "{", "&&", "||", "|", "|&", "redir"),
    "}": ("{", "&&", "||", "|", "|&", "redir", *BODY_KEYWORDS, *PREFIXES),
    "word": (*_ENDS, "fdef)", "fname"),  # `( a ) b`, `fi b`, `f() b`, `function g b`
    "[[": _ENDS,  # a test opens where a command starts (also a function's body: `function g [[`)
    "]]": _NO_COMMAND_YET,  # `]]` where a command starts: no `[[` opened it
    "assign": (*_ENDS, "fdef)", "fname"),
    "array": ("word",),  # `a x=(1 2)`: an array only as an assignment before a command
    "\n": ("redir", "function", "coproc"),
    "end": ("&&", "||", "|", "|&", "redir", "fdef)", "fname", "function", "coproc"),  # `f()`
}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\[[^]]*\])?\+?=")
_OPENER = {")": "(", "}": "{", "]]": "[["}
_ARRAY_WORD = re.compile(r"^[^=()]+=\(.*\)$", re.S)  # `x=(1 2)` after `function`: name + body


def _word_key(word: str, prev: str, keyed: list[tuple[str, _Tok]]) -> str:
    """A word's key: a reserved word or a brace where a command starts (a closer also right
    after a compound command), ``!`` / ``time`` / ``coproc`` there, else ``word``."""
    starts = prev in _COMMAND_STARTS
    closes = prev in _ENDS or starts  # `time fi`, `! do`: reserved there too (bash refuses)
    if (closes and word in _CLOSERS) or (starts and word in KEYWORDS and word not in _CLOSERS):
        return word
    if starts and (word in ("{", "function", "]]") or word in PREFIXES):
        return word
    if word == "esac" and len(keyed) > 2 and keyed[-3][0] == "case" and keyed[-1][1].value == "in":
        return word  # `case x in esac`
    if word == "{" and prev == "fname":
        return word  # `function NAME { …; }`
    if _after_function(prev, keyed):
        return "fbody" if _ARRAY_WORD.match(word) else "fname"
    m = _ASSIGNMENT.match(word) if prev != "redir" else None
    if m:  # NAME=…: an assignment while no command word came yet, else a word (or an error)
        if _no_command_word(keyed):
            return "assign"
        if word[m.end() : m.end() + 1] == "(" and _command_word(keyed) not in ARRAY_BUILTINS:
            return "array"
    return "word"


# Builtins whose arguments may be array assignments (`declare -a x=(1 2)`).
ARRAY_BUILTINS = ("declare", "typeset", "local", "export", "readonly")


def _command_word(keyed: list[tuple[str, _Tok]]) -> str | None:
    """The command word of the simple command being read (None before one)."""
    word = None
    for key, t in reversed(keyed):
        if key in _COMMAND_STARTS:
            return word
        if key == "word":
            word = t.value
    return word


def _no_command_word(keyed: list[tuple[str, _Tok]]) -> bool:
    """Whether the simple command being read has no command word yet (only assignments and
    redirections since a command start)."""
    i = len(keyed) - 1
    while i >= 0:
        if keyed[i][0] == "assign":
            i -= 1
        elif i >= 1 and keyed[i - 1][0] == "redir":
            i -= 2  # a redirection and its file
        else:
            return keyed[i][0] in _COMMAND_STARTS
    return True


def _after_function(prev: str, keyed: list[tuple[str, _Tok]]) -> bool:
    """Whether the last token is the word `function` where a command starts (so this word is
    the function's name)."""
    return prev == "function"


def syntax_keys(toks: list[_Tok]) -> list[tuple[str, _Tok]]:
    """Each token with the key the tables know it by. The words of ``[[ … ]]`` are plain
    words; a ``case``'s `)` and `;;` are ``case)`` / ``case;;``."""
    in_case = any(t.kind == "word" and t.value == "case" for t in toks)
    out: list[tuple[str, _Tok]] = []
    prev, in_test = "start", False
    for k, t in enumerate(toks):
        key = t.value if t.kind == "op" else t.kind
        if in_test:  # the words of a test, up to its `]]`
            in_test = t.value != "]]"
            key = "word" if in_test else "]]"
        elif t.kind == "word" and t.value == "[[" and prev in (*_COMMAND_STARTS, "fname"):
            in_test, key = True, "[["
        elif in_case and key in (")", ";;"):
            key = "case" + key
        elif in_case and key == "(" and (prev in ("case;;",) or toks[k - 1].value == "in"):
            key = "case("  # `case x in (a) …`: a pattern's optional opening parenthesis
        elif key == "(" and k and toks[k - 1].kind == "word" and toks[k + 1 : k + 2]:
            nxt = toks[k + 1]
            named = prev == "fname" or (out[-2][0] if len(out) > 1 else "start") in _COMMAND_STARTS
            if nxt.kind == "op" and nxt.value == ")" and named:
                key = "fdef("  # `name ()` where a command starts, `function name ()`
        elif key == ")" and prev == "fdef(":
            key = "fdef)"
        elif t.kind == "word":
            key = _word_key(t.value, prev, out)
        out.append((key, t))
        prev = key
    return out


def syntax_errors(toks: list[_Tok]) -> list[str]:
    """What the shell would refuse the tokens for (first found first)."""
    errors: list[str] = []
    prev, depth, open_ = "start", {"(": 0, "{": 0, "[[": 0}, []
    keys = [*syntax_keys(toks), ("end", _Tok("end", "end", -1, -1))]
    for i, (key, t) in enumerate(keys):
        found = _token_error(key, t, prev, depth) or _keyword_error(key, open_)
        if found:
            errors.append(found)
        if key in depth:
            depth[key] += 1
        elif key in _OPENER:
            depth[_OPENER[key]] = max(0, depth[_OPENER[key]] - 1)
        prev = _carried(key, prev, keys, i)
    return errors


def _carried(key: str, prev: str, keys: list[tuple[str, _Tok]], i: int) -> str:
    """What the next token is checked against after ``key``: the key itself, but a compound's
    redirection's file (`{ a; } < f b`: `b` still follows the compound) and the newlines after
    a function's name (`function g` NEWLINE `x=1`: the body must still come) carry on."""
    if key == "\n" and prev == "fname":
        return prev
    if key == "word" and prev == "redir" and i >= 2 and keys[i - 2][0] in (*_ENDS, "fdef)"):
        return keys[i - 2][0] if keys[i - 2][0] != "fdef)" else "}"
    return key


def _token_error(key: str, t: _Tok, prev: str, depth: dict[str, int]) -> str | None:
    if key == "]]" and prev == "[[":
        # bash 5 takes that `]]` for an operand, and its parser gives up there without a word:
        # `bash -c 'echo a; [[ ]]; echo b'` runs nothing, exit 0 (bash -n says nothing either)
        return (
            "an empty test `[[ ]]`: bash silently stops reading the chain there and runs none of it"
        )
    if key == ";;":
        return "syntax error near unexpected token `;;` (only a `case` uses it)"
    if prev in SYNTAX_RULES.get(key, ()):
        if key != "end":
            return f"syntax error near unexpected token `{t.value.replace(chr(10), 'newline')}`"
        if prev == "redir":
            return "syntax error: the redirection at the end names no file"
        return f"the chain ends with '{prev}'"
    if key in _OPENER and depth[_OPENER[key]] == 0:
        return f"syntax error near unexpected token `{key}`: no `{_OPENER[key]}` opens it"
    for opener, closer in (("{", "}"), ("[[", "]]")):
        if key == "end" and depth[opener]:
            return (
                f"syntax error: unexpected end of text: a `{opener}` is not closed by a `{closer}`"
            )
    return None


def _keyword_error(key: str, open_: list[str]) -> str | None:
    """Keep the stack of open constructs (``open_``); what is wrong with ``key`` there."""
    if key == "end" and open_:
        return f"syntax error: unexpected end of text: `{CLOSED_BY[open_[-1]]}` is missing"
    if key not in KEYWORDS:
        return None
    needs, opens = KEYWORDS[key]
    if needs:
        if not open_ or open_[-1] not in needs:
            return f"syntax error near unexpected token `{key}`"
        open_.pop()
    if opens:
        open_.append(opens)
    return None
