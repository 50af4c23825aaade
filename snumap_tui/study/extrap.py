"""A study written in Extra-P's text input format, so users can open it in Extra-P itself.

The format (Extra-P's `--text` reader) is line based:

    PARAMETER threads [input]       the model parameters (numeric, at most four)
    POINTS 1 2 4                    one value per point, or (1 10) (2 10) ... for several
    METRIC time                     the metric the following DATA lines belong to
    REGION program->main._omp_fn.0  a call path ('->' separates its levels)
    DATA 0.251 0.249                the repetitions at one point, one line per point in
                                    POINTS order, for each region

Extra-P models these files as `snumap scale report` models the study only with the options
in EXTRAP_OPTIONS (its default modeler leaves out the falling terms a strong-scaling series
needs: an Amdahl series becomes 9.0 - 3.5 * p^(1/4)); each file's first lines say so. Extra-P
4.2.5 models a one-parameter file on the mean of each point's repetitions whatever its
``--measure`` says, so a file for ``--measure median`` holds each point's median as its one
repetition: Extra-P's mean of it is snumap's median.

Extra-P's parameters are numbers: placements and frequencies are not, so a study with several
placements (or frequencies) gives one file per combination, named after it. A region must have
a value at every point; one measured at only some of them is left out and named in a comment.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from .aggregate import MEASURES, PERTURBED
from .aggregate import PROGRAM as PROGRAM_ROW

PROGRAM = "program"
#: the options Extra-P needs (``extrap --text FILE --options ...``) to model as snumap does
EXTRAP_OPTIONS = ("allow_negative_exponents=True",)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:+@<>\[\]-]")


def _callpath(row: Mapping, parents: Mapping[str, str | None]) -> str:
    region = str(row["region"])
    if region == PROGRAM_ROW:
        return PROGRAM
    chain = [region]
    seen = {region}
    parent = parents.get(region)
    while parent and parent != PROGRAM_ROW and parent not in seen:
        chain.append(parent)
        seen.add(parent)
        parent = parents.get(parent)
    return "->".join([PROGRAM] + [_clean(c) for c in reversed(chain)])


def _clean(name: str) -> str:
    # A call path is one whitespace-free token per level in the text format; '->' splits levels.
    return _UNSAFE.sub("_", name.replace("->", "_")) or "_"


def _fmt(v: float) -> str:
    return repr(float(v))


def extrap_texts(measurements: Sequence[Mapping], measure: str = "median",
                 program_untraced: bool = False) -> dict[str, str]:
    """The Extra-P text files for these measurements: {file suffix: text}; MEASURE: what one
    point of repetitions is (median: its median alone, mean: every repetition);
    PROGRAM_UNTRACED: the program's times are its untraced runs' (where `scale report` takes
    them, the recorder having perturbed it), said in the file.

    The suffix is '' when the study has one placement and one frequency, else
    '-<places>-<freq>' for each combination."""
    if program_untraced:
        measurements = [{**m, "time_s": m.get("untraced_s")} if m.get("region") == PROGRAM_ROW
                        else m for m in measurements]
    ok = [m for m in measurements
          if m.get("status", "ok") == "ok" and isinstance(m.get("time_s"), (int, float))
          and math.isfinite(float(m["time_s"])) and isinstance(m.get("threads"), int)]
    numeric_input = all(isinstance(m.get("input_value"), (int, float)) for m in ok) and \
        len({m.get("input_value") for m in ok}) > 1
    parents = {str(m["region"]): m.get("parent") for m in ok}
    groups: dict[tuple[str, str], list[Mapping]] = {}
    for m in ok:
        groups.setdefault((str(m.get("places") or ""), str(m.get("freq") or "")), []).append(m)
    several = len(groups) > 1
    out: dict[str, str] = {}
    for (places, freq), ms in sorted(groups.items()):
        suffix = ""
        if several:
            suffix = "-" + "-".join(_clean(x) for x in (places, freq) if x)
        out[suffix] = _one_file(ms, parents, numeric_input, places, freq, measure,
                                program_untraced)
    return out


def _one_file(ms: Sequence[Mapping], parents: Mapping[str, str | None], numeric_input: bool,
              places: str, freq: str, measure: str = "median",
              program_untraced: bool = False) -> str:
    def point(m: Mapping) -> tuple[float, ...]:
        p = (float(m["threads"]),)
        return p + (float(m["input_value"]),) if numeric_input else p

    points = sorted({point(m) for m in ms})
    metrics = ["time"]
    if all(isinstance(m.get("energy_j"), (int, float)) and math.isfinite(m["energy_j"])
           for m in ms):
        metrics.append("energy")
    by_region: dict[str, dict[tuple[float, ...], list[Mapping]]] = {}
    for m in ms:
        by_region.setdefault(_callpath(m, parents), {}).setdefault(point(m), []).append(m)
    if measure not in MEASURES:
        raise ValueError(f"measure {measure!r}: choose from {', '.join(MEASURES)}")
    each = ("each point's median of its repetitions (Extra-P's mean of one value)"
            if measure == "median" else "every repetition (Extra-P takes their mean)")
    lines = [f"# snumap scale study; placement {places or '-'}, frequency {freq or '-'}",
             (f"# for the models snumap scale report --measure {measure} prints: extrap --text "
              f"FILE --options {' '.join(EXTRAP_OPTIONS)}"),
             f"# (without them Extra-P fits no falling term); DATA: {each}"]
    if program_untraced:
        lines.insert(1, "# program: its untraced runs' times (the recorder slowed it by more "
                        f"than {100 * PERTURBED:.0f} %: snumap scale report models these)")
    complete = {r: v for r, v in by_region.items() if all(p in v for p in points)}
    for r in sorted(set(by_region) - set(complete)):
        lines.append(f"# left out (not measured at every point): {r}")
    lines.append("PARAMETER threads input" if numeric_input else "PARAMETER threads")
    if numeric_input:
        lines.append("POINTS " + " ".join(f"({_fmt(p[0])} {_fmt(p[1])})" for p in points))
    else:
        lines.append("POINTS " + " ".join(_fmt(p[0]) for p in points))
    key = {"time": "time_s", "energy": "energy_j"}
    for metric in metrics:
        lines.append(f"METRIC {metric}")
        for region in sorted(complete):
            lines.append(f"REGION {region}")
            for p in points:
                reps = sorted(complete[region][p], key=lambda m: m.get("repeat", 0))
                vals = [float(m[key[metric]]) for m in reps]
                if measure == "median":
                    vals = [statistics.median(vals)]
                lines.append("DATA " + " ".join(_fmt(v) for v in vals))
    return "\n".join(lines) + "\n"


def extrap_targets(path: str | Path, suffixes: Sequence[str]) -> list[Path]:
    """The files `--extrap PATH` writes: PATH itself for one combination, else PATH's stem +
    each suffix + its extension (``study.txt`` -> ``study-compact.txt``, ...)."""
    path = Path(path)
    return [path if not sfx else path.with_name(path.stem + sfx + path.suffix)
            for sfx in suffixes]


def write_extrap(path: str | Path, measurements: Sequence[Mapping], *,
                 force: bool = False, measure: str = "median",
                 program_untraced: bool = False) -> list[Path]:
    """Write the Extra-P text file(s) of a study: `path` itself, or one file per placement and
    frequency beside it (``extrap_targets``), each as every output of snumap is written
    (safeout: beside, renamed; replaced only with FORCE). Every name is checked before the
    first is written, so a refusal writes none and a rerun does the same. Returns the
    paths."""
    from ..errors import SnumapError
    from ..safeout import SafeOutput, check_output

    texts = extrap_texts(measurements, measure, program_untraced)
    if not texts:
        raise SnumapError("--extrap: no completed run to write for Extra-P")
    targets = extrap_targets(path, list(texts))
    for target in targets:
        check_output(target, force=force)
    for target, text in zip(targets, texts.values()):
        with SafeOutput(target, force=force) as sink, sink.open(text=True) as f:
            f.write(text)
    return targets
