"""A small, safe arithmetic language for metric formulas: no eval, no Python ``ast``.

Users write metrics as formulas over counters (``1000 * cache_misses / instructions``) in a TOML
file, so the formula text is untrusted input. This module tokenizes it and parses it by
recursive descent into a tiny tree of numbers, counter names, unary minus and the four
operators + - * /. Nothing else exists in the grammar, so attribute access, calls, indexing,
comparisons or keywords cannot be smuggled in: they are syntax errors with a one-line message
that names the column.

Grammar::

    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "/") unary)*
    unary  := "-" unary | "+" unary | atom
    atom   := NUMBER | NAME | "(" expr ")"

Evaluation works on numpy arrays (one value per topology object or per PU). Division where the
divisor is 0 gives NaN, and any non-finite result is NaN: a metric that cannot be computed is
"not available", never 0 and never infinity.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import numpy as np

from snumap_tui.errors import SnumapError

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>[-+*/()])
""", re.VERBOSE)

_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")

# Characters that, in a formula, can only be an attempt at something this language refuses;
# naming them makes the error say what was refused rather than "unexpected character".
_REFUSED = {
    ".": "attribute access is not allowed",
    "[": "indexing is not allowed",
    "]": "indexing is not allowed",
    ",": "calls and tuples are not allowed",
    "=": "assignment and comparison are not allowed",
    "<": "comparison is not allowed",
    ">": "comparison is not allowed",
    "!": "comparison is not allowed",
    "%": "only + - * / are allowed",
    "^": "only + - * / are allowed (no powers)",
    "@": "only + - * / are allowed",
    "&": "only + - * / are allowed",
    "|": "only + - * / are allowed",
    "~": "only + - * / are allowed",
    "'": "strings are not allowed",
    '"': "strings are not allowed",
    ":": "only + - * / are allowed",
    ";": "only one expression is allowed",
}


class ExprError(SnumapError):
    """A formula that does not parse, or names a counter that does not exist."""


# Limits that keep a formula's tree shallow enough for the recursive parser, compiler and
# evaluator (and its cost small): a real formula is a few dozen characters, a handful of
# operators and two or three levels of parentheses. Each is a one-line error, never a
# RecursionError.
MAX_CHARS = 4096          # size
MAX_OPERATORS = 256       # count of binary operators (a 1,000-term sum is refused)
MAX_DEPTH = 64            # nesting of parentheses and unary signs


def _show(text: str) -> str:
    """The formula for an error message: whole when short, its start when long."""
    return repr(text) if len(text) <= 80 else f"{text[:60]!r}... ({len(text)} characters)"


@dataclass(frozen=True)
class Token:
    kind: str   # "num", "name", "op", "end"
    text: str
    col: int    # 1-based column, for the error message


