"""The launch records in the store: the ``launches`` rows (one per status change) and the
parsed ``journal`` rows, and which launch or recipe a NAME means."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import polars as pl

from forensics.errors import RunNotFound, UsageError
from forensics.recipe import Recipe, load_recipes
from forensics.tables import LAUNCH_SCHEMA  # declared with every table of the store

if TYPE_CHECKING:
    from forensics.store import Store

# Launch states whose process group may still run unrecorded (Ctrl-C during the health wait,
# a connection lost during it).
UNSETTLED = ("registered", "running", "interrupted", "unknown")


def now() -> dt.datetime:
    return dt.datetime.now()


def launches_frame(store: Store) -> pl.DataFrame:
    """One row per launch (its latest status), oldest first."""
    df = store.table("launches")
    if df.is_empty():
        return pl.DataFrame(schema=LAUNCH_SCHEMA)
    return (
        df.sort("updated_at")
        .group_by("launch_id", maintain_order=True)
        .last()
        .sort("started_at")
        .select([c for c in LAUNCH_SCHEMA if c in df.columns])
    )


def record(store: Store, row: dict[str, Any]) -> None:
    row = {**row, "updated_at": now()}
    full = {k: row.get(k) for k in LAUNCH_SCHEMA}
    with store.transaction() as tx:
        tx.append("launches", pl.DataFrame([full], schema=LAUNCH_SCHEMA))


def record_journal(store: Store, frame: pl.DataFrame) -> None:
    if frame.is_empty():
        return
    with store.transaction() as tx:
        tx.append("journal", frame)


def _match(names: list[str], query: str) -> list[str]:
    if query in names:
        return [query]
    found = [n for n in names if n.endswith("_" + query) or n.endswith("-" + query)]
    if not found:
        found = [n for n in names if query in n]
    return sorted(set(found))


def find_launch(store: Store, name: str) -> dict[str, Any] | None:
    """The latest launch whose name is, ends with ``_name``, or contains ``name``."""
    df = launches_frame(store)
    if df.is_empty():
        return None
    names = _match(df["name"].unique().to_list(), name)
    if len(names) > 1:
        raise UsageError(
            f"{name!r} matches several launches: {', '.join(names[:8])}",
            hint="give the full name",
        )
    if not names:
        return None
    return df.filter(pl.col("name") == names[0]).row(-1, named=True)


def resolve_recipe(store: Store, name: str) -> Recipe:
    """The recipe of NAME: the latest launch in the store, else ``[recipes.NAME]``."""
    row = find_launch(store, name)
    if row is not None and row.get("recipe"):
        return Recipe.from_json(row["recipe"])
    recipes = load_recipes()
    names = _match(list(recipes), name)
    if len(names) == 1:
        return recipes[names[0]]
    if len(names) > 1:
        raise UsageError(f"{name!r} matches recipes {', '.join(names)}", hint="give the full name")
    raise RunNotFound(
        f"no launch or recipe named {name!r}",
        hint="pass the chain you ran: forensics launch --shell '...' --replay, or add "
        f"[recipes.{name}] to forensics.toml",
    )


# --------------------------------------------------------------------------- safe patterns


def find_launch_exact(store: Store, name: str) -> dict[str, Any] | None:
    """The latest launch named exactly ``name``."""
    df = launches_frame(store)
    if df.is_empty():
        return None
    df = df.filter(pl.col("name") == name)
    return None if df.is_empty() else df.row(-1, named=True)
