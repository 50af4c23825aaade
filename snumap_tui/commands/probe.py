"""`snumap probe` (placeholder until its issue lands)."""

from __future__ import annotations

import argparse

from snumap_tui.errors import SnumapError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    raise SnumapError("'snumap probe' is not built yet")
