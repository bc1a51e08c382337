"""`forensics store check` and `forensics store repair` (forensics/store_repair.py)."""

from __future__ import annotations

import click

from forensics.cli_common import NON_NEGATIVE, echo, echo_json, get_store
from forensics.errors import EXIT_STORE


def register(cli: click.Group) -> None:
    cli.add_command(store_group)


@click.group("store")
def store_group() -> None:
    """Check the store for damage, and repair it (rebuild a lost manifest from the parts)."""


def _print(data: dict, *, repaired: bool) -> None:
    state = "ok" if data["ok"] else "damaged"
    echo(
        f"{data['root']}: {state} (schema version {data['schema_version'] or '?'}; "
        f"{data['parts_listed']} part(s) listed, {data['parts_on_disk']} on disk)"
    )
    for kind, f in data["findings"].items():
        echo(f"  {kind}: {f['count']}  -> {'done: ' if repaired else 'repair: '}{f['repair']}")
        for item in f["items"][:5]:
            echo(f"    {item}")
    for a in data["actions"]:
        echo(f"  {a}")


@store_group.command("check")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def check_cmd(ctx: click.Context, as_json: bool) -> None:
    """Report parts listed vs on disk, missing, unreadable, orphan and symlinked parts, and
    manifest entries outside the store. Never writes. Exit 0 when sound, 7 when damaged."""
    from forensics.store_repair import check

    data = check(get_store(ctx, create=False)).as_dict()
    if as_json:
        echo_json(data)
    else:
        _print(data, repaired=False)
        if not data["ok"]:
            echo("Repair it with: forensics store repair", err=True)
    ctx.exit(0 if data["ok"] else EXIT_STORE)


@store_group.command("repair")
@click.option(
    "--lock-timeout", type=NON_NEGATIVE, default=None, help="Seconds to wait for the store lock."
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def repair_cmd(ctx: click.Context, lock_timeout: float | None, as_json: bool) -> None:
    """Rebuild a missing or unreadable manifest from the parts (keeping every table, labels
    included); unlist missing parts; set aside (rename, never delete) unreadable, symlinked
    and orphan parts. Then re-ingest the logs to refresh their rows."""
    from forensics.store_repair import repair

    data = repair(get_store(ctx, create=False), lock_timeout=lock_timeout).as_dict()
    if as_json:
        echo_json(data)
    else:
        _print(data, repaired=True)
