# term-fl image for Flower 1.42's Deployment Engine: one image for every role
# of docker-compose.yml (see deploy/README.md).
#
#   superlink   flower-superlink; with --isolation subprocess it starts
#               flower-superexec, which runs the ServerApp (flwr-serverapp)
#               in this container: needs torch, term-fl and the app source.
#   supernode   flower-supernode; its flower-superexec runs each ClientApp
#               (flwr-clientapp) in this container: needs torch and term-fl.
#   submit      flwr run /app ... (builds the FAB from /app, the project source).
#   dashboard   term-fl dashboard.
#
# All of these binaries come from `pip install .` (flwr from the range in
# pyproject.toml) into the virtual environment /opt/venv, so the image is
# plain python:3.11-slim rather than flwr/superlink, flwr/supernode or
# flwr/superexec: those carry neither torch nor term-fl and would need the
# same installs, with a second source of the flwr version; one image keeps
# ServerApp, ClientApps and CLI in lockstep.
#
# Needs BuildKit (the default builder since Docker 23; DOCKER_BUILDKIT=1 on
# Docker 20.10-22): `RUN --mount` brings the optional build inputs and pip's
# cache in without leaving them in a layer. There is no `# syntax=` line on
# purpose: the built-in Dockerfile frontend has RUN --mount, and a syntax line
# would pull a frontend image from a registry.
#
# CPU torch by default; the GPU override builds with a CUDA wheel index:
#   docker build -t term-fl:latest .
#   docker build -t term-fl:cuda --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
# (CUDA wheels bring their own CUDA runtime: the host needs only the NVIDIA
# driver and the NVIDIA Container Toolkit.)
#
# Machines without the image registry or the wheel index (deploy/e2e.sh
# handles both): PYTHON_IMAGE names another Debian/Python 3.11 base (e2e.sh
# builds one from Debian packages), and deploy/build-inputs/ may hold
#   ca-certificates.crt   the CA bundle pip uses (a proxy that intercepts TLS)
#   torch-<version>*.whl  the torch wheel, installed instead of the index's
# (deploy/build-inputs/README.md; its contents are not committed, and nothing
# of it is left in the image).

ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE}

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_DEFAULT_TIMEOUT=120 \
    FLWR_TELEMETRY_ENABLED=0 \
    FLWR_DISABLE_UPDATE_CHECK=1 \
    FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 \
    RAY_USAGE_STATS_ENABLED=0 \
    FLWR_HOME=/home/app/.flwr \
    TERM_FL_HOME=/results \
    PATH=/opt/venv/bin:$PATH

# Unprivileged user; uid/gid 49999 as in Flower's own images (deploy/README.md:
# the TLS key mounted as a compose secret must be readable by this uid).
RUN groupadd --gid 49999 app \
 && useradd --uid 49999 --gid 49999 --create-home --home-dir /home/app --shell /usr/sbin/nologin app \
 && mkdir -p /results /data /home/app/.flwr \
 && chown app:app /results /home/app/.flwr \
 && python3 -m venv /opt/venv

# 1. torch first: the build input's wheel when there is one, else the chosen
#    wheel index (CPU by default); the project's range torch>=2.4,<2.14 is then
#    satisfied and pip pulls no CUDA build.
RUN --mount=type=bind,source=deploy/build-inputs,target=/tmp/inputs \
    --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    set -eu; \
    if [ -f /tmp/inputs/ca-certificates.crt ]; then export PIP_CERT=/tmp/inputs/ca-certificates.crt; fi; \
    wheel="$(find /tmp/inputs/ -maxdepth 1 -name "torch-${TORCH_VERSION}[+-]*.whl" | head -n 1)"; \
    if [ -n "$wheel" ]; then pip install "$wheel"; \
    else pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"; fi

# 2. The project's runtime dependencies with the extras sim and dashboard, read
#    from pyproject.toml (a cached layer while pyproject.toml does not change).
WORKDIR /app
COPY pyproject.toml ./
RUN --mount=type=bind,source=deploy/build-inputs,target=/tmp/inputs \
    --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    set -eu; \
    if [ -f /tmp/inputs/ca-certificates.crt ]; then export PIP_CERT=/tmp/inputs/ca-certificates.crt; fi; \
    python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; x = p["optional-dependencies"]; print("\n".join(p["dependencies"] + x["sim"] + x["dashboard"]))' \
        > /tmp/requirements.txt; \
    pip install -r /tmp/requirements.txt; \
    rm /tmp/requirements.txt

# 3. The project itself. /app is the Flower app directory that `flwr run /app`
#    bundles (pyproject.toml, client/, server/, configs/); term_fl is installed
#    into the environment (setuptools came with torch: no build isolation).
COPY README.md /app/README.md
COPY term_fl /app/term_fl
COPY client /app/client
COPY server /app/server
COPY configs /app/configs
COPY deploy/submit.sh deploy/check_data.py deploy/supernode_keys.py /app/deploy/
RUN pip install --no-cache-dir --no-deps --no-build-isolation /app \
 && rm -rf /app/build /app/*.egg-info \
 && chmod 0755 /app/deploy/submit.sh \
 && flower-superlink --version && flower-supernode --version && flwr --version \
 && for b in flower-superexec flwr-serverapp flwr-clientapp term-fl; do command -v "$b" || exit 1; done

ENV PIP_NO_CACHE_DIR=1
USER app
EXPOSE 8000 8050
CMD ["term-fl", "--help"]
