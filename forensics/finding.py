"""A lint finding: what one rule says of one step of a launch chain (forensics.lint)."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class Finding:
    id: str
    severity: str
    step: int | None  # 1-based step index, None for the whole recipe
    text: str  # the step's text
    explanation: str
    alternative: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def redacted(self) -> Finding:
        """A finding quotes the chain (its step, the launching shell's command line): the
        chain's secrets (--api-key X, HF_TOKEN=…) go through the parser's one redaction, as
        stored lines do, so no output of lint (text, --json, a refused replay's message)
        prints them."""
        from forensics_parsers.secrets import redact

        return dataclasses.replace(
            self,
            text=redact(self.text),
            explanation=redact(self.explanation),
            alternative=redact(self.alternative),
        )
