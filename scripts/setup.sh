#!/usr/bin/env bash
# Set up snumap on a Debian machine: system packages (as root, via apt-get, only those
# missing), a virtualenv in .venv with the package installed editable, then either
#   scripts/setup.sh run  [snumap args...]   -> starts `snumap top` (or the given subcommand)
#   scripts/setup.sh test [pytest args...]   -> runs the whole test suite
# Each step says what it does on one line; apt's and pip's own output goes to .venv/setup.log
# (what failed is printed from it), apart from one line per package they install.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-run}"; shift || true
case "$mode" in run|test) ;; *) echo "usage: scripts/setup.sh run|test [args...]" >&2; exit 2 ;; esac

say() { echo "setup: $*" >&2; }
log=.venv/setup.log
mkdir -p .venv && : > "$log"
# STEP... with its output in the log, the lines matching $show (one per package) on stderr;
# on failure the log's tail, and the step's status.
logged() {
  local show="$1"; shift
  if "$@" 2>>"$log" | tee -a "$log" | { grep --line-buffered -E "$show" || true; } \
      | sed -u -e 's/ (from .*//' -e 's/^/  /' >&2; then
    return 0
  fi
  say "failed: $* (the end of $log:)"
  tail -n 25 "$log" >&2
  return 1
}

run_pkgs=(libhwloc15 hwloc-nox)
# The tests use real components: bcc and the CO-RE toolchain (clang, bpftool, libbpf), OpenMP
# (gcc's libgomp, clang's libomp) and MPI (MPICH) programs they compile, a local Slurm cluster
# (slurm-wlm + munge), a Prometheus server (prometheus + promtool), and the peers the
# benchmarks compare against (perf, stress-ng, htop, btop); python3-venv and libcap2-bin
# (setcap) for the ordinary user's install test.
test_pkgs=(libhwloc15 hwloc-nox libhwloc-dev python3-bpfcc linux-headers-amd64 linux-perf tmux procps
           util-linux iproute2 numactl stress-ng gcc clang llvm libbpf1 libbpf-dev bpftool libomp-dev
           mpich libmpich-dev slurm-wlm munge prometheus binutils
           libcap2-bin python3-venv htop btop)

need=()
pkgs=("${run_pkgs[@]}")
[ "$mode" = test ] && pkgs=("${test_pkgs[@]}")
python3 -c 'import ensurepip, venv' 2>/dev/null || pkgs+=(python3-venv)
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages: ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  say "apt-get update (the package lists)"
  logged '^(Get|Hit):' apt-get update
  say "apt-get install ${#need[@]} Debian packages: ${need[*]}"
  logged '^(Get:|Setting up )' apt-get install -y --no-install-recommends "${need[@]}"
fi

# bcc compiles its eBPF programs against the running kernel's headers. A distribution kernel
# ships them as linux-headers-$(uname -r); a kernel without them (a VM with a custom kernel)
# can use Debian's generic headers for tracepoint programs. Only done for the test suite.
# Debian splits them in two folders (arch-specific `build` and shared `source`): link both,
# the way Debian links them for its own kernel.
kmod="/lib/modules/$(uname -r)"
if [ "$mode" = test ] && [ "$(id -u)" -eq 0 ] && [ ! -e "$kmod/build" ]; then
  hdr=$(ls -d /usr/src/linux-headers-*-amd64 /usr/src/linux-headers-*-arm64 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$hdr" ]; then
    mkdir -p "$kmod"
    ln -sfn "$hdr" "$kmod/build"
    common="${hdr%-*}-common"
    [ -d "$common" ] && [ ! -e "$kmod/source" ] && ln -sfn "$common" "$kmod/source"
  fi
fi

if [ ! -x .venv/bin/python ]; then
  say "creating the virtualenv .venv ($(python3 --version))"
  python3 -m venv .venv
fi
# The run mode installs the package with every extra the README's examples use (regions:
# OpenMP/MPI regions by uprobes; parquet: export --format parquet; exporter: Prometheus;
# plots: scale report --plot), and
# gpu where the NVIDIA driver is; libhwloc is the Debian package above, so not the hwloc extra.
# The test mode adds the test tools (and every extra). tests/test_wheel.py installs the built
# wheel with the same run extras; README.md's cluster section names them too.
run_extras="regions,parquet,exporter,plots"
[ -e /proc/driver/nvidia/version ] && run_extras+=",gpu"
spec=".[${run_extras}]"; [ "$mode" = test ] && spec=".[test]"
# Editable in both modes: they share .venv, and a developer's tests must run the checkout's code.
stamp=".venv/.snumap-installed-${mode}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$spec" ] || [ pyproject.toml -nt "$stamp" ] \
    || [ setup.py -nt "$stamp" ]; then
  say "upgrading pip in .venv"
  logged '^Successfully' .venv/bin/python -m pip install --upgrade pip
  say "installing snumap (editable) with pip install -e '$spec': one line per package"
  logged '^(Collecting|Processing|Installing collected|Successfully installed)' .venv/bin/python -m pip install -e "$spec"
  echo "$spec" > "$stamp"
fi

# Extra-P (the scale study's model tool) in a venv of its own, only to check that it reads the
# files `snumap scale` writes for it: its wheel pins numpy < 2 and pulls in Qt.
if [ "$mode" = test ] && [ ! -x .venv-extrap/bin/python ]; then
  echo "setup: installing Extra-P into .venv-extrap (for one test of the files snumap writes for it)" >&2
  # Made in place (a venv's scripts name its own path: a renamed one's `extrap` would not
  # start); removed whole if the install fails, so a half venv is never taken for done.
  python3 -m venv .venv-extrap && .venv-extrap/bin/python -m pip install -q extrap >/dev/null \
    || { rm -rf .venv-extrap; echo "setup: Extra-P not installed" >&2; }
fi

case "$mode" in
  run)  say "starting .venv/bin/snumap ${*:-top}"; exec .venv/bin/snumap "${@:-top}" ;;
  test) say "running the tests: .venv/bin/python -m pytest $*"; exec .venv/bin/python -m pytest "$@" ;;
esac
