"""What text a regex needs: the literals every match of it holds, read from its own parse tree.

``required(pattern)`` reads Python's parse of a pattern (``re._parser``) and returns what any
match of it must contain, as a disjunction of conjunctions: a list of alternatives (the
pattern's top-level ``|``), each a list of clauses that must all hold, each clause a set of
``Lit`` of which one must occur in the searched text. A text that satisfies no alternative is
matched by no part of the pattern: a cheap test (substring searches) that rules a regex out
without running it. Where an alternative yields no clause (a pattern of classes and
repetitions only) ``required`` returns None: nothing can be ruled out.

It is conservative: a clause is left out where the tree does not say for sure (look-arounds,
back references, conditionals, an optional part end a run of literals), and a literal of a
case-insensitive part is compared case-insensitively as ASCII (a text with other characters
is to be left to the regex itself: Unicode case folding maps `K` (U+212A) to `k`).
"""

from __future__ import annotations

import re._parser as sre  # (Python's own parse of a pattern: the same tree `re` compiles)
from re import IGNORECASE, MULTILINE
from typing import NamedTuple

_C = sre  # the opcode names (LITERAL, IN, BRANCH, ...) live in the parser's namespace
MAX_SET = 64  # strings a run of literals may stand for (cross products beyond it stop it)
MAX_CLASS = 8  # a class of at most this many characters is a set of literals


class Lit(NamedTuple):
    """A literal a match holds: its text (lower case when ``icase``), whether it is compared
    ignoring ASCII case, whether it stands at the start of the searched text (``^``)."""

    text: str
    icase: bool
    anchored: bool


Clause = frozenset  # of Lit: one of them occurs
Alternative = list  # of Clause: all of them hold


class _Run:
    """A run of adjacent exact parts: the strings it may be (None: too many to list)."""

    def __init__(self) -> None:
        self.strings: set[str] | None = {""}
        self.icase = False
        self.anchored = False

    def extend(self, strings: set[str], icase: bool, out: list[Clause]) -> None:
        if self.strings is not None and len(self.strings) * len(strings) > MAX_SET:
            self.flush(out)
        if self.strings is None or self.strings == {""}:
            self.strings = set(strings)
        else:
            self.strings = {a + b for a in self.strings for b in strings}
        self.icase = self.icase or icase

    def flush(self, out: list[Clause]) -> None:
        """The run so far as a clause (when none of its strings is empty); a new run."""
        if self.strings and "" not in self.strings:
            fold = str.lower if self.icase else str
            out.append(Clause(Lit(fold(s), self.icase, self.anchored) for s in self.strings))
        self.strings, self.icase, self.anchored = {""}, False, False


def _class(items: list, icase: bool) -> set[str] | None:
    """The characters of a class (``[.,]``), or None when it is negated, has a category or is
    larger than MAX_CLASS."""
    chars: set[str] = set()
    for op, av in items:
        if op is _C.LITERAL:
            chars.add(chr(av))
        elif op is _C.RANGE and av[1] - av[0] < MAX_CLASS:
            chars.update(chr(c) for c in range(av[0], av[1] + 1))
        else:
            return None
    if icase:
        chars = {c.lower() for c in chars}
    return chars if len(chars) <= MAX_CLASS else None


def _seq(items: list, flags: int, at_start: bool) -> tuple[list[Clause], set[str] | None, bool]:
    """A sequence of the tree -> (its clauses, the strings it may be when it is exact, whether
    a match of it may be matched ignoring case). ``at_start``: nothing is matched before it
    (a ``^`` there puts the run after it at the start of the text)."""
    out: list[Clause] = []
    run = _Run()
    exact, any_icase, fresh = True, False, True  # fresh: nothing matched yet
    for op, av in items:
        icase = bool(flags & IGNORECASE)
        here = at_start and fresh  # (nothing matched before this part)
        strings: set[str] | None = None
        sub: tuple[list[Clause], set[str] | None, bool] | None = None
        if op is _C.AT and av in (_C.AT_BEGINNING, _C.AT_BEGINNING_STRING) and here:
            if av is _C.AT_BEGINNING_STRING or not flags & MULTILINE:
                run.anchored = True
                continue
        fresh = False
        if op is _C.LITERAL:
            strings = {chr(av).lower() if icase else chr(av)}
        elif op is _C.IN:
            strings = _class(av, icase)
        elif op is _C.SUBPATTERN:
            _, add, drop, body = av
            sub = _seq(list(body), (flags | add) & ~drop, here)
        elif op is _C.BRANCH:
            sub = _branch(av[1], flags, here)
        elif op in (_C.MAX_REPEAT, _C.MIN_REPEAT, _C.POSSESSIVE_REPEAT):
            lo, hi, body = av
            inner = _seq(list(body), flags, here)
            if lo == hi and inner[1] is not None and len(inner[1]) ** lo <= MAX_SET:
                sub = ([], _power(inner[1], lo), inner[2])  # `x{3}`: exact
            elif lo >= 1:  # one match of the body, then more or none: the run ends after it
                if inner[1] is not None:
                    run.extend(inner[1], inner[2], out)
                else:
                    out.extend(inner[0])
                any_icase = any_icase or inner[2]
                sub = ([], None, inner[2])
        if sub is not None:
            strings, icase = sub[1], sub[2]
            if strings is None:  # (an exact part's clause is its strings, in the run)
                out.extend(sub[0])
            any_icase = any_icase or icase
        if strings is None:  # (anything else: the run ends, nothing known of this part)
            run.flush(out)
            exact = False
            continue
        run.extend(strings, icase, out)
        any_icase = any_icase or icase
    whole = run.strings if exact and not out else None
    run.flush(out)
    return out, whole, any_icase


def _power(strings: set[str], n: int) -> set[str]:
    out = {""}
    for _ in range(n):
        out = {a + b for a in out for b in strings}
    return out


def _branch(seqs: list, flags: int, at_start: bool) -> tuple[list[Clause], set[str] | None, bool]:
    """``a|b``: exact when every branch is; else one clause, the best of each branch's joined
    (none when a branch has none)."""
    parts = [_seq(list(s), flags, at_start) for s in seqs]
    icase = any(p[2] for p in parts)
    if all(p[1] is not None for p in parts):
        union = set().union(*(p[1] for p in parts))
        if len(union) <= MAX_SET:
            return [], union, icase
    best = [_best(p[0]) for p in parts]
    if any(b is None for b in best):
        return [], None, icase
    return [Clause(lit for b in best for lit in b)], None, icase


def _best(clauses: list[Clause]) -> Clause | None:
    """The clause whose shortest literal is longest (the rarest in text), fewest literals."""
    if not clauses:
        return None
    return max(clauses, key=lambda c: (min(len(lit.text) for lit in c), -len(c)))


def required(pattern: str) -> list[Alternative] | None:
    """What every match of ``pattern`` holds (see the module's doc), or None."""
    tree = sre.parse(pattern)
    flags = tree.state.flags
    items = list(tree)
    seqs = (
        [list(s) for s in items[0][1][1]]
        if len(items) == 1 and items[0][0] is _C.BRANCH
        else [items]
    )
    alts: list[Alternative] = []
    for seq in seqs:
        clauses = _seq(seq, flags, True)[0]
        if not clauses:
            return None
        alts.append(clauses)
    return alts
