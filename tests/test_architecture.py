"""Issue 12's measurable architecture rules, checked over forensics/ and parsers/ (AST, no imports
of the scanned code beyond the two tables whose names rule (d) protects).

(a) no module outside forensics/sim over 600 lines;
(b) no function (nested defs and the click commands inside `register()` included) over 80 lines;
(c) `importlib.import_module` / `__import__` only in the plugin loader(s);
(d) no signature id (forensics.signatures.CATALOG) or parser rule name (the SGLang parser's
    RULES table) as a string literal outside the module that declares the table;
(e) the simulator never branches on a style's name: its differences are fields of the style
    (forensics/sim/logstyle.py, STYLES).

Each rule has an ALLOWLIST of the violators of the day the test was written. It can only shrink:
a new violator fails, and so does an allowlisted item that no longer violates (delete its line
in the commit that fixes it). Never add to an allowlist: fix the code instead.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("forensics", "parsers")

MODULE_LIMIT = 600  # lines per module, forensics/sim exempt
FUNCTION_LIMIT = 80  # lines per function, from its `def` line to its last line
MODULE_EXEMPT = ("forensics/sim/",)
# where plugins load: the CLI loads its command-group modules by name
PLUGIN_LOADERS = frozenset({"forensics/cli.py"})
DYNAMIC_IMPORTS = frozenset({"import_module", "__import__"})


# ------------------------------------------------------------------------------------------
# The checks: pure functions of (path, source) so the tests below can feed synthetic code.
# A violation is a (path, name) pair; the name is "" for a whole module.
# ------------------------------------------------------------------------------------------
Violation = tuple[str, str]


def long_module(path: str, source: str, limit: int = MODULE_LIMIT) -> list[Violation]:
    if path.startswith(MODULE_EXEMPT) or len(source.splitlines()) <= limit:
        return []
    return [(path, "")]


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """Every def (methods and nested defs too) with its dotted name: `register.ingest`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                yield name, node
            yield from _functions(node, name + ".")
        else:
            yield from _functions(node, prefix)


def long_functions(path: str, tree: ast.AST, limit: int = FUNCTION_LIMIT) -> list[Violation]:
    return [
        (path, name)
        for name, node in _functions(tree)
        if node.end_lineno - node.lineno + 1 > limit  # type: ignore[attr-defined]
    ]


