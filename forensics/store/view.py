"""A read-only view of an open transaction: the store as it would be committed now
(``Transaction.view``). An ingest reads its runs through it to store their verdicts in the
same commit as their rows: one manifest write, one round of fsyncs (issue 15)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.store.folder import Store

if TYPE_CHECKING:
    from forensics.store.manifest import Manifest
    from forensics.store.transaction import Transaction


class TransactionView(Store):
    """The store's reads (``table``, ``reduced``, ``sources``, …) over the manifest the
    transaction would write (``Transaction.planned``, taken once: call ``Transaction.settle``
    before), the parts it adds read at their temporary names. Inside the write: a bad part
    stops it (never quarantined). Writing through it is refused: the transaction writes."""

    def __init__(self, tx: Transaction):
        super().__init__(tx.store.root)
        self._lock_depth = 1  # the transaction holds the lock: reads raise, never quarantine
        self._planned, self._files = tx.planned()

    def manifest(self) -> Manifest:
        return self._planned

    def _part_file(self, table: str, part: str) -> Path:
        return self._files.get((table, part)) or super()._part_file(table, part)

    def transaction(self, lock_timeout: float | None = None) -> Any:
        raise RuntimeError("a transaction's view is read-only: write through the transaction")
