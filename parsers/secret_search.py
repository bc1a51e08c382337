"""How ``secrets.RULES`` are searched in a text: the matches ``finditer`` gives, found cheaply.

Each rule's row names literals one of which every match of it holds: a rule is not searched in
a text without any (most log lines hold none of most rules'). Where its matches start is known
for most rules (``STARTS``): at a literal of theirs (`--` of a flag, `sk-`, a program's name),
right after one (`://`), or at a word (a run of ``[\\w-]``) holding one, or the quote before
it (the key rules: `_token` is on many lines of a server log, `max_new_tokens`); such a rule
is tried there only, not at every character of the text.

Only the standard library: a launch's host runs this source with ``secrets``' (scrub.py).
"""

from __future__ import annotations

import re
import threading
from typing import NamedTuple

# the letters a pattern that ignores case takes for ASCII ones, which ``lower`` does not make
# them (`ı`, `ſ`; `İ` lowers to `i` and a combining dot): a literal is sought past them too
FOLD = (("\u0131", "i"), ("\u017f", "s"), ("\u0307", ""))
_WORD = re.compile(r"[\w-]*")  # (on the text reversed too: the word before a place)
STARTS = ("at", "after", "word")  # where a rule's matches start (None: anywhere)
DENSE = 16  # a literal every DENSE characters or closer: the text is searched whole


class LazyRegex:
    """A regular expression compiled when first used (``rx``): most patterns of a table are
    never needed by most texts (the secrets rules here, the parser's line rules,
    forensics_parsers/sglang/rules.py). Two threads using it at once may both compile it: the
    same pattern either way."""

    __slots__ = ("pattern", "_rx")

    def __init__(self, pattern: str):
        self.pattern = pattern
        self._rx: re.Pattern[str] | None = None

    @property
    def rx(self) -> re.Pattern[str]:
        rx = self._rx
        if rx is None:
            rx = self._rx = re.compile(self.pattern)
        return rx

    @property
    def compiled(self) -> bool:
        return self._rx is not None


class Rule(NamedTuple):
    """A row of ``secrets.RULES``, its pattern compiled when first searched (``rx``): most
    texts hold no literal of most rules, and compiling all 40 took ~8 ms of the first chunk
    an ingest reads (a server log's lines call for 4 of them)."""

    regex: LazyRegex
    literals: tuple[str, ...]  # () : searched in every text
    folded: bool  # the pattern ignores case: its literals (lower case) are sought folded
    start: str | None  # one of STARTS: where its matches start, relative to its literals

    @property
    def rx(self) -> re.Pattern[str]:
        return self.regex.rx


def compiled(rules: list[tuple[str, tuple[str, ...], str]], starts: dict[str, str]) -> list[Rule]:
    """``rules`` (name, literals, pattern) compiled; ``starts``: by name, where the matches of
    a rule start (``STARTS``), for those known."""
    out = []
    for name, literals, pattern in rules:
        folded = pattern.startswith("(?i)")
        assert not folded or all(w == w.lower() for w in literals), name
        start = starts.get(name)
        assert start is None or (start in STARTS and literals), name
        if start == "word":
            assert all(re.fullmatch(r"[\w-]+", w) for w in literals), name
        out.append(Rule(LazyRegex(pattern), literals, folded, start))
    return out


class OnFirstUse:
    """``compiled(rules, starts)``, made when first called (a command whose output holds
    nothing ``HINT`` picks, an unchanged re-ingest, never makes it), once: one list, the
    search keeps what it found by rule."""

    def __init__(self, rules: list[tuple[str, tuple[str, ...], str]], starts: dict[str, str]):
        self._args = (rules, starts)
        self._rules: list[Rule] | None = None
        self._lock = threading.Lock()

    def __call__(self) -> list[Rule]:
        if self._rules is None:
            with self._lock:
                if self._rules is None:
                    self._rules = compiled(*self._args)
        return self._rules


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
        self._found: dict[int, list[re.Match[str]]] = {}  # by id(rule)
        self._places: dict[tuple[str, bool], list[int]] = {}

    @property
    def low(self) -> str:
        """The text folded: lower case, ``FOLD``'s letters as the ASCII ones they match."""
        if self._low is None:
            self._low = self.text.lower()
            if not self._low.isascii():
                for letter, ascii_ in FOLD:
                    self._low = self._low.replace(letter, ascii_)
        return self._low

    def aligned(self) -> bool:
        """Whether each character of ``low`` stands where the text's own does (`İ` folds to
        one `i`; a combining dot of the text's own is dropped)."""
        return len(self.low) == len(self.text) and "\u0307" not in self.text

    def places(self, literal: str, folded: bool) -> list[int]:
        """Every place ``literal`` starts at in the text (``folded``: in ``low``)."""
        got = self._places.get((literal, folded))
        if got is None:
            hay = self.low if folded else self.text
            got, at = [], hay.find(literal)
            while at >= 0:
                got.append(at)
                at = hay.find(literal, at + 1)
            self._places[literal, folded] = got
        return got

    def word_start(self, at: int) -> int:
        """Where the word (``[\\w-]*``) that ends at ``at`` begins."""
        if self._rev is None:
            self._rev = self.text[::-1]
        back = _WORD.match(self._rev, len(self.text) - at)
        return at - (back.end() - back.start())


def matches(rule: Rule, t: Text) -> list[re.Match[str]]:
    """``rule.rx.finditer(t.text)``, as a list (kept with ``t``)."""
    found = t._found.get(id(rule))
    if found is None:
        found = t._found[id(rule)] = _matches(rule, t)
    return found


def _matches(rule: Rule, t: Text) -> list[re.Match[str]]:
    """[] where no literal of the rule is in the text; tried only where a match may start,
    where the rule's ``start`` says."""
    hay = t.low if rule.folded else t.text
    if rule.literals and not any(map(hay.__contains__, rule.literals)):
        return []
    starts = _starts(rule, t) if rule.start and (t.aligned() or not rule.folded) else None
    if starts is None:
        return list(rule.rx.finditer(t.text))
    out: list[re.Match[str]] = []
    end = 0  # where the last match ended: the next starts there or after
    for at in starts:
        m = rule.rx.match(t.text, at) if at >= end else None
        if m:
            out.append(m)
            end = m.end()
    return out


def _starts(rule: Rule, t: Text) -> list[int] | None:
    """Where a match of ``rule`` may start in ``t``, in order; None where literals are dense."""
    places = {(at, len(w)) for w in rule.literals for at in t.places(w, rule.folded)}
    if len(places) * DENSE > len(t.text):
        return None
    if rule.start != "word":
        return sorted({at + (n if rule.start == "after" else 0) for at, n in places})
    out, word_end = [], 0  # where the last word tried ended
    for at, _ in sorted(places):
        if at >= word_end:  # (not in the word of the last literal: that one is tried)
            start = t.word_start(at)
            out += [start - 1, start] if start else [start]
            word_end = _WORD.match(t.text, at).end()
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
