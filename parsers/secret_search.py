"""How ``secrets.RULES`` are searched in a text: the matches ``finditer`` gives, found cheaply.

Each rule's row names literals one of which every match of it holds: a rule is not searched in
a text without any (most log lines hold none of most rules'). A rule whose matches all start
at a word (a run of ``[\\w-]``) holding one of its literals, or at the character before the
word (a quote), is tried there only (``WordRule``): the key rules, whose literals (`_token`,
`token`) a server log holds on many lines (`max_new_tokens`), cost the most searched whole.

Only the standard library: a launch's host runs this source with ``secrets``' (scrub.py).
"""

from __future__ import annotations

import re
from typing import NamedTuple

# the letters a pattern that ignores case takes for ASCII ones, which ``lower`` does not make
# them (`ı`, `ſ`; `İ` lowers to `i` and a combining dot): a literal is sought past them too
_FOLD = str.maketrans({"\u0131": "i", "\u017f": "s", "\u0307": None})
_WORD_BACK = re.compile(r"[\w-]*")  # (on the text reversed: the word before a place)


class Rule(NamedTuple):
    """A row of ``secrets.RULES``, compiled."""

    rx: re.Pattern[str]
    literals: tuple[str, ...]  # () : searched in every text
    folded: bool  # the pattern ignores case: its literals (lower case) are sought folded
    words: re.Pattern[str] | None  # its literals, where its matches start at a word only


def compiled(
    rules: list[tuple[str, tuple[str, ...], str]], at_words: tuple[str, ...]
) -> list[Rule]:
    """``rules`` (name, literals, pattern) compiled; ``at_words``: the names of those whose
    every match starts at a word holding one of their literals, or the character before it."""
    out = []
    for name, literals, pattern in rules:
        folded = pattern.startswith("(?i)")
        assert not folded or all(w == w.lower() for w in literals), name
        words = None
        if name in at_words:
            assert literals and all(re.fullmatch(r"[\w-]+", w) for w in literals), name
            words = re.compile("|".join(map(re.escape, literals)))
        out.append(Rule(re.compile(pattern), literals, folded, words))
    return out


def leading_literals(programs: str) -> tuple[str, ...]:
    """The word each alternative of ``programs`` starts with (`mysql\\w*|mariadb\\w*`: mysql,
    mariadb; a group first: its words), or () where one has none (then no literal holds)."""
    alts, depth, cut = [], 0, 0
    for i, c in enumerate(programs + "|"):
        depth += (c == "(") - (c == ")")
        if c == "|" and not depth:
            alts.append(programs[cut:i])
            cut = i + 1
    words: list[str] = []
    for alt in alts:
        group = re.match(r"\(\?:([\w|-]+)\)", alt)
        word = re.match(r"[\w-]*", alt).group(0)  # (a quantified last letter is not kept)
        word = word[:-1] if alt[len(word) : len(word) + 1] in ("?", "*", "{") else word
        more = group.group(1).split("|") if group else [word]
        if not all(more):
            return ()
        words += more
    return tuple(words)


class Text:
    """A text and what the rules' search reads of it, each made once, when first needed."""

    def __init__(self, text: str):
        self.text = text
        self._low: str | None = None
        self._rev: str | None = None

    @property
    def low(self) -> str:
        """The text folded: lower case, ``_FOLD``'s letters as the ASCII ones they match."""
        if self._low is None:
            low = self.text.lower()
            self._low = low if low.isascii() else low.translate(_FOLD)
        return self._low

    def aligned(self) -> bool:
        """Whether each character of ``low`` stands where the text's own does (`İ` folds to
        one `i`; a combining dot of the text's own is dropped)."""
        return len(self.low) == len(self.text) and "\u0307" not in self.text

    def word_start(self, at: int) -> int:
        """Where the word (``[\\w-]*``) that ends at ``at`` begins."""
        if self._rev is None:
            self._rev = self.text[::-1]
        back = _WORD_BACK.match(self._rev, len(self.text) - at)
        return at - (back.end() - back.start())


def matches(rule: Rule, t: Text) -> list[re.Match[str]]:
    """``rule.rx.finditer(t.text)``, as a list: [] where no literal of the rule is in the text;
    a word rule tried only where its matches may start."""
    hay = t.low if rule.folded else t.text
    if rule.literals and not any(w in hay for w in rule.literals):
        return []
    if rule.words is None or (rule.folded and not t.aligned()):
        return list(rule.rx.finditer(t.text))
    out: list[re.Match[str]] = []
    end = word_end = 0  # where the last match ended; where the last word tried ended
    for lit in rule.words.finditer(hay):
        if lit.start() < word_end:
            continue  # the word of the last literal: tried
        start = t.word_start(lit.start())
        word_end = _WORD_BACK.match(t.text, lit.start()).end()
        for at in (start - 1, start):
            m = rule.rx.match(t.text, at) if at >= end and at >= 0 else None
            if m:
                out.append(m)
                end = m.end()
    return out


def sub(rule: Rule, repl, t: Text) -> str:  # noqa: ANN001 - re.sub's callable
    """``rule.rx.sub(repl, t.text)``: the text itself where nothing matched."""
    found = matches(rule, t)
    if not found:
        return t.text
    text, pieces, pos = t.text, [], 0
    for m in found:
        pieces += [text[pos : m.start()], repl(m)]
        pos = m.end()
    return "".join(pieces) + text[pos:]
