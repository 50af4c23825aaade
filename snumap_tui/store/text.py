"""Text read back from a recording made valid Unicode once, where the reader decodes it.

A recording may hold strings that are not text: comms and command lines read from /proc as
bytes and decoded with ``surrogateescape`` by an older recorder (a lone ``\\udcff`` for the
byte 0xff), or a crafted file's lone surrogates (the value codec and JSON both carry them).
Every consumer that encodes them (a CSV or Parquet file, Perfetto's protobuf, the report on
standard output) failed with a UnicodeEncodeError. The reader hands out such a string with the
offending code points written as ``\\udcff`` escapes (visible, and the original bytes can be
told from them); valid text, the common case, is returned as it is after one ``isascii``.
"""

from __future__ import annotations

from typing import Any


def clean_text(s: str) -> str:
    """``s``, or a copy with its lone surrogates escaped when it has any."""
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")
    return s


def clean_value(v: Any, depth: int = 0) -> Any:
    """Every string inside a decoded JSON-like value (dicts, lists) cleaned; the value itself
    when nothing needed it. Nesting is bounded by the decoder that made ``v``."""
    if isinstance(v, str):
        return clean_text(v)
    if depth > 256:
        return v
    if isinstance(v, dict):
        return {clean_text(k) if isinstance(k, str) else k: clean_value(x, depth + 1)
                for k, x in v.items()}
    if isinstance(v, list):
        return [clean_value(x, depth + 1) for x in v]
    return v
