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
# All of these binaries come from `pip install .` (flwr==1.42.0 is pinned in
# pyproject.toml), so the image is plain python:3.11-slim rather than
# flwr/superlink, flwr/supernode or flwr/superexec: those carry neither torch
# nor term-fl and would need the same installs, with a second source of the
# flwr version; one image keeps ServerApp, ClientApps and CLI in lockstep.
#
# CPU torch by default; the GPU override builds with a CUDA wheel index:
#   docker build -t term-fl:latest .
#   docker build -t term-fl:cuda --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
# (CUDA wheels bring their own CUDA runtime: the host needs only the NVIDIA
# driver and the NVIDIA Container Toolkit.)

ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE}

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    FLWR_TELEMETRY_ENABLED=0 \
    FLWR_DISABLE_UPDATE_CHECK=1 \
    FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 \
    RAY_USAGE_STATS_ENABLED=0 \
    FLWR_HOME=/home/app/.flwr \
    TERM_FL_HOME=/results

# Unprivileged user; uid/gid 49999 as in Flower's own images (deploy/README.md:
# the TLS key mounted as a compose secret must be readable by this uid).
RUN groupadd --gid 49999 app \
 && useradd --uid 49999 --gid 49999 --create-home --home-dir /home/app --shell /usr/sbin/nologin app \
 && mkdir -p /results /data /home/app/.flwr \
 && chown app:app /results /home/app/.flwr

# 1. torch first, from the chosen wheel index (CPU by default): the project's
#    range torch>=2.4,<2.14 is then satisfied and pip pulls no CUDA build.
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"

WORKDIR /app

# 2. The project's runtime dependencies, read from pyproject.toml (a cached
#    layer while pyproject.toml does not change).
COPY pyproject.toml ./
RUN python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; x = p["optional-dependencies"]; print("\n".join(p["dependencies"] + x["sim"] + x["dashboard"]))' \
        > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

# 3. The project itself. /app stays as the Flower app directory that
#    `flwr run /app` bundles (configs/, server/, client/, pyproject.toml).
COPY . .
RUN pip install --no-deps . \
 && chmod 0755 deploy/submit.sh \
 && flower-superlink --version && flower-supernode --version && flwr --version \
 && for b in flower-superexec flwr-serverapp flwr-clientapp term-fl; do command -v "$b" || exit 1; done

USER app
EXPOSE 8000 8050
CMD ["term-fl", "--help"]
