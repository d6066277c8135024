#!/usr/bin/env bash
# The cohort executor's GPU check (issue 16) in one command, for a machine that
# has Python with a CUDA build of torch and numpy but none of term-fl's other
# dependencies and no package index:
#
#   bash scripts/gpu_cohort_check.sh
#
# 1. installs the wheels carried in .whl/ (git-ignored; how to fill it:
#    benchmarks/README.md, "GPU") into a temporary folder with
#    `pip install --no-index --no-deps --target` (or unzips them where the
#    Python has no pip) and puts it on PYTHONPATH before the repository;
# 2. runs the CUDA equivalence tests:
#    pytest tests/test_cohort.py tests/test_cohort_engine.py -k cuda
# 3. runs the cohort benchmark group on the GPU (the Synthetic table; the
#    cohort on the CPU beside it) and prints its table:
#    python -m benchmarks --only cohort --size full --device cuda
#
# Results go to $OUT (default ./artifacts): cohort-cuda.json (every number,
# the machine, the table as markdown), pytest-cuda.txt, machine.txt.
# Exit status: 0 when both steps ran and passed, else the first failing
# step's status. Variables: PYTHON (default python3), WHL_DIR (default .whl),
# DEVICE (default cuda; `DEVICE=cpu SIZE=small` rehearses the script where
# there is no GPU), SIZE (default full), TEST_TIMEOUT_S (150), BENCH_TIMEOUT_S (390): together under
# the 10 minutes a remote command may take.
set -uo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
WHL_DIR=${WHL_DIR:-.whl}
DEVICE=${DEVICE:-cuda}
SIZE=${SIZE:-full}
OUT=${OUT:-$PWD/artifacts}
mkdir -p "$OUT"
START=$(date +%s)
step() { echo; echo "=== $* ($(( $(date +%s) - START )) s)"; }

shopt -s nullglob
wheels=("$WHL_DIR"/*.whl)
if [ ${#wheels[@]} -eq 0 ]; then
  echo "no wheels in $WHL_DIR: fill it as benchmarks/README.md ('GPU') says, and carry it" >&2
  exit 2
fi
SITE=$(mktemp -d "${TMPDIR:-/tmp}/term-fl-site.XXXXXX")
trap 'rm -rf "$SITE"' EXIT

step "installing ${#wheels[@]} wheels from $WHL_DIR into $SITE"
if ! { "$PYTHON" -m pip --version >/dev/null 2>&1 \
       && "$PYTHON" -m pip install --quiet --no-index --no-deps --no-compile --disable-pip-version-check \
            --target "$SITE" "${wheels[@]}"; }; then
  echo "no pip, or pip failed: unzipping the wheels instead (a wheel is a zip of what goes into site-packages)"
  rm -rf "$SITE" && mkdir -p "$SITE"
  "$PYTHON" - "$SITE" "${wheels[@]}" <<'EOF' || { echo "unzipping the wheels failed" >&2; exit 3; }
import sys, zipfile
for wheel in sys.argv[2:]:
    zipfile.ZipFile(wheel).extractall(sys.argv[1])
EOF
fi
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export RAY_USAGE_STATS_ENABLED=0 FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 PYTHONDONTWRITEBYTECODE=1

step "machine"
{
  date -u
  uptime
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PYTHON" - <<'EOF'
import platform, numpy, torch, flwr, pydantic
cuda = torch.cuda.is_available()
print(f"python {platform.python_version()}; torch {torch.__version__} (CUDA {torch.version.cuda}); "
      f"numpy {numpy.__version__}; flwr {flwr.__version__}; pydantic {pydantic.__version__}")
print("cuda device:", torch.cuda.get_device_name(0) if cuda else None, "; CPU threads:", torch.get_num_threads())
EOF
} 2>&1 | tee "$OUT/machine.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "the imports failed" >&2; exit 4; }

step "CUDA equivalence tests (tests/test_cohort.py tests/test_cohort_engine.py -k cuda)"
timeout "${TEST_TIMEOUT_S:-150}" "$PYTHON" -m pytest -q -rs -p no:cacheprovider \
  tests/test_cohort.py tests/test_cohort_engine.py -k cuda 2>&1 | tee "$OUT/pytest-cuda.txt"
tests_rc=${PIPESTATUS[0]}

step "cohort benchmark group (--size $SIZE --device $DEVICE)"
timeout "${BENCH_TIMEOUT_S:-390}" "$PYTHON" -m benchmarks --only cohort --size "$SIZE" --device "$DEVICE" \
  --out "$OUT/cohort-cuda.json"
bench_rc=$?
if [ -f "$OUT/cohort-cuda.json" ]; then
  "$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["table_markdown"])' "$OUT/cohort-cuda.json"
fi

step "done: tests exit status $tests_rc, benchmark exit status $bench_rc (124: timed out)"
[ "$tests_rc" -ne 0 ] && exit "$tests_rc"
exit "$bench_rc"
