#!/usr/bin/env bash
# The plug-in template apps: Flower's NumPy, scikit-learn, JAX and PyTorch
# templates with term-fl's loss helpers, each run for 3 rounds under every
# strategy in Flower's Simulation Engine (tests/plugin_apps, README there).
#
#   bash scripts/plugin_apps.sh [VENV_DIR] [PYTEST_ARGS...]
#
# VENV_DIR (default: $TERM_FL_APPS_VENV, else ~/.cache/term-fl/plugin-apps-venv)
# is a venv of its own with term-fl's sim and test extras plus the heavy
# frameworks of the `test-frameworks` extra (JAX, Flax, scikit-learn), which
# the project's .venv does not carry. It is a cache: built once, reused while
# pyproject.toml's requirements stay the same (a hash of them is kept in the
# venv), with only term-fl itself reinstalled from this checkout each time.
# Then it runs `pytest tests/plugin_apps` (the helpers' tests and the apps)
# in that venv. Exit status: pytest's, or 3 when the venv could not be built.
# CI (.ci/run) runs it under a time limit; the project's own pytest run leaves
# tests/plugin_apps to it.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-${TERM_FL_APPS_VENV:-$HOME/.cache/term-fl/plugin-apps-venv}}"
[ $# -gt 0 ] && shift
mkdir -p "$(dirname "$VENV")"
export RAY_USAGE_STATS_ENABLED=0 FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 PIP_DISABLE_PIP_VERSION_CHECK=1
start=$SECONDS

requirements_hash() {  # what the venv was built from: term-fl's requirements, extras included
  python3 -c 'import hashlib, json, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
spec = {"dependencies": project["dependencies"], "extras": project["optional-dependencies"]}
print(hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest())'
}

build() {
  rm -rf "$VENV" && python3 -m venv "$VENV" \
    && "$VENV/bin/pip" install --quiet --upgrade pip \
    && "$VENV/bin/pip" install --quiet torch==2.13.0 \
    && "$VENV/bin/pip" install --quiet -e ".[sim,test,test-frameworks]"
}

want="$(requirements_hash)"
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/term-fl-requirements.sha256" 2>/dev/null)" = "$want" ]; then
  if ! "$VENV/bin/pip" install --quiet --no-deps -e . >"$VENV.log" 2>&1; then
    echo "plugin-apps: could not install term-fl into $VENV; see $VENV.log"; exit 3
  fi
  echo "plugin-apps: reusing $VENV ($((SECONDS - start)) s)"
else
  if ! build >"$VENV.log" 2>&1; then
    echo "plugin-apps: could not build $VENV; last lines of $VENV.log:"; tail -n 25 "$VENV.log" | sed 's/^/    /'
    exit 3
  fi
  echo "$want" >"$VENV/term-fl-requirements.sha256"
  echo "plugin-apps: built $VENV ($((SECONDS - start)) s)"
fi

"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/plugin_apps "$@"
status=$?
echo "plugin-apps: pytest exit status $status ($((SECONDS - start)) s in all)"
exit "$status"
