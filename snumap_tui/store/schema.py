"""Declarative checks of decoded payloads: type, shape and range, with the path that failed.

A chunk whose CRC matches can still hold anything (a bug, a newer writer, a crafted file), so
the reader checks every decoded payload against its kind's schema (``store/kinds.py``) before
anything uses it. A violation is a ``SchemaError`` naming where it is
(``events.cpu: expected 40 values, got 39``) and the reader turns it into a damage report:
never a traceback further down (an IndexError in the interval builder, an OverflowError in a
time sum, numpy asked for 148 GiB).

The building blocks::

    Int(lo, hi)            an int (numpy integers too, never a bool) within [lo, hi]
    Number()               an int or a float
    Str(max_len)  Bool()
    Nullable(s)  OneOf(a, b, ...)
    Array(kinds, ndim, lo, hi, length, sorted)   a numpy array (kinds: numpy dtype kind letters)
    ListOf(item, length, max_len)                a list or tuple of items
    Row(a, b, ...)                               a list or tuple of exactly these items
    MapOf(key, value, max_len)                   a dict of any keys of one schema
    Fields(required, optional, same_length, drop_bad, rules)   a dict with named keys
    Anything(max_depth)                          any value a payload may hold, nested at most so

``length`` may be an int, ``COUNT`` (the chunk header's item count) or the name of an int key of
the enclosing ``Fields`` (``length="n"``, or a sibling array or list: its length);
``same_length`` names columns that must all have one
length. ``Fields(drop_bad=True)`` drops an optional key that fails (with a note) instead of
failing the whole payload: for the header, where one odd key must not cost the topology.
``none_is_absent``: a key holding None counts as missing (sources' readings); with
``drop_none`` the checked copy leaves it out too, so a reader's ``get(key, default)`` gets the
default (a merged header's node numbers).
``rules`` are (predicate, message) pairs over the checked map, for what relates two keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

COUNT = "<count>"          # ``length=COUNT``: the item count in the chunk header
I64 = (-(2 ** 63), 2 ** 63 - 1)
I32 = (-(2 ** 31), 2 ** 31 - 1)
U32 = (0, 2 ** 32 - 1)


class SchemaError(ValueError):
    """A decoded value that does not follow its chunk kind's schema."""


@dataclass
class Ctx:
    """What a check may refer to: the chunk header's count; notes of dropped keys."""

    count: int | None = None
    notes: list[str] = field(default_factory=list)


def _fail(path: str, msg: str) -> SchemaError:
    return SchemaError(f"{path}: {msg}" if path else msg)


def _what(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"a {v.ndim}-D {v.dtype} array"
    return f"a {type(v).__name__}"


class Schema:
    """One check; ``check`` returns the value it was given (a ``Fields`` with ``drop_bad``
    returns a copy without the keys it dropped), or raises SchemaError."""

    def check(self, v: Any, path: str, ctx: Ctx) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def __call__(self, v: Any, ctx: Ctx | None = None, path: str = "") -> Any:
        return self.check(v, path, ctx or Ctx())


def _resolve(length: int | str | None, ctx: Ctx, sibling: Mapping[str, Any] | None) -> int | None:
    if length is None or isinstance(length, int):
        return length
    if length == COUNT:
        return ctx.count
    if sibling is None or length not in sibling:
        return None
    ref = sibling[length]
    if isinstance(ref, (int, np.integer)) and not isinstance(ref, bool):
        return int(ref)
    if isinstance(ref, np.ndarray) and ref.ndim:
        return int(ref.shape[0])
    if isinstance(ref, (list, tuple)):
        return len(ref)
    return None


@dataclass(frozen=True)
class Int(Schema):
    lo: int | None = None
    hi: int | None = None

    def check(self, v: Any, path: str, ctx: Ctx) -> int:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise _fail(path, f"expected an integer, got {_what(v)}")
        n = int(v)
        if (self.lo is not None and n < self.lo) or (self.hi is not None and n > self.hi):
            raise _fail(path, f"{n} is outside [{self.lo}, {self.hi}]")
        return n


@dataclass(frozen=True)
class Number(Schema):
    def check(self, v: Any, path: str, ctx: Ctx) -> int | float:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)):
            raise _fail(path, f"expected a number, got {_what(v)}")
        return v.item() if isinstance(v, np.generic) else v