def _enclosing(tree: ast.AST) -> dict[ast.AST, str]:
    """Each node -> the dotted name of the function around it ('<module>' at top level)."""
    owner: dict[ast.AST, str] = {}

    def walk(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = name
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = child.name if name == "<module>" else f"{name}.{child.name}"
            owner[child] = inner
            walk(child, inner)

    walk(tree, "<module>")
    return owner


def dynamic_imports(path: str, tree: ast.AST) -> list[Violation]:
    if path in PLUGIN_LOADERS:
        return []
    owner = _enclosing(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in DYNAMIC_IMPORTS:
                found.append((path, owner.get(node, "<module>")))
    return sorted(set(found))


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def table_literals(path: str, tree: ast.AST, homes: dict[str, set[str]]) -> list[Violation]:
    """String constants equal to a protected name, outside the module(s) declaring its table.

    `homes` maps each protected name to the modules allowed to spell it (a name in two tables,
    e.g. a signature id that is also a rule name, may be spelled in either table's module).
    """
    docs = _docstrings(tree)
    return sorted(
        {
            (path, node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value in homes
            and path not in homes[node.value]
            and id(node) not in docs
        }
    )


STYLE_NAMES = frozenset({"name", "style_name", "sim_style"})


def style_name_branches(path: str, tree: ast.AST) -> list[Violation]:
    """`x.name == "0.5.23"` (or !=, in) in the simulator: a style difference outside the style."""
    if not path.startswith("forensics/sim/"):
        return []
    owner = _enclosing(tree)
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        named = any(isinstance(x, ast.Attribute) and x.attr in STYLE_NAMES for x in sides)
        literal = any(isinstance(x, ast.Constant) and isinstance(x.value, str) for x in sides)
        if named and literal:
            found.add((path, owner.get(node, "<module>")))
    return sorted(found)


# ------------------------------------------------------------------------------------------
# The protected names, collected from the tables themselves
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Table:
    what: str
    variable: str  # the module-level name the table is assigned to
    under: str  # the folder its declaring module lives in
    names: frozenset[str]
    rows: object = None  # the table itself: its home is the module holding this very object


# Names that are also the word of another notion; a literal of these means that notion, so
# they are not protected. Stage names (the third field of a rule, the events' `stage` column)
# are their own vocabulary too and are left out by _tables() below.
HOMONYMS = {
    "flush_cache": "the bench option (flush the server's cache before a benchmark)",
    "warmup_failed": "the bench result field (the client's warmup request failed)",
    "watchdog_timeout": "SGLang's ServerArgs field of that name (the simulator prints it)",
}


def _rule_name(rule: object) -> str:
    if isinstance(rule, tuple):
        return rule[0]
    if isinstance(rule, dict):
        return rule["name"]
    return rule.name  # type: ignore[attr-defined]


def _rule_stage(rule: object) -> str | None:
    if isinstance(rule, tuple):
        return rule[2]
    if isinstance(rule, dict):
        return rule.get("stage")
    return getattr(rule, "stage", None)


def _tables() -> list[Table]:
    from forensics.signatures import CATALOG
    from forensics_parsers.sglang import RULES

    stages = {_rule_stage(r) for r in RULES}
    rules = {_rule_name(r) for r in RULES} - stages - set(HOMONYMS)
    ids = {c["id"] for c in CATALOG} - set(HOMONYMS)
    return [
        Table("signature id", "CATALOG", "forensics", frozenset(ids), CATALOG),
        Table("parser rule name", "RULES", "parsers", frozenset(rules), RULES),
    ]


def _module_name(path: str) -> str:
    """forensics/a/b.py -> forensics.a.b; parsers/x.py -> forensics_parsers.x (package-dir)."""
    dotted = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    return "forensics_parsers" + dotted[len("parsers") :] if path.startswith("parsers/") else dotted


def declaring_modules(
    variable: str, sources: dict[str, ast.AST], under: str, rows: object = None
) -> list[str]:
    """The module(s) under `under/` that assign `variable` at top level (and, given the table
    itself, hold that very object: another table of the same name elsewhere is not a home)."""
    import importlib

    found = []
    for path, tree in sources.items():
        if not path.startswith(under + "/"):
            continue
        for node in tree.body:  # type: ignore[attr-defined]
            targets = (
                node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            )
            if isinstance(node, ast.Assign | ast.AnnAssign) and any(
                isinstance(t, ast.Name) and t.id == variable for t in targets
            ):
                found.append(path)
    if rows is not None:
        found = [
            p
            for p in found
            if getattr(importlib.import_module(_module_name(p)), variable, None) is rows
        ]
    return found


# ------------------------------------------------------------------------------------------
# Today's violators. ONLY DELETE LINES HERE (in the commit that fixes the item).
# ------------------------------------------------------------------------------------------
ALLOW_LONG_MODULES: set[Violation] = set()
ALLOW_LONG_FUNCTIONS: set[Violation] = set()
ALLOW_DYNAMIC_IMPORTS: set[Violation] = set()
ALLOW_TABLE_LITERALS: set[Violation] = set()


# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sources() -> dict[str, ast.AST]:
    out = {}
    for top in SCANNED:
        for f in sorted((ROOT / top).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            out[rel] = ast.parse(f.read_text(encoding="utf-8"), filename=rel)
    return out


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    return {
        f.relative_to(ROOT).as_posix(): f.read_text(encoding="utf-8")
        for top in SCANNED
        for f in sorted((ROOT / top).rglob("*.py"))
    }


def _judge(rule: str, found: Iterable[Violation], allowed: set[Violation], fix: str) -> None:
    found = set(found)
    new, stale = sorted(found - allowed), sorted(allowed - found)
    lines = [f"{p}{'::' + n if n else ''}: {rule} (fix: {fix})" for p, n in new]
    lines += [
        f"{p}{'::' + n if n else ''}: allowlisted for '{rule}' but no longer violates "
        "(fix: delete its line from the allowlist in tests/test_architecture.py)"
        for p, n in stale
    ]
    assert not lines, "\n" + "\n".join(lines)


def test_no_module_over_600_lines(texts):
    found = [v for p, s in texts.items() for v in long_module(p, s)]
    _judge(
        f"module over {MODULE_LIMIT} lines",
        found,
        ALLOW_LONG_MODULES,
        "split it into a package of the same import name, one noun per submodule",
    )


def test_no_function_over_80_lines(sources):
    found = [v for p, t in sources.items() for v in long_functions(p, t)]
    _judge(
        f"function over {FUNCTION_LIMIT} lines",
        found,
        ALLOW_LONG_FUNCTIONS,
        "split it into named steps; move click commands out of register() to module level",
    )


def test_dynamic_imports_only_in_plugin_loaders(sources):
    found = [v for p, t in sources.items() for v in dynamic_imports(p, t)]
    _judge(
        "importlib.import_module/__import__ outside the plugin loaders "
        f"({', '.join(sorted(PLUGIN_LOADERS))})",
        found,
        ALLOW_DYNAMIC_IMPORTS,
        "import the module normally (inside the function if it is heavy)",
    )


def test_no_table_name_as_a_literal_outside_its_table(sources):
    homes: dict[str, set[str]] = {}
    for table in _tables():
        home = declaring_modules(table.variable, sources, table.under, table.rows)
        assert home, f"no module under {table.under}/ assigns {table.variable}: update _tables()"
        for name in table.names:
            homes.setdefault(name, set()).update(home)
    found = [v for p, t in sources.items() for v in table_literals(p, t, homes)]
    _judge(
        "signature id / parser rule name as a string literal outside its table",
        found,
        ALLOW_TABLE_LITERALS,
        "give the table row a field carrying that behaviour, or refer to the row by a "
        "constant exported by the table's module",
    )


def test_the_simulator_never_branches_on_a_style_name(sources):
    found = [v for p, t in sources.items() for v in style_name_branches(p, t)]
    _judge(
        "branch on a style's name in the simulator",
        found,
        set(),
        "add a field to Style (forensics/sim/logstyle.py) and set it in every STYLES row",
    )


# ------------------------------------------------------------------------------------------
# Each check catches a synthetic violation (and passes the same code when it is fine)
# ------------------------------------------------------------------------------------------
def test_long_module_is_caught():
    big = "x = 1\n" * (MODULE_LIMIT + 1)
    assert long_module("forensics/big.py", big) == [("forensics/big.py", "")]
    assert long_module("forensics/sim/big.py", big) == []
    assert long_module("forensics/ok.py", "x = 1\n" * MODULE_LIMIT) == []


def test_long_function_is_caught_nested_and_in_methods():
    body = "".join(f"        x{i} = {i}\n" for i in range(FUNCTION_LIMIT))
    src = f"def register(cli):\n    @cli.command()\n    def ingest():\n{body}\nclass C:\n    def m(self):\n        pass\n"
    tree = ast.parse(src)
    assert long_functions("forensics/cli_x.py", tree) == [
        ("forensics/cli_x.py", "register"),
        ("forensics/cli_x.py", "register.ingest"),
    ]
    assert long_functions("forensics/cli_x.py", ast.parse("def f():\n    pass\n")) == []


def test_dynamic_import_is_caught():
    src = "import importlib\ndef load(n):\n    return importlib.import_module(n)\nm = __import__('os')\n"
    tree = ast.parse(src)
    assert dynamic_imports("forensics/runs.py", tree) == [
        ("forensics/runs.py", "<module>"),
        ("forensics/runs.py", "load"),
    ]
    assert dynamic_imports("forensics/cli.py", tree) == []


def test_table_literal_is_caught_but_not_in_docstrings_or_the_table():
    src = 'def f(hit):\n    """oom_kv is documented here."""\n    return hit.id == "oom_kv"\n'
    tree = ast.parse(src)
    homes = {"oom_kv": {"forensics/sig.py"}}
    assert table_literals("forensics/x.py", tree, homes) == [("forensics/x.py", "oom_kv")]
    assert table_literals("forensics/sig.py", tree, homes) == []
    assert table_literals("forensics/x.py", ast.parse('"""oom_kv"""\n'), homes) == []


def test_declaring_module_is_found():
    sources = {
        "forensics/sig.py": ast.parse("CATALOG: list = []\n"),
        "forensics/other.py": ast.parse("def f():\n    CATALOG = 1\n"),
    }
    assert declaring_modules("CATALOG", sources, "forensics") == ["forensics/sig.py"]
    # with the table object: only the module holding it (parsers/secrets.py has its own RULES)
    from forensics_parsers import secrets, sglang

    real = {p: ast.parse((ROOT / p).read_text()) for p in ("parsers/secrets.py",)}
    assert declaring_modules("RULES", real, "parsers") == ["parsers/secrets.py"]
    assert declaring_modules("RULES", real, "parsers", sglang.RULES) == []
    assert declaring_modules("RULES", real, "parsers", secrets.RULES) == ["parsers/secrets.py"]
    assert _module_name("parsers/sglang/rules.py") == "forensics_parsers.sglang.rules"
    assert _module_name("forensics/bench/__init__.py") == "forensics.bench"


def test_style_name_branch_is_caught_only_in_the_simulator():
    src = 'def f(cfg):\n    return 4 if cfg.style.name == "0.4.6" else 1\n'
    tree = ast.parse(src)
    assert style_name_branches("forensics/sim/args.py", tree) == [("forensics/sim/args.py", "f")]
    assert style_name_branches("forensics/bench.py", tree) == []
    fine = ast.parse("def f(cfg):\n    return 4 if cfg.style.spec_default_large else 1\n")
    assert style_name_branches("forensics/sim/args.py", fine) == []
