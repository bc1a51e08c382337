"""Plots of a tuning session: the throughput trend, accept length vs tok/s, startup, decode.

Every ``plot_*`` function returns a matplotlib :class:`~matplotlib.figure.Figure` (built
without pyplot, on the Agg canvas) and saves it when ``out`` is given; PNG or SVG by the
file's extension. matplotlib is imported inside the functions so ``forensics --help`` stays
fast. Artists that tests look for carry a ``gid`` (``baseline``, ``server``, ``bench``,
``failed``, ``break-even``, ``segment:<name>``, ...). See docs/plots.md.

One module per plot kind (trend, accept, startup, decode); ``layout`` holds what they share
(figures, saving, inert labels, colours) and ``scope`` the experiment a plot draws.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import UsageError
from forensics.output import out_path
from forensics.plots.accept import (
    ACCEPT_AGGREGATE,
    ACCEPT_FAMILIES,
    ACCEPT_POINT_LABELS,
    plot_accept,
)
from forensics.plots.decode import plot_decode
from forensics.plots.layout import (
    COLORS,
    FORMATS,
    LABEL_MAX,
    figure_bytes,
    image_format,
    new_figure,
    safe_text,
    save_figure,
)
from forensics.plots.scope import Scope, pick_experiment, scope
from forensics.plots.startup import SEGMENT_STYLE, STARTUP_RUNS, plot_startup
from forensics.plots.trend import TREND_LABELLED_RUNS, TREND_MAX_WIDTH, plot_trend

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from forensics.store import Store


# Plot kinds -> how `forensics plot KIND` draws one (options: baseline, experiment, group_by).
DRAW: dict[str, Callable[..., Figure]] = {
    "trend": lambda store, match, **opts: plot_trend(store, match, **opts),
    "accept": lambda store, match, **opts: plot_accept(store, match, **opts),
    "startup": lambda store, match, **opts: plot_startup(store, match, group_by=opts["group_by"]),
    "decode": lambda store, match, **opts: plot_decode(store, match or ""),
}
KINDS = tuple(DRAW)
# The options each kind reads (`plot decode RUN --experiment X` is exit 2, not ignored).
KIND_OPTIONS: dict[str, tuple[str, ...]] = {
    "trend": ("baseline", "experiment", "group_by"),
    "accept": ("baseline", "experiment", "group_by"),
    "startup": ("group_by",),
    "decode": (),
}

__all__ = [
    "ACCEPT_AGGREGATE",
    "ACCEPT_FAMILIES",
    "ACCEPT_POINT_LABELS",
    "COLORS",
    "DRAW",
    "FORMATS",
    "KINDS",
    "LABEL_MAX",
    "SEGMENT_STYLE",
    "STARTUP_RUNS",
    "TREND_LABELLED_RUNS",
    "TREND_MAX_WIDTH",
    "Scope",
    "default_out",
    "figure_bytes",
    "make_plot",
    "new_figure",
    "pick_experiment",
    "plot_accept",
    "plot_decode",
    "plot_startup",
    "plot_trend",
    "safe_text",
    "save_figure",
    "scope",
]


def default_out(kind: str) -> Path:
    return Path(f"forensics-{kind}.png")


def make_plot(
    store: Store,
    kind: str,
    match: str | None = None,
    *,
    out: str | Path | None = None,
    baseline: str | float | None = None,
    experiment: str | None = None,
    group_by: str | list[str] | None = None,
    own: bool = False,
) -> tuple[Figure, Path]:
    """Draw one kind of plot and save it (default ./forensics-<kind>.png); ``own``: the
    image is forensics' own file under its home (forensics.output.write_home_file)."""
    draw: Any = DRAW.get(kind)
    if draw is None:
        raise UsageError(f"plot {kind}: unknown kind", hint=f"one of {', '.join(KINDS)}")
    if out is not None and not str(out).strip():
        raise UsageError("--out '': an empty file name", hint=f"--out forensics-{kind}.png")
    path = out_path(out) if out else default_out(kind)  # as typed (forensics.output)
    image_format(path, own=own)  # a bad --out fails before drawing
    fig = draw(store, match, baseline=baseline, experiment=experiment, group_by=group_by)
    save_figure(fig, path, own=own)
    return fig, path
