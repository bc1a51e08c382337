"""Generate docs/cli.md from the CLI's own --help texts (`--check`: fail if it drifted)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "docs" / "cli.md"


def _walk(
    cmd: click.Command, path: list[str], out: list[str], parent: click.Context | None = None
) -> None:
    # make_context applies the command's context_settings and inherits the parent's (-h)
    ctx = cmd.make_context(path[-1], [], parent=parent, resilient_parsing=True, terminal_width=100)
    ctx.max_content_width = 100
    title = " ".join(path)
    out.append(f"## `{title}`\n")
    out.append("```")
    out.append(cmd.get_help(ctx).rstrip())
    out.append("```\n")
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                _walk(sub, [*path, name], out, ctx)


def render() -> str:
    from forensics.cli import cli

    out = [
        "# CLI reference",
        "",
        "Generated from `--help` by `make docs` (scripts/gen_cli_docs.py); `make lint` and the",
        "tests fail when it no longer matches the code. Exit codes: see [exit-codes.md](exit-codes.md).",
        "",
    ]
    _walk(cli, ["forensics"], out)
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            print(f"{OUT} is out of date: run `make docs`", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
