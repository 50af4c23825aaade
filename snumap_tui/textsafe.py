"""Text from the traced system made safe to print on a terminal.

A process names itself (``prctl(PR_SET_NAME)``, its argv), writes marker lines, and a file
names its regions, jobs, hosts and devices: any user of a shared node chooses those strings,
and snumap (often run as root) prints them. A raw ESC, BEL or C1 control in them is a command
to the viewer's terminal: set the window title (``ESC ]0;...BEL``), clear the screen
(``ESC [2J``), write the clipboard (OSC 52), fake or hide lines (CR, backspace, bidi
overrides). So every such string goes through ``safe_text`` (one field) or ``safe_lines``
(text of several lines) where it is printed, and comes out with each of those characters
spelt as a visible escape:

- C0 controls, DEL and the C1 controls (U+0080-U+009F) as ``\\xNN`` (``\\t``, ``\\n``,
  ``\\r`` by their usual names);
- the surrogates Python's ``surrogateescape`` makes of bytes that are not UTF-8
  (U+DC80-U+DCFF) as the byte they stand for, ``\\xNN``; other lone surrogates (which cannot
  even be encoded for a terminal) as ``\\udXXX``;
- bidirectional overrides and isolates, and the line and paragraph separators, as
  ``\\uXXXX``: they reorder or break what follows them on the line.

Everything else, printable Unicode included, passes unchanged, and text with nothing to escape
is returned as it is (``has_controls``). The backslash itself is not doubled: this is for
eyes, not for parsing (JSON outputs keep exact strings; ``json.dumps`` escapes controls).
Pure and stdlib only, so every layer may use it.
"""

from __future__ import annotations

import re

# Bidi embeddings/overrides/isolates and marks, Arabic letter mark, line/paragraph separator.
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f\ud800-\udfff{_BIDI}]")
_UNSAFE_KEEP_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff{_BIDI}]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    named = _NAMED.get(c)
    if named is not None:
        return named
    o = ord(c)
    if o < 0x100:
        return f"\\x{o:02x}"
    if 0xDC80 <= o <= 0xDCFF:             # surrogateescape: the byte that was not UTF-8
        return f"\\x{o - 0xDC00:02x}"
    return f"\\u{o:04x}"


def safe_text(value: object) -> str:
    """``str(value)`` with every terminal control escaped, newlines and tabs included: for
    one field (a comm, a name, a label)."""
    s = value if isinstance(value, str) else str(value)
    if not has_controls(s):
        return s
    return _UNSAFE.sub(_escape, s)


def safe_lines(text: str) -> str:
    """``text`` with every terminal control escaped except newline and tab: for a whole
    output of several lines, already laid out."""
    if _UNSAFE_KEEP_LINES.search(text) is None:
        return text
    return _UNSAFE_KEEP_LINES.sub(_escape, text)


def has_controls(text: str) -> bool:
    """Whether ``text`` holds anything ``safe_text`` would escape: ``str.isprintable`` (a C
    loop, about three times the regex's speed) first, since every character escaped here is
    unprintable to it; the regex only for what it refuses (a tab, a no-break space)."""
    return not text.isprintable() and _UNSAFE.search(text) is not None


def _blank(m: re.Match[str]) -> str:
    return "\ufffd" if "\ud800" <= m.group() <= "\udfff" else ""


def drop_controls(text: str) -> str:
    """``text`` without its terminal controls, each cell kept: the controls (which take no
    cell) are removed, a lone surrogate (one cell) becomes U+FFFD. For the last line of
    defence under a laid-out screen (the TUI's line filter), where a visible escape would
    change the widths already computed."""
    if not has_controls(text):
        return text
    return _UNSAFE.sub(_blank, text)


__all__ = ["drop_controls", "has_controls", "safe_lines", "safe_text"]