def tokenize(text: str) -> list[Token]:
    """Split a formula into tokens; refuse anything outside the grammar's alphabet."""
    if len(text) > MAX_CHARS:
        raise ExprError(f"formula too long: {len(text)} characters (at most {MAX_CHARS}): "
                        f"{_show(text)}")
    call = _CALL.search(text)
    if call is not None:   # before anything else: "f(" is the attempt that matters most
        raise ExprError(f"calls are not allowed: {call.group(1)!r} at column "
                        f"{call.start() + 1} of {_show(text)}")
    out: list[Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            ch = text[pos]
            why = _REFUSED.get(ch, "unexpected character")
            raise ExprError(f"{why}: {ch!r} at column {pos + 1} of {_show(text)}")
        kind = m.lastgroup or ""
        if kind != "ws":
            out.append(Token(kind, m.group(), pos + 1))
        pos = m.end()
    out.append(Token("end", "", len(text) + 1))
    return out


# ---- the tree ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Num:
    value: float


@dataclass(frozen=True)
class Name:
    name: str


@dataclass(frozen=True)
class Neg:
    arg: Node


@dataclass(frozen=True)
class BinOp:
    op: str
    left: Node
    right: Node


Node = Num | Name | Neg | BinOp


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = tokenize(text)
        self.i = 0
        self.depth = 0
        self.operators = 0

    def peek(self) -> Token:
        return self.toks[self.i]

    def take(self) -> Token:
        t = self.toks[self.i]
        self.i += 1
        return t

    def fail(self, tok: Token, what: str) -> ExprError:
        shown = repr(tok.text) if tok.kind != "end" else "end of formula"
        return ExprError(f"{what}: {shown} at column {tok.col} of {_show(self.text)}")

    def binary(self, op: str, left: Node, right_fn: Callable[[], Node]) -> Node:
        self.operators += 1
        if self.operators > MAX_OPERATORS:
            raise self.fail(self.peek(), f"more than {MAX_OPERATORS} operators")
        return BinOp(op, left, right_fn())

    def nested(self, tok: Token, inner: Callable[[], Node]) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(tok, f"nested more than {MAX_DEPTH} deep")
        try:
            return inner()
        finally:
            self.depth -= 1

    def parse(self) -> Node:
        if self.peek().kind == "end":
            raise ExprError("empty formula")
        node = self.expr()
        tok = self.peek()
        if tok.kind != "end":
            raise self.fail(tok, "unexpected token after the formula")
        return node

    def expr(self) -> Node:
        node = self.term()
        while self.peek().kind == "op" and self.peek().text in "+-":
            op = self.take().text
            node = self.binary(op, node, self.term)
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.peek().kind == "op" and self.peek().text in "*/":
            op = self.take().text
            if self.peek().kind == "op" and self.peek().text == op == "*":
                raise self.fail(self.peek(), "only + - * / are allowed (no powers)")
            node = self.binary(op, node, self.unary)
        return node

    def unary(self) -> Node:
        tok = self.peek()
        if tok.kind == "op" and tok.text in "+-":
            self.take()
            arg = self.nested(tok, self.unary)
            return Neg(arg) if tok.text == "-" else arg
        return self.atom()

    def atom(self) -> Node:
        tok = self.take()
        if tok.kind == "num":
            return Num(float(tok.text))
        if tok.kind == "name":
            nxt = self.peek()
            if nxt.kind == "op" and nxt.text == "(":
                raise self.fail(tok, "calls are not allowed")
            return Name(tok.text)
        if tok.kind == "op" and tok.text == "(":
            node = self.nested(tok, self.expr)
            close = self.take()
            if close.kind != "op" or close.text != ")":
                raise self.fail(close, "expected ')'")
            return node
        raise self.fail(tok, "expected a number, a counter name or '('")


def names_of(node: Node) -> frozenset[str]:
    """Every counter name a formula reads (what the metric ``needs``)."""
    if isinstance(node, Name):
        return frozenset((node.name,))
    if isinstance(node, Neg):
        return names_of(node.arg)
    if isinstance(node, BinOp):
        return names_of(node.left) | names_of(node.right)
    return frozenset()


Env = Mapping[str, "np.ndarray | float"]
Evaluator = Callable[[Env], "np.ndarray | float"]


def _safe_div(a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray | float:
    """a / b with NaN where b == 0 (division by zero is "not available", not infinity, even
    when a later operation would turn the infinity back into a finite number)."""
    r = np.true_divide(a, b)
    if isinstance(b, np.ndarray):
        if isinstance(r, np.ndarray):
            zero = b == 0
            if zero.shape != r.shape:     # a [g, 1] column of constants (``template``)
                zero = np.broadcast_to(zero, r.shape)
            r[zero] = np.nan
    elif b == 0:
        return r * np.nan
    return r


def _compile(node: Node) -> Evaluator:
    if isinstance(node, Num):
        v = node.value
        return lambda env: v
    if isinstance(node, Name):
        key = node.name
        return lambda env: env[key]
    if isinstance(node, Neg):
        f = _compile(node.arg)
        return lambda env: -f(env)
    assert isinstance(node, BinOp)
    lf, rf = _compile(node.left), _compile(node.right)
    if node.op == "+":
        return lambda env: lf(env) + rf(env)
    if node.op == "-":
        return lambda env: lf(env) - rf(env)
    if node.op == "*":
        return lambda env: lf(env) * rf(env)
    return lambda env: _safe_div(lf(env), rf(env))


def compile_tree(node: Node) -> Evaluator:
    """The evaluator of a tree (what ``parse`` attaches to an ``Expr``; ``template`` shapes
    are compiled with it too)."""
    return _compile(node)


SLOT = "#"   # slot names start with a character no formula name can have


def template(node: Node, scalars: AbstractSet[str] = frozenset()
             ) -> tuple[Node, tuple[str, ...], tuple[float, ...]]:
    """A formula's shape with its counters and numbers taken out: ``100 * steal / total``
    and ``100 * iowait / total`` both become ``#k0 * #c0 / #c1``.

    Why: derive evaluates ~35 metrics per frame, and per metric the numpy call overhead is
    most of the cost. Formulas of one shape are evaluated once on stacked rows (``#cI`` bound
    to a [g, n] array of the counters' rows, ``#kJ`` to a [g, 1] column of the numbers), so the
    cost follows the number of shapes (~8 in the built-in catalogue), not of metrics. Names in
    ``scalars`` (``dt``, ``hz``: one number per frame) stay in the shape. Returns the shape,
    the counters of the ``#c`` slots and the numbers of the ``#k`` slots, in slot order."""
    names: list[str] = []
    nums: list[float] = []

    def walk(n: Node) -> Node:
        if isinstance(n, Num):
            nums.append(n.value)
            return Name(f"{SLOT}k{len(nums) - 1}")
        if isinstance(n, Name):
            if n.name in scalars:
                return n
            names.append(n.name)
            return Name(f"{SLOT}c{len(names) - 1}")
        if isinstance(n, Neg):
            return Neg(walk(n.arg))
        return BinOp(n.op, walk(n.left), walk(n.right))

    shape = walk(node)
    return shape, tuple(names), tuple(nums)


@dataclass(frozen=True)
class Expr:
    """A parsed formula: its text, the counters it needs, and a compiled evaluator."""

    text: str
    tree: Node
    needs: frozenset[str]
    _fn: Evaluator

    def evaluate(self, env: Env, size: int | None = None) -> np.ndarray:
        """Evaluate on arrays; non-finite results become NaN. ``size`` broadcasts a formula
        that reads no array (a constant) to that length."""
        with np.errstate(all="ignore"):
            return self.evaluate_quiet(env, size)

    def evaluate_quiet(self, env: Env, size: int | None = None) -> np.ndarray:
        """``evaluate`` for a caller that already silenced numpy's floating-point warnings
        (derive evaluates every metric inside one ``np.errstate``)."""
        out = np.asarray(self._fn(env), dtype=np.float64)
        if size is not None and out.shape != (size,):
            out = np.broadcast_to(out, (size,)).copy()
        elif isinstance(self.tree, Name) or not out.flags.writeable:
            out = out.copy()   # a bare counter name returns the caller's array: never mutate it
        out[~np.isfinite(out)] = np.nan
        return out

    def __str__(self) -> str:
        return self.text


def parse(text: str, known: Iterable[str] | None = None) -> Expr:
    """Parse a formula. With ``known``, every name must be one of those counters."""
    if not isinstance(text, str):
        raise ExprError(f"a formula must be a string, not {type(text).__name__}")
    tree = _Parser(text).parse()
    needs = names_of(tree)
    if known is not None:
        known_set = set(known)
        unknown = sorted(needs - known_set)
        if unknown:
            raise ExprError(f"unknown counter {unknown[0]!r} in {_show(text)} "
                            f"(known: {', '.join(sorted(known_set))})")
    return Expr(text, tree, needs, _compile(tree))
