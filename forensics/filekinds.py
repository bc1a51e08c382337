"""Files that are not logs, told by their first bytes: the rows of ``forensics.logsource.FORMATS``
that have no decompressor (ingest, classify and diagnose refuse them, naming what they are).
One row a kind: (name, magic bytes at offset 0 — tar's at 257, see ``logsource._format_of``,
what the message calls it).
"""

from __future__ import annotations

NOT_LOGS: tuple[tuple[str, bytes, str], ...] = (
    ("zip", b"PK\x03\x04", "a zip archive"),
    ("7z", b"7z\xbc\xaf\x27\x1c", "a 7-zip archive"),
    ("tar", b"ustar", "a tar archive"),  # magic at offset 257, see _format_of
    ("elf", b"\x7fELF", "an ELF executable"),
    ("parquet", b"PAR1", "a parquet file (a forensics store part?)"),
    ("sqlite", b"SQLite format 3\x00", "an SQLite database"),
    ("png", b"\x89PNG\r\n\x1a\n", "a PNG image"),
    ("jpeg", b"\xff\xd8\xff", "a JPEG image"),
    ("pdf", b"%PDF-", "a PDF document"),
    ("rar", b"Rar!\x1a\x07", "a RAR archive"),
    ("gif", b"GIF8", "a GIF image"),
    ("wasm", b"\x00asm", "a WebAssembly module"),
    ("macho", b"\xcf\xfa\xed\xfe", "a Mach-O executable"),
    ("class", b"\xca\xfe\xba\xbe", "a Java class or fat Mach-O binary"),
    ("ar", b"!<arch>\n", "an ar archive (.deb, .a)"),
    ("compress", b"\x1f\x9d", "a compress (.Z) file"),
    ("lzip", b"LZIP", "an lzip-compressed file"),
    ("pickle", b"\x80\x04\x95", "a Python pickle"),
    ("riff", b"RIFF", "a RIFF media file (WAV, AVI, WebP)"),
    ("ogg", b"OggS", "an Ogg media file"),
)

__all__ = ["NOT_LOGS"]
