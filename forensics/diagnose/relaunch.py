"""``diagnose --relaunch``: replay the launch under the journal and diagnose it."""

from __future__ import annotations

from typing import Any


def relaunch(
    store,
    name: str,
    *,
    host: str | None = None,
    shell: str | None = None,
    safe_patterns: bool = False,
    sim: dict[str, Any] | None = None,
    deadline: float | None = None,
    step_deadline: float | None = None,
) -> dict[str, Any]:
    """Replay the launch under the journal (forensics.launcher) and return its diagnosis.

    ``shell``: the chain as typed (else the recorded launch, else ``[recipes.NAME]``).
    """
    try:
        from forensics import launcher
    except ImportError as exc:
        from forensics.errors import UsageError

        raise UsageError(
            f"{name}: --relaunch needs forensics.launcher, which is not available ({exc})",
            hint=f"forensics diagnose {name} without --relaunch",
        ) from exc
    recipe = None
    if shell is not None:
        from forensics.recipe import Recipe

        recipe = Recipe.from_shell(shell, name=None, host=host)
    return launcher.relaunch(
        store,
        name,
        host=host,
        recipe=recipe,
        safe_patterns=safe_patterns,
        sim=sim,
        deadline=deadline,
        step_deadline=step_deadline,
    )