@dataclass(frozen=True)
class Bool(Schema):
    def check(self, v: Any, path: str, ctx: Ctx) -> bool:
        if not isinstance(v, (bool, np.bool_)):
            raise _fail(path, f"expected true or false, got {_what(v)}")
        return bool(v)


@dataclass(frozen=True)
class Str(Schema):
    max_len: int = 1 << 20

    def check(self, v: Any, path: str, ctx: Ctx) -> str:
        if not isinstance(v, str):
            raise _fail(path, f"expected a string, got {_what(v)}")
        if len(v) > self.max_len:
            raise _fail(path, f"a string of {len(v)} characters (at most {self.max_len})")
        return v


@dataclass(frozen=True)
class Nullable(Schema):
    inner: Schema

    def check(self, v: Any, path: str, ctx: Ctx) -> Any:
        return None if v is None else self.inner.check(v, path, ctx)


class OneOf(Schema):
    def __init__(self, *options: Schema) -> None:
        self.options = options

    def check(self, v: Any, path: str, ctx: Ctx) -> Any:
        errors = []
        for s in self.options:
            try:
                return s.check(v, path, ctx)
            except SchemaError as e:
                errors.append(str(e))
        raise _fail("", " or ".join(errors[:3]))


@dataclass(frozen=True)
class Array(Schema):
    """A numpy array: dtype kind in ``kinds`` ("iu" integers, "f" floats, "b" bools, ...),
    ``ndim`` dimensions (None: any), values in [lo, hi] (integers), ``length`` items along the
    first axis, ``sorted``: non-decreasing (1-D)."""

    kinds: str = "iu"
    ndim: int | None = 1
    lo: int | None = None
    hi: int | None = None
    length: int | str | None = None
    sorted: bool = False

    def check(self, v: Any, path: str, ctx: Ctx, sibling: Mapping[str, Any] | None = None
              ) -> np.ndarray:
        if not isinstance(v, np.ndarray):
            raise _fail(path, f"expected an array, got {_what(v)}")
        if v.dtype.kind not in self.kinds:
            raise _fail(path, f"expected an array of kind {self.kinds!r}, got {v.dtype}")
        if self.ndim is not None and v.ndim != self.ndim:
            raise _fail(path, f"expected {self.ndim}-D, got {v.ndim}-D shape {v.shape}")
        want = _resolve(self.length, ctx, sibling)
        if want is not None and (v.ndim == 0 or v.shape[0] != want):
            got = v.shape[0] if v.ndim else "a scalar"
            raise _fail(path, f"expected {want} values, got {got}")
        if v.size and v.dtype.kind in "iu" and (self.lo is not None or self.hi is not None):
            lo, hi = int(v.min()), int(v.max())
            if (self.lo is not None and lo < self.lo) or (self.hi is not None and hi > self.hi):
                raise _fail(path, f"values {lo}..{hi} outside [{self.lo}, {self.hi}]")
        if self.sorted and v.size > 1 and not bool(np.all(v[1:] >= v[:-1])):
            raise _fail(path, "values are not in ascending order")
        return v


@dataclass(frozen=True)
class ListOf(Schema):
    item: Schema
    length: int | str | None = None
    max_len: int | None = None

    def check(self, v: Any, path: str, ctx: Ctx, sibling: Mapping[str, Any] | None = None
              ) -> Any:
        if not isinstance(v, (list, tuple)):
            raise _fail(path, f"expected a list, got {_what(v)}")
        want = _resolve(self.length, ctx, sibling)
        if want is not None and len(v) != want:
            raise _fail(path, f"expected {want} items, got {len(v)}")
        if self.max_len is not None and len(v) > self.max_len:
            raise _fail(path, f"{len(v)} items (at most {self.max_len})")
        out = None
        for i, x in enumerate(v):
            y = self.item.check(x, f"{path}[{i}]", ctx)
            if y is not x:             # an item with a key dropped (Fields(drop_bad=True))
                out = list(v) if out is None else out
                out[i] = y
        return v if out is None else out


