#!/usr/bin/env bash
# Regenerate the replay screenshots in screenshots/ from the real app:
#   - replay-real*.svg, gantt-real.svg: a real recording of this machine running
#     scripts/demo_barrier.py (best tracer available; run as root for bcc/perf);
#   - replay-384.svg, gantt-384.svg: the benchmark's generated 10 M-event, 384-PU recording.
# Usage: bash scripts/replay_screenshots.sh   (after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
S=.venv/bin/snumap
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$S record -o "$tmp/real.rec" -- .venv/bin/python scripts/demo_barrier.py
$S replay "$tmp/real.rec" --force --screenshot screenshots/replay-real.svg
$S replay "$tmp/real.rec" --force --screenshot screenshots/replay-real-80x24.svg --size 80x24
$S replay "$tmp/real.rec" --force --screenshot screenshots/gantt-real.svg --size 120x24 --by thread --keys plus
$S replay "$tmp/real.rec" --force --screenshot screenshots/replay-real-tree.svg --keys 1
$S replay "$tmp/real.rec" --force --screenshot screenshots/replay-real-heatmap.svg --keys 2
$S replay "$tmp/real.rec" --force --screenshot screenshots/replay-real-help.svg --keys h
# OpenMP programs coloured by region (needs gcc -fopenmp and root for uprobes), in colour
# (COLORTERM: the headless screenshot would otherwise draw the legend's letters), recorded
# from the scratch folder so the report names ./demo_omp_imbalance, not a path here: an
# imbalanced one, and one whose regions hold thousands of critical sections, its threads
# spinning at the region's end (OMP_WAIT_POLICY=active: the closing barrier's ┄).
here=$PWD
gcc -g -O1 -fopenmp scripts/demo_omp_imbalance.c -o "$tmp/demo_omp_imbalance"
gcc -g -O1 -fopenmp scripts/demo_omp_critical.c -o "$tmp/demo_omp_critical"
(cd "$tmp" && "$here/$S" record -o omp.rec -- ./demo_omp_imbalance &&
   OMP_WAIT_POLICY=active "$here/$S" record -o critical.rec -- ./demo_omp_critical &&
   "$here/$S" report omp.rec > "$here/screenshots/replay-regions-report.txt")
COLORTERM=truecolor $S replay "$tmp/omp.rec" --force --screenshot screenshots/replay-regions.svg \
  --size 120x24 --by region
COLORTERM=truecolor $S replay "$tmp/critical.rec" --by region --size 120x24 \
  --force --screenshot screenshots/replay-regions-critical.svg
# A recording that ends inside a parallel region: the region drawn to the edge, clipped (>).
(cd "$tmp" && "$here/$S" record -o clipped.rec --duration 0.28s -- ./demo_omp_imbalance)
COLORTERM=truecolor $S replay "$tmp/clipped.rec" --by region --size 120x24 \
  --force --screenshot screenshots/replay-regions-clipped.svg
NO_COLOR=1 $S replay "$tmp/real.rec" --force --screenshot screenshots/gantt-real-no-color.svg --size 120x24
$S replay "$tmp/real.rec" --force --screenshot screenshots/gantt-real-filter.svg --size 120x24 \
  --keys "slash,d,e,m,o,enter,plus,plus,plus"
.venv/bin/python -c "import sys; sys.path.insert(0, 'bench'); from pathlib import Path; from replay import make; make(Path(sys.argv[1]), 2_000_000)" "$tmp/b384.rec"
$S replay "$tmp/b384.rec" --force --screenshot screenshots/replay-384.svg
downs=$(printf 'down,%.0s' $(seq 20))
$S replay "$tmp/b384.rec" --force --screenshot screenshots/gantt-384.svg --by thread \
  --keys "minus,plus,plus,plus,plus,plus,plus,${downs%,}"
$S replay "$tmp/b384.rec" --force --screenshot screenshots/replay-384-80x24.svg --size 80x24
echo "screenshots written to screenshots/"
