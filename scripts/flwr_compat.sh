#!/usr/bin/env bash
# Flower compatibility check: term-fl against the newest pre-release of
# Flower's next version, in a venv of its own (the project's .venv is not
# touched).
#
#   bash scripts/flwr_compat.sh [VENV_DIR]     # default: /tmp/term-fl-flwr-next
#
# Installs torch==2.13.0 (the CPU build), the newest `flwr-nightly[simulation]`
# pre-release, term-fl's other dependencies from pyproject.toml (the
# test-frameworks extra included: JAX, Flax, scikit-learn) and term-fl itself
# without its flwr requirement (flwr-nightly is a distribution of its own);
# then runs the strategy tests, a 2-round in-process run of the default
# scenario, the plug-in template apps (tests/plugin_apps: Flower's NumPy,
# scikit-learn, JAX and PyTorch templates under every strategy, in the
# Simulation Engine) and (reported, not counted) a 2-round run of term-fl's
# own Simulation Engine path. Prints one line per step and a
# closing 'flwr-compat: ...' line. Exit status: 0 when every step passed, 1
# when a step failed, 3 when Flower's pre-release could not be installed.
# CI (.ci/run) runs it as a report that never fails the build (README, "Flower
# versions").
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-/tmp/term-fl-flwr-next}"
LOG="$VENV.log"
# A pre-release in the specifier lets pip take pre-releases of flwr-nightly alone: `--pre` would also
# take those of its dependencies (grpcio-health-checking 1.82.0rc2 needs protobuf 7, which Flower caps
# below 7, and the SuperLink then fails to start).
NEXT="${TERM_FL_FLWR_NEXT:-flwr-nightly[simulation]>=0.0.0.dev0}"
export RAY_USAGE_STATS_ENABLED=0 FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 PIP_DISABLE_PIP_VERSION_CHECK=1
: >"$LOG"

step() {  # step NAME COMMAND...: run, log, print PASS/FAIL with the time taken
  local name="$1" start=$SECONDS; shift
  if "$@" >>"$LOG" 2>&1; then
    echo "flwr-compat: $name: PASS ($((SECONDS - start)) s)"
  else
    echo "flwr-compat: $name: FAIL ($((SECONDS - start)) s); last lines of $LOG:"
    tail -n 25 "$LOG" | sed 's/^/    /'
    return 1
  fi
}

other_requirements() {  # term-fl's dependencies and those of its extras, less flwr
  python3 - <<'EOF'
import tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = deps["optional-dependencies"]
reqs = deps["dependencies"] + extras["sim"] + extras["dashboard"] + extras["test"] + extras["test-frameworks"]
print("\n".join(r for r in reqs if not r.replace("[", " ").split()[0].startswith(("flwr", "term-fl"))))
EOF
}

install() {
  rm -rf "$VENV" && python3 -m venv "$VENV" \
    && "$VENV/bin/pip" install --quiet --upgrade pip \
    && "$VENV/bin/pip" install --quiet torch==2.13.0 \
    && "$VENV/bin/pip" install --quiet --upgrade "$NEXT" \
    && other_requirements >"$VENV/requirements.txt" \
    && "$VENV/bin/pip" install --quiet -r "$VENV/requirements.txt" \
    && "$VENV/bin/pip" install --quiet --no-deps -e .
}

if ! step "install $NEXT" install; then
  echo "flwr-compat: could not install $NEXT; nothing checked"
  exit 3
fi
FLWR="$("$VENV/bin/python" -c 'import flwr; print(flwr.__version__)' 2>/dev/null)"
echo "flwr-compat: Flower $FLWR (pyproject.toml: $(grep -o '"flwr\[simulation\][^"]*"' pyproject.toml))"

OUT="$(mktemp -d /tmp/tfl-compat-XXXXXX)"
failed=0
step "strategy tests" "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/test_strategies.py tests/test_registry.py || failed=1
step "2-round in-process run" "$VENV/bin/term-fl" run --engine inprocess --rounds 2 \
  --db "$OUT/results.db" --out "$OUT/run" || failed=1
step "plug-in template apps" "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/plugin_apps || failed=1
step "2-round Simulation Engine run (information only)" "$VENV/bin/term-fl" run --engine flower --rounds 2 \
  --db "$OUT/results.db" --out "$OUT/run-flower" || true
rm -rf "$OUT"

if [ "$failed" = 0 ]; then
  echo "flwr-compat: term-fl works with Flower $FLWR (strategy tests, 2-round in-process run, plug-in template apps)"
else
  echo "flwr-compat: term-fl does NOT work with Flower $FLWR yet; see above and $LOG"
fi
exit "$failed"
