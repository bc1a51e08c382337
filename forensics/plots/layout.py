"""What every plot shares: figures on the Agg canvas, saving, inert labels, colours, notes."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import UsageError
from forensics.output import check_out_path, out_path

if TYPE_CHECKING:
    from matplotlib.figure import Figure


FORMATS = {".png": "png", ".svg": "svg"}
LABEL_MAX = 40  # characters of a log-derived label shown on a plot

COLORS = {
    "server": "#1f77b4",
    "bench": "#ff7f0e",
    "baseline": "#2ca02c",
    "failed": "#d62728",
    "loses": "#fdecea",
    "wins": "#eaf6ea",
}


def safe_text(text: Any, limit: int = LABEL_MAX) -> str:
    """Log-derived text made inert for matplotlib (no mathtext) and short enough to place."""
    s = "" if text is None else str(text)
    s = "".join(ch if ch.isprintable() else "?" for ch in s)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return s.replace("$", r"\$")


def new_figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def image_format(path: Path, *, own: bool = False) -> str:
    """The image format ``path`` names: its extension, else PNG for a device or FIFO written
    in place or to stdout (``-o /dev/null``, ``-o /dev/stdout``, ``-o -``); else a usage error."""
    from forensics.output import TARGET_KINDS, target_kind

    if not own:  # forensics' own file (a sweep's plots) is written by write_home_file
        check_out_path(path)  # what the path is (a folder, a missing folder) says first
    fmt = FORMATS.get(path.suffix.lower())
    if (
        fmt is None
        and not path.suffix
        and TARGET_KINDS.get(target_kind(path)) in ("in_place", "stream")
    ):
        fmt = "png"
    if fmt is None:
        raise UsageError(
            f"{path}: unknown image format {path.suffix or '(no extension)'}",
            hint="end --out with .png or .svg",
        )
    return fmt


def save_figure(fig: Figure, out: str | Path, *, own: bool = False) -> Path:
    """Save as PNG or SVG (by extension) through ``forensics.output``: ``write_output`` for
    the user's --out, ``write_home_file`` for ``own`` images under forensics' home (a sweep's
    plots, which ``write_output`` refuses there)."""
    from forensics.output import write_home_file, write_output

    path = out_path(out)  # as typed (a trailing slash is no file)
    fmt = image_format(path, own=own)  # checks the user's path too (check_out_path)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=110)
    if own:
        write_home_file(path, buf.getvalue(), what="the image", mode=0o644)
    else:
        write_output(path, buf.getvalue(), what="the image")
    return path


def figure_bytes(fig: Figure, fmt: str = "png") -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=100)
    return buf.getvalue()


def _finish(fig: Figure, out: str | Path | None) -> Figure:
    if out is not None:
        save_figure(fig, out)
    return fig


def _no_baseline_note(ax, note: str | None, width: int = 90) -> None:
    """Say on the plot why no baseline is drawn (e.g. only batched plain runs) and how to set
    one, rather than draw a misleading one."""
    import textwrap

    ax.text(
        0.01,
        0.98,
        textwrap.fill(safe_text(note or "No baseline.", 400), width),
        transform=ax.transAxes,
        va="top",
        ha="left",
        fontsize=8,
        color="#555555",
        bbox={"facecolor": "white", "edgecolor": "#cccccc", "alpha": 0.9},
        gid="no-baseline",
    )
