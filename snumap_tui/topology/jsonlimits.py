"""JSON from a file someone else wrote, decoded within a budget (bytes, items, nesting).

``json.loads`` allocates for whatever the text holds: 96 KB of a compressed recording header
inflated to 89 million empty objects took 6.8 GB. Before decoding, the text's length and an
upper bound of its item count (every ``{``, ``[`` and ``,``, those inside strings included) are
checked, which costs a few passes of ``bytes.count``; the nesting depth is checked after it
(Python's decoder already stops near its recursion limit, and what it built is within the item
budget). ``NaN``, ``Infinity`` and numbers too large for a float are refused: no field snumap
writes holds one. Used for recording headers (store/reader.py) and snumap JSON topologies
(``--topology FILE.json``, the topology inside a recording).
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_BYTES = 64 << 20        # a topology of 8192 PUs is ~1.8 MB of JSON
MAX_ITEMS = 1 << 21         # ... and ~180 000 items
MAX_DEPTH = 128             # ... nested ~40 deep (two levels per tree level)


class JsonLimitError(ValueError):
    """JSON text over its budget, or not JSON snumap writes (NaN, Infinity)."""


def _constant(name: str) -> Any:
    raise JsonLimitError(f"{name} is not a number snumap writes")


def _float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise JsonLimitError(f"{text[:40]} does not fit a float")
    return v


def depth_of(v: Any, limit: int) -> int:
    """How deep containers nest in ``v`` (iterative); stops counting past ``limit``."""
    deepest = 0
    stack = [(v, 0)]
    while stack:
        x, d = stack.pop()
        deepest = max(deepest, d)
        if d > limit:
            return d
        if isinstance(x, dict):
            stack.extend((y, d + 1) for y in x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend((y, d + 1) for y in x)
    return deepest


def loads(text: str | bytes | bytearray | memoryview, *, max_bytes: int = MAX_BYTES,
          max_items: int = MAX_ITEMS, max_depth: int = MAX_DEPTH, finite: bool = True) -> Any:
    """The value of JSON ``text`` (UTF-8 when bytes), or JsonLimitError (one line) when it is
    over a budget or not JSON. ``finite=False`` keeps NaN, Infinity and 1e999 as floats (for a
    schema that drops the one field holding them)."""
    raw = bytes(text) if isinstance(text, (bytearray, memoryview)) else text
    if len(raw) > max_bytes:
        raise JsonLimitError(f"{len(raw):,} bytes of JSON (at most {max_bytes:,})")
    if isinstance(raw, bytes):
        items = raw.count(b"{") + raw.count(b"[") + raw.count(b",")
    else:
        items = raw.count("{") + raw.count("[") + raw.count(",")
    if items > max_items:
        raise JsonLimitError(f"up to {items:,} JSON items (at most {max_items:,})")
    try:
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8")
        v = json.loads(raw, parse_constant=_constant, parse_float=_float) if finite \
            else json.loads(raw)
    except RecursionError:
        raise JsonLimitError(f"JSON nested deeper than {max_depth} levels") from None
    except UnicodeDecodeError as e:
        raise JsonLimitError(f"not UTF-8 ({e.reason} at byte {e.start})") from None
    except JsonLimitError:
        raise
    except ValueError as e:     # json.JSONDecodeError, int digits over the limit
        raise JsonLimitError(f"not JSON ({str(e)[:120]})") from None
    if depth_of(v, max_depth) > max_depth:
        raise JsonLimitError(f"JSON nested deeper than {max_depth} levels")
    return v