class Row(Schema):
    def __init__(self, *items: Schema) -> None:
        self.items = items

    def check(self, v: Any, path: str, ctx: Ctx) -> Any:
        if not isinstance(v, (list, tuple)) or len(v) != len(self.items):
            raise _fail(path, f"expected a row of {len(self.items)} items, got {_what(v)}"
                        + (f" of {len(v)}" if isinstance(v, (list, tuple)) else ""))
        for i, (s, x) in enumerate(zip(self.items, v)):
            s.check(x, f"{path}[{i}]", ctx)
        return v


@dataclass(frozen=True)
class MapOf(Schema):
    key: Schema
    value: Schema
    max_len: int | None = None

    def check(self, v: Any, path: str, ctx: Ctx) -> dict[Any, Any]:
        if not isinstance(v, dict):
            raise _fail(path, f"expected a map, got {_what(v)}")
        if self.max_len is not None and len(v) > self.max_len:
            raise _fail(path, f"{len(v)} entries (at most {self.max_len})")
        for k, x in v.items():
            self.key.check(k, f"{path} key", ctx)
            self.value.check(x, f"{path}.{k}", ctx)
        return v


@dataclass(frozen=True)
class Fields(Schema):
    """A map with named keys; other keys are kept unchecked (a newer writer may add keys,
    docs/format.md). ``drop_bad``: an optional key that fails is dropped with a note."""

    required: Mapping[str, Schema] = field(default_factory=dict)
    optional: Mapping[str, Schema] = field(default_factory=dict)
    same_length: tuple[str, ...] = ()
    drop_bad: bool = False
    none_is_absent: bool = False
    rules: tuple[tuple[Callable[[dict[Any, Any]], bool], str], ...] = ()
    drop_none: bool = False

    def check(self, v: Any, path: str, ctx: Ctx) -> dict[Any, Any]:
        if not isinstance(v, dict):
            raise _fail(path, f"expected a map, got {_what(v)}")
        out = dict(v)
        for key, s in (*self.required.items(), *self.optional.items()):
            where = f"{path}.{key}" if path else key
            if key not in v or (self.none_is_absent and v[key] is None):
                if key in self.required:
                    raise _fail(where, "missing")
                if self.drop_none and key in v and not isinstance(s, Nullable):
                    out.pop(key)
                continue
            try:
                if isinstance(s, (Array, ListOf)):
                    got = s.check(v[key], where, ctx, v)
                else:
                    got = s.check(v[key], where, ctx)
                if got is not v[key]:      # a copy without what a nested check dropped
                    out[key] = got
            except SchemaError as e:
                if key in self.required or not self.drop_bad:
                    raise
                out.pop(key, None)
                ctx.notes.append(f"{e}: ignored")
        lengths = {k: _length(out[k]) for k in self.same_length if out.get(k) is not None}
        if len(set(lengths.values())) > 1:
            desc = ", ".join(f"{k} {n}" for k, n in lengths.items())
            raise _fail(path, f"columns of different lengths ({desc})")
        for rule, msg in self.rules:
            if not rule(out):
                raise _fail(path, msg)
        return out


def _length(v: Any) -> int:
    if isinstance(v, np.ndarray):
        return int(v.shape[0]) if v.ndim else -1
    return len(v)


@dataclass(frozen=True)
class Anything(Schema):
    """Any value the payload encoding holds, nested at most ``max_depth`` deep (the codec
    bounds nesting too; JSON from a header may come from elsewhere)."""

    max_depth: int = 32

    def check(self, v: Any, path: str, ctx: Ctx) -> Any:
        stack = [(v, 0)]
        while stack:
            x, d = stack.pop()
            if d > self.max_depth:
                raise _fail(path, f"nested deeper than {self.max_depth} levels")
            if isinstance(x, dict):
                stack.extend((y, d + 1) for y in x.values())
                stack.extend((y, d + 1) for y in x)
            elif isinstance(x, (list, tuple)):
                stack.extend((y, d + 1) for y in x)
        return v
