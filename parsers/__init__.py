"""Pure parsers: text in, polars frames out. No I/O beyond what they are given, no click."""
