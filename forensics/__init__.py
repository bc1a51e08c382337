"""forensics: ingest SGLang server logs, diagnose failed launches, benchmark and plot.

The library never imports click; the CLI lives in ``forensics.cli``.
"""

__version__ = "0.1.0"
