"""Fitting text to a width without cutting words: a header of pieces leaves a piece out
whole; a long name is shortened at a word and says so with an ellipsis."""

from __future__ import annotations

from rich.text import Text


def fit_pieces(pieces: list[tuple[str, str]], width: int) -> Text:
    """The pieces (text, style) in order, leaving out whole those that would pass ``width``
    (the first is always there, cut if it must be)."""
    out = Text()
    for i, (text, style) in enumerate(pieces):
        if i == 0 or out.cell_len + len(text) <= width:
            out.append(text, style=style)
    out.truncate(width)
    return out


def cut_words(text: str, width: int) -> str:
    """``text`` if it fits ``width``, else cut after its last whole word that fits, with an
    ellipsis (``Intel(R) Xeon(R)…``, never ``Intel (R) Xeo``); empty when no word fits."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ""
    cut = text[:width - 1].rstrip()
    space = cut.rfind(" ")
    if space <= 0 or not cut[:space].strip(" │"):
        return ""
    return cut[:space].rstrip(" │—:-") + "…"


def truncate_words(t: Text, width: int) -> None:
    """Cut ``t`` (in place) after its last whole word within ``width``, ending in an
    ellipsis (styles kept); as it is when it fits."""
    if t.cell_len <= width:
        return
    space = t.plain.rfind(" ", 0, max(0, width - 1))
    t.truncate(space if space > 0 else max(0, width - 1))
    t.rstrip()
    t.append("…")
