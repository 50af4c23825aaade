"""A local wheelhouse for install tests, without the network: snumap's own wheel built by pip
from the repository, and its installed dependencies packed back into wheels from this
environment's site-packages (the files each distribution's RECORD lists, with its dist-info).

Only for tests: a fresh virtualenv then installs with ``pip install --no-index --find-links``
in seconds, whatever the registry can be reached or not."""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def requirement_closure(name: str, extras: tuple[str, ...] = ()) -> list[metadata.Distribution]:
    """NAME's installed runtime dependencies (with EXTRAS of NAME), transitively; not NAME."""
    seen: dict[str, metadata.Distribution] = {}
    walked: set[tuple[str, tuple[str, ...]]] = set()
    todo: list[tuple[str, tuple[str, ...]]] = [(name, extras)]
    while todo:
        dist_name, wanted = todo.pop()
        if (canonicalize_name(dist_name), wanted) in walked:
            continue
        walked.add((canonicalize_name(dist_name), wanted))
        dist = metadata.distribution(dist_name)
        for spec in dist.requires or []:
            req = Requirement(spec)
            envs = [{"extra": e} for e in wanted] or [{"extra": ""}]
            if req.marker is not None and not any(req.marker.evaluate(env) for env in envs):
                continue
            key = canonicalize_name(req.name)
            if key == canonicalize_name(name):
                continue
            seen.setdefault(key, metadata.distribution(req.name))
            todo.append((req.name, tuple(sorted(req.extras))))
    return list(seen.values())


def _tags(dist: metadata.Distribution) -> str:
    """The compressed tag of the wheel DIST was installed from (its WHEEL file)."""
    text = dist.read_text("WHEEL") or ""
    tags = [t.strip() for t in re.findall(r"^Tag:\s*(\S+)", text, re.MULTILINE)]
    if not tags:
        return "py3-none-any"
    parts = [t.split("-") for t in tags]
    return "-".join(".".join(dict.fromkeys(p[i] for p in parts)) for i in range(3))


def repack(dist: metadata.Distribution, out: Path) -> Path:
    """DIST's installed files (those inside site-packages) as a wheel in OUT."""
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    whl = out / f"{name}-{dist.version}-{_tags(dist)}.whl"
    record_rows = []
    # Stored, not deflated: these wheels live for one test run, and deflating pyarrow's
    # ~150 MB took 11 s of a 2-CPU machine's time.
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_STORED) as z:
        record_name = None
        for f in dist.files or []:
            rel = f.as_posix()
            if rel.startswith("..") or "__pycache__" in rel:
                continue          # console scripts (pip writes them again) and bytecode
            if rel.endswith(".dist-info/RECORD"):
                record_name = rel
                continue
            src = Path(str(dist.locate_file(f)))
            if not src.is_file():
                continue
            data = src.read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record_rows.append(f"{rel},sha256={digest.decode()},{len(data)}")
            z.writestr(rel, data)
        if record_name is None:
            raise RuntimeError(f"{dist.metadata['Name']} has no RECORD")
        record_rows.append(f"{record_name},,")
        z.writestr(record_name, "\n".join(record_rows) + "\n")
    return whl


# What a checkout holds beside its sources: never part of a build.
NOT_SOURCE = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "tmp",
              "*.rec")


def snumap_wheel(out: Path, repo: Path) -> Path:
    """snumap's wheel, built by pip (no build isolation: setuptools and wheel come from the test
    extras) from a copy of REPO's sources: a build in the checkout itself would ship whatever
    an earlier build left in its build/lib (a module since removed, a package the packaging
    rule now misses)."""
    with tempfile.TemporaryDirectory(prefix="snumap-src-") as tmp:
        src = Path(tmp) / "snumap"
        shutil.copytree(repo, src, ignore=shutil.ignore_patterns(*NOT_SOURCE), symlinks=True)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                        "--no-build-isolation", "-w", str(out), str(src)], check=True,
                       capture_output=True, timeout=300)
    (whl,) = out.glob("snumap-*.whl")
    return whl


def build(out: Path, repo: Path, extras: tuple[str, ...] = ()) -> list[Path]:
    """snumap's wheel and its dependencies' (with snumap's EXTRAS), in OUT."""
    return [snumap_wheel(out, repo),
            *(repack(d, out) for d in requirement_closure("snumap", extras))]
