"""An ingest's verdict step: the verdicts of the runs whose logs changed, stored with them
(forensics.verdicts.refresh; docs/performance.md, "The tail of one ingest")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from forensics.ingest.outcome import CHANGED, VERDICTS_PENDING, IngestSummary

if TYPE_CHECKING:
    from forensics.store import Store, Transaction

# A file with no line of SGLang's nor of a launch (signatures.NOT_SGLANG's ``every`` row) is
# stored (a launch's log it may still be, and the user asked for it) and named in a warning.
NOT_SGLANG_WARNING = (
    "no line of SGLang's nor of a launch (not an SGLang server log): stored as an "
    "unrecognised run, with no phase (`forensics runs` shows —, signature not_sglang)"
)


def verdict_step(
    store: Store,
    summary: IngestSummary,
    batch: Any,
    left_unverdicted: bool,
    tx: Transaction | None = None,
) -> None:
    """The verdicts of the runs whose logs changed (and of those an interrupted ingest left
    without one): those a worker computed (``batch.verdicts``) are stored as they are; the
    runs this ingest parsed are read from what it kept of the parts it wrote
    (``batch.written``), the others from the store. ``tx``: the ingest's last transaction,
    settled (``_Batch.commit``): they are read through its view and added to it, committed
    with the rows and the marker's clearing, one manifest write; else committed on their own."""
    from forensics.verdicts import refresh, unverdicted

    view = store if tx is None else tx.view()
    changed = {f.source_id for f in summary.files if f.status in CHANGED}
    if left_unverdicted:  # scan the store only then, not at every ingest
        changed |= unverdicted(view)
    unplaced: set[str] = set()
    refresh(
        view,
        changed,
        unplaced=unplaced,
        done_meta=VERDICTS_PENDING,
        written=batch.written,
        ready=batch.verdicts,
        into=tx,
    )
    summary.warnings += [
        f"{f.path}: {NOT_SGLANG_WARNING}" for f in summary.files if f.source_id in unplaced
    ]
