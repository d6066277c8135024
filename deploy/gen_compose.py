#!/usr/bin/env python3
"""Generate the Docker Compose files of term-fl's Deployment Engine scenarios.

One Python source for every compose file, so the profiles cannot drift apart:

- ``docker-compose.yml``         the server host: profiles ``vehicle-sensor`` (23 SuperNodes,
                                 real SensIT data), ``fairness`` (N SuperNodes, synthetic data)
                                 and ``server`` (no SuperNodes: they join from site hosts); TLS
                                 and SuperNode authentication;
- ``docker-compose.site.yml``    a site host: SuperNodes only, joining a SuperLink elsewhere by
                                 address and port (``TERM_FL_SUPERLINK=host:port``);
- ``docker-compose.gpu.yml``     override: CUDA torch image + NVIDIA GPUs for the SuperNodes;
- ``docker-compose.noauth.yml``  override: SuperNode authentication off (as before 0.3);
- ``docker-compose.dev.yml``     override: plaintext (``--insecure``, no authentication),
                                 development only.

The committed files must equal this script's output (tests/test_compose.py
checks it). Regenerate after changing anything here:

    python deploy/gen_compose.py                          # defaults: 10 fairness SuperNodes, a 10-device site
    python deploy/gen_compose.py --fairness-supernodes 20 # another fairness federation size
    python deploy/gen_compose.py --site-devices 20 --site-partitions 10-19 --output-dir other/
    python deploy/gen_compose.py --check                  # exit 1 if a file is stale

Topology (Flower 1.42, checked against the installed binaries' --help):

- ``superlink``: ``flower-superlink`` serves the Fleet, Control and Runtime
  APIs on ONE port (8000), with ``--enable-supernode-auth``. With the default
  ``--isolation subprocess`` it starts its own ``flower-superexec`` that runs
  the ServerApp (``flwr-serverapp``) inside the same container: the results
  volume and the vehicle data are mounted there.
- ``register-supernodes``: registers every public key in the keys folder
  (``deploy/supernode_keys.py register``) before any SuperNode starts.
- one ``term-fl-supernode`` container per device (``flower-supernode`` whose
  ClientApp processes fork from one that imported torch once; ``--node-config
  "partition-id=i num-partitions=N"``, its own private key). Each container
  has its own loopback, so the default runtime port (127.0.0.1:9094) never
  collides.
- ``submit-<profile>``: one-shot ``flwr run /app compose --stream`` with the
  run config; it waits for the SuperLink and writes ``$FLWR_HOME/config.toml``
  (deploy/submit.sh).
- ``dashboard``: ``term-fl dashboard`` on the results volume; it asks for its
  access token (``TERM_FL_DASHBOARD_TOKEN``, or the one it prints).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compose_yaml import Alias, Anchor, Comment, Tagged, to_yaml  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------
# The single source of truth
# ---------------------------------------------------------------------------

VEHICLE_SUPERNODES = 23  # the SensIT slice has exactly 23 devices
DEFAULT_FAIRNESS_SUPERNODES = 10
DEFAULT_SITE_DEVICES = 10
SUPERLINK_HOST = "superlink"  # service name = DNS name; in the server certificate's SAN
SUPERLINK_PORT = 8000  # Flower 1.42: one port for Fleet, Control and Runtime APIs
REMOTE_SUPERLINK = "${TERM_FL_SUPERLINK:?set TERM_FL_SUPERLINK=HOST:PORT of the SuperLink (deploy/README.md)}"
CONNECTION = "compose"  # [superlink.compose] in the submitter's $FLWR_HOME/config.toml
RESULTS_DIR = "/results"
DATA_DIR = "/data"
VEHICLE_FILE = "vehicle_fewshot.json"
APP_DIR = "/app"  # where the Dockerfile puts the project (the Flower app)
SECRETS_DIR = "/run/secrets"
KEYS_MOUNT = "/keys"
NODE_KEY = "supernode.key"  # each SuperNode's private key, at /run/secrets/supernode.key
DASHBOARD_PORT = 8050
REGISTER_SERVICE = "register-supernodes"
CHECK_DATA_SERVICE = "check-vehicle-data"
SERVER_PROFILE = "server"

# TLS material made by deploy/make-certs.sh and SuperNode keys made by deploy/supernode_keys.py
# (compose secrets, mounted at /run/secrets/NAME); TERM_FL_CERTS_DIR / TERM_FL_KEYS_DIR point elsewhere
CERTS_DIR = "${TERM_FL_CERTS_DIR:-./deploy/certs}"
KEYS_DIR = "${TERM_FL_KEYS_DIR:-./deploy/keys}"
SECRETS = {name: f"{CERTS_DIR}/{name}" for name in ("ca.crt", "server.pem", "server.key")}

FLWR_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "TERM_FL_VEHICLE_DATA": f"{DATA_DIR}/{VEHICLE_FILE}",
}
# What bounds a deployed round (docs/scaling-out.md): ClientApp processes forked from one that imported
# torch (TERM_FL_PREFORK=0: a fresh process per message), Flower's SuperExec asking its SuperNode for a
# message every 0.2 s (Flower's default 1 s), the ServerApp asking for replies every 0.2 s (Flower's 3 s)
SUPERNODE_ENV = {
    "TERM_FL_PREFORK": "${TERM_FL_PREFORK:-1}",
    "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "${TERM_FL_SUPEREXEC_POLL_S:-0.2}",
    "TERM_FL_READY_FILE": "/tmp/term-fl-supernode.ready",
}
# A SuperNode is healthy once term-fl-supernode has imported torch (or at once with TERM_FL_PREFORK=0, when
# it is flower-supernode itself); submitters wait for it, so a ServerApp never starts amid those imports.
# Lenient: only compose's wait reads it, and a probe can take seconds while 23 SuperNodes import torch at once
# (3 probes of 3 s marked early SuperNodes unhealthy then, and compose gave up on the run)
SUPERNODE_HEALTH = {
    "test": ["CMD-SHELL", 'test -f /tmp/term-fl-supernode.ready || [ "$$TERM_FL_PREFORK" = 0 ]'],
    "interval": "10s", "timeout": "30s", "retries": 30, "start_period": "600s",
}
SUPERLINK_ENV = {"TERM_FL_REPLY_POLL_S": "${TERM_FL_REPLY_POLL_S:-0.2}"}

IMAGE = "${TERM_FL_IMAGE:-term-fl:latest}"
GPU_IMAGE = "${TERM_FL_GPU_IMAGE:-term-fl:cuda}"
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
CUDA_TORCH_INDEX = "${TERM_FL_TORCH_INDEX_URL:-https://download.pytorch.org/whl/cu128}"
# The deployment's own data folder (data/ in the repository, README.md tracked, contents
# ignored by git); TERM_FL_DATA_DIR points elsewhere. Read-only in the containers.
DATA_MOUNT = f"${{TERM_FL_DATA_DIR:-./data}}:{DATA_DIR}:ro"
# Size of a run: run.rounds defaults to the profile's short run; TERM_FL_ROUNDS sets
# another count (the scenarios' full size: 100), TERM_FL_OVERRIDES appends any
# dotted overrides (they win: the last value of a key counts).
ROUNDS_VAR = "TERM_FL_ROUNDS"
OVERRIDES_VAR = "TERM_FL_OVERRIDES"


@dataclass(frozen=True)
class Profile:
    """A compose profile: one federation of SuperNodes (here or on site hosts) and its submitter."""

    name: str  # compose profile name
    node_prefix: str  # SuperNode service names: <node_prefix>-<partition-id>
    num_supernodes: int  # SuperNodes this file starts (0: they join from site hosts)
    scenario: str  # scenario file, relative to the app directory ("" = embedded default)
    overrides: str  # dotted overrides passed to the ServerApp
    vehicle_data: bool  # mount the vehicle data into the SuperNodes
    default_rounds: int  # run.rounds unless TERM_FL_ROUNDS is set: a run that finishes in minutes

    @property
    def submit_service(self) -> str:
        return f"submit-{self.name}"

    def supernode_services(self) -> list[str]:
        return [f"{self.node_prefix}-{i}" for i in range(self.num_supernodes)]

    @property
    def run_overrides(self) -> str:
        """The overrides the ServerApp gets: the profile's, the round count, the user's."""
        return f"{self.overrides} run.rounds=${{{ROUNDS_VAR}:-{self.default_rounds}}} ${{{OVERRIDES_VAR}:-}}"


def _fairness_overrides(n: int, node_timeout: int) -> str:
    # the synthetic federation must have exactly one device per SuperNode; every round evaluated (the file
    # evaluates every 10th of its 800 rounds) and the sequential executor (the file's cohort executor is the
    # in-process engine's)
    return (f"data.num_devices={n} run.clients_per_round={max(1, n // 2)} run.node_timeout={node_timeout} "
            "run.evaluate_every=1 run.executor=sequential")


def profiles(fairness_supernodes: int = DEFAULT_FAIRNESS_SUPERNODES,
             site_devices: int = DEFAULT_SITE_DEVICES) -> list[Profile]:
    """The three profiles; the fairness federation has ``fairness_supernodes`` devices, the sites' ``site_devices``."""
    if fairness_supernodes < 2 or site_devices < 2:
        raise ValueError("the fairness profile and the site federation need at least 2 SuperNodes")
    return [
        Profile(name="vehicle-sensor", node_prefix="vehicle-supernode", num_supernodes=VEHICLE_SUPERNODES,
                scenario="configs/vehicle-sensor.toml",
                # 23 containers import torch at once: give discovery more time than the default
                overrides="run.node_timeout=300", vehicle_data=True, default_rounds=10),
        Profile(name="fairness", node_prefix="fairness-supernode", num_supernodes=fairness_supernodes,
                scenario="configs/fairness.toml", overrides=_fairness_overrides(fairness_supernodes, 300),
                vehicle_data=False, default_rounds=10),
        # the SuperNodes join from site hosts (docker-compose.site.yml), maybe long after the server started
        Profile(name=SERVER_PROFILE, node_prefix="site-supernode", num_supernodes=0,
                scenario="configs/fairness.toml", overrides=_fairness_overrides(site_devices, 900),
                vehicle_data=False, default_rounds=10),
    ]


def site_partitions(text: str, devices: int) -> list[int]:
    """``"A-B"`` (or ``"A"``) -> [A .. B], checked against the federation's ``devices``."""
    first, _, last = text.partition("-")
    try:
        lo, hi = int(first), int(last or first)
    except ValueError:
        raise ValueError(f"--site-partitions {text!r}: give FIRST-LAST, e.g. 0-9") from None
    if not 0 <= lo <= hi < devices:
        raise ValueError(f"--site-partitions {text!r}: partitions run from 0 to {devices - 1} (--site-devices {devices})")
    return list(range(lo, hi + 1))


def run_config(profile: Profile, *, overrides: str | None = None, results_dir: str = RESULTS_DIR) -> str:
    """The value of ``flwr run --run-config`` (keys of [tool.flwr.app.config])."""
    ov = profile.run_overrides if overrides is None else overrides
    for value in (profile.scenario, ov, results_dir):
        if '"' in value:
            raise ValueError(f"run-config value {value!r} must not contain a double quote")
    return f'scenario="{profile.scenario}" overrides="{ov}" results-dir="{results_dir}"'


def supernode_entrypoint(*, superlink: str = f"{SUPERLINK_HOST}:{SUPERLINK_PORT}", tls: bool = True,
                         auth: bool = True) -> list[str]:
    """What every SuperNode runs; the per-node ``--node-config`` comes as the service's command."""
    cmd = ["term-fl-supernode", "--superlink", superlink]
    cmd += ["--root-certificates", f"{SECRETS_DIR}/ca.crt"] if tls else ["--insecure"]
    if auth:
        cmd += ["--auth-supernode-private-key", f"{SECRETS_DIR}/{NODE_KEY}"]
    return cmd


def supernode_args(partition_id: int, num_partitions: int) -> list[str]:
    return ["--node-config", f"partition-id={partition_id} num-partitions={num_partitions}"]


def superlink_command(*, tls: bool = True, auth: bool = True) -> list[str]:
    cmd = ["flower-superlink", "--host", "0.0.0.0", "--port", str(SUPERLINK_PORT)]
    if tls:
        cmd += [
            "--ssl-ca-certfile", f"{SECRETS_DIR}/ca.crt",
            "--ssl-certfile", f"{SECRETS_DIR}/server.pem",
            "--ssl-keyfile", f"{SECRETS_DIR}/server.key",
        ]
    else:
        cmd += ["--insecure"]
    if auth:
        cmd += ["--enable-supernode-auth"]
    cmd += ["--disable-runtime-dependency-installation"]
    return cmd


def node_secrets(service: str, *, auth: bool = True) -> list[Any]:
    """A SuperNode's secrets: the CA, and its own private key mounted as /run/secrets/supernode.key."""
    return ["ca.crt", {"source": f"{service}.key", "target": NODE_KEY}] if auth else ["ca.crt"]


def key_secrets(services: list[str]) -> dict[str, Any]:
    """Top-level secrets: one private key file per SuperNode service, named after it."""
    return {f"{name}.key": {"file": f"{KEYS_DIR}/{name}"} for name in services}


def check_data_command(profile: Profile) -> list[str]:
    """The vehicle profile's data check: the scenario's own file and sha256 checks, a clear message."""
    return ["python", f"{APP_DIR}/deploy/check_data.py", profile.scenario, profile.run_overrides]


def submit_command(profile: Profile) -> list[str]:
    return [
        f"{APP_DIR}/deploy/submit.sh",
        "flwr", "run", APP_DIR, CONNECTION, "--stream",
        "--run-config", run_config(profile),
    ]


def register_command() -> list[str]:
    return [f"{APP_DIR}/deploy/submit.sh", "python", f"{APP_DIR}/deploy/supernode_keys.py", "register",
            KEYS_MOUNT, CONNECTION]


# ---------------------------------------------------------------------------
# Building the documents
# ---------------------------------------------------------------------------


def _image_anchors() -> tuple[Anchor, Anchor, Anchor]:
    """The environment, the image (with the environment) and the SuperNodes' environment."""
    env = Anchor("flwr-env", dict(FLWR_ENV))
    image = Anchor("term-fl-image", {
        "image": IMAGE,
        "build": {"context": ".", "dockerfile": "Dockerfile", "args": {"TORCH_INDEX_URL": CPU_TORCH_INDEX}},
        "environment": Alias(env),
        "init": True,
    })
    node_env = Anchor("supernode-env", {"<<": Alias(env), **SUPERNODE_ENV})
    return env, image, node_env


def _connection_env(env: Anchor) -> dict[str, Any]:
    """The environment of a one-shot that talks to the SuperLink through deploy/submit.sh."""
    return {
        "<<": Alias(env),
        "TERM_FL_SUPERLINK_ADDRESS": f"{SUPERLINK_HOST}:{SUPERLINK_PORT}",
        "TERM_FL_CONNECTION": CONNECTION,
        "TERM_FL_ROOT_CERTIFICATES": f"{SECRETS_DIR}/ca.crt",
    }


def _server_services(env: Anchor, image: Anchor, all_profiles: list[str]) -> dict[Any, Any]:
    """The SuperLink, the registration of SuperNode keys and the dashboard: every profile's."""
    return {
        "superlink": {
            "<<": Alias(image),
            "profiles": all_profiles,
            "command": superlink_command(),
            "environment": {"<<": Alias(env), **SUPERLINK_ENV},
            "secrets": list(SECRETS),
            "ports": [f"${{TERM_FL_SUPERLINK_PUBLISH:-127.0.0.1:{SUPERLINK_PORT}}}:{SUPERLINK_PORT}"],
            "volumes": [f"results:{RESULTS_DIR}", DATA_MOUNT],
            "healthcheck": {
                "test": ["CMD", "python", "-c",
                         f"import socket; socket.create_connection(('127.0.0.1', {SUPERLINK_PORT}), 2).close()"],
                "interval": "5s", "timeout": "3s", "retries": 24, "start_period": "10s",
            },
        },
        Comment("registers every public key (*.pub) in the keys folder with the SuperLink (SuperNode"): None,
        Comment("authentication); SuperNodes here start after it, site SuperNodes retry until it ran"): None,
        REGISTER_SERVICE: {
            "<<": Alias(image),
            "profiles": all_profiles,
            "command": register_command(),
            "environment": _connection_env(env),
            "secrets": ["ca.crt"],
            "volumes": [f"{KEYS_DIR}:{KEYS_MOUNT}:ro"],
            "depends_on": {"superlink": {"condition": "service_healthy"}},
            "restart": "no",
        },
        "dashboard": {
            "<<": Alias(image),
            "profiles": all_profiles,
            Comment("answers only the Host: names it knows (DNS-rebinding guard): loopback, IP addresses,"): None,
            Comment("its service name and TERM_FL_DASHBOARD_HOSTNAME (comma-separated names it is published"): None,
            Comment("under); and asks for its access token: TERM_FL_DASHBOARD_TOKEN, or the one it prints"): None,
            "command": ["term-fl", "dashboard", "--db", f"{RESULTS_DIR}/results.db",
                        "--host", "0.0.0.0", "--port", str(DASHBOARD_PORT),
                        "--allowed-host", "dashboard", "--allowed-host", "${TERM_FL_DASHBOARD_HOSTNAME:-}"],
            "environment": {"<<": Alias(env), "TERM_FL_DASHBOARD_TOKEN": "${TERM_FL_DASHBOARD_TOKEN:-}"},
            "ports": [f"${{TERM_FL_DASHBOARD_PUBLISH:-127.0.0.1:{DASHBOARD_PORT}}}:{DASHBOARD_PORT}"],
            Comment("read-write on purpose: results.db is SQLite in WAL mode, and a reader on a"): None,
            Comment("read-only mount cannot open it once the writer has closed it (\"unable to open"): None,
            Comment("database file\"); the dashboard itself opens the database read-only."): None,
            "volumes": [f"results:{RESULTS_DIR}"],
            "restart": "on-failure",
        },
    }


def _profile_services(p: Profile, image: Anchor, node: Anchor | None, env: Anchor) -> dict[Any, Any]:
    """A profile's data check, SuperNodes and submitter."""
    services: dict[Any, Any] = {}
    where = f"{p.num_supernodes} SuperNodes" if p.num_supernodes else "SuperNodes from site hosts"
    services[Comment(f"--- profile {p.name}: {where} + submitter ---")] = None
    ready = {"superlink": {"condition": "service_healthy"},
             REGISTER_SERVICE: {"condition": "service_completed_successfully"}}
    if p.vehicle_data:
        services[Comment("fails with a clear message when ./data lacks the vehicle file (or its sha256 differs)")] = None
        services[CHECK_DATA_SERVICE] = {
            "<<": Alias(image), "profiles": [p.name], "command": check_data_command(p), "volumes": [DATA_MOUNT],
            "restart": "no",
        }
        ready[CHECK_DATA_SERVICE] = {"condition": "service_completed_successfully"}
    for i, name in enumerate(p.supernode_services()):
        services[name] = {"<<": Alias(node), "command": supernode_args(i, p.num_supernodes),
                          "secrets": node_secrets(name)}
    services[p.submit_service] = {
        "<<": Alias(image),
        "profiles": [p.name],
        "command": submit_command(p),
        "environment": _connection_env(env),
        "secrets": ["ca.crt"],
        "depends_on": {**ready, **{name: {"condition": "service_healthy"} for name in p.supernode_services()}},
        "restart": "no",
    }
    return services


def build_main(fairness_supernodes: int = DEFAULT_FAIRNESS_SUPERNODES,
               site_devices: int = DEFAULT_SITE_DEVICES) -> dict[str, Any]:
    """docker-compose.yml: the SuperLink, its helpers and every profile."""
    profs = profiles(fairness_supernodes, site_devices)
    env, image, node_env = _image_anchors()
    supernode = Anchor("supernode", {
        "<<": Alias(image),
        "entrypoint": supernode_entrypoint(),
        "environment": Alias(node_env),
        "healthcheck": dict(SUPERNODE_HEALTH),
        "depends_on": {"superlink": {"condition": "service_healthy"},
                       REGISTER_SERVICE: {"condition": "service_completed_successfully"}},
        "restart": "on-failure",
        "stop_grace_period": "5s",
    })
    nodes: dict[str, Anchor] = {}
    for p in profs:
        if not p.num_supernodes:
            continue
        body: dict[str, Any] = {"<<": Alias(supernode), "profiles": [p.name]}
        if p.vehicle_data:
            body["volumes"] = [DATA_MOUNT]
            body["depends_on"] = {**supernode.value["depends_on"],
                                  CHECK_DATA_SERVICE: {"condition": "service_completed_successfully"}}
        nodes[p.name] = Anchor(p.node_prefix, body)
    services = _server_services(env, image, [p.name for p in profs])
    for p in profs:
        services.update(_profile_services(p, image, nodes.get(p.name), env))
    all_nodes = [name for p in profs for name in p.supernode_services()]
    return {
        "name": "term-fl",
        "x-flwr-env": env, "x-term-fl-image": image, "x-supernode-env": node_env, "x-supernode": supernode,
        **{f"x-{a.name}": a for a in nodes.values()},
        "services": services,
        "volumes": {"results": {}},
        "secrets": {**{name: {"file": path} for name, path in SECRETS.items()}, **key_secrets(all_nodes)},
    }


def build_site(site_devices: int = DEFAULT_SITE_DEVICES, partitions: list[int] | None = None) -> dict[str, Any]:
    """docker-compose.site.yml: SuperNodes of ``partitions`` of a ``site_devices``-device federation, joining by address."""
    partitions = list(range(site_devices)) if partitions is None else partitions
    env, image, node_env = _image_anchors()
    node = Anchor("site-supernode", {
        "<<": Alias(image),
        "entrypoint": supernode_entrypoint(superlink=REMOTE_SUPERLINK),
        "environment": Alias(node_env),
        "healthcheck": dict(SUPERNODE_HEALTH),
        "volumes": [DATA_MOUNT],
        "restart": "on-failure",
        "stop_grace_period": "5s",
    })
    names = [f"site-supernode-{i}" for i in partitions]
    services = {name: {"<<": Alias(node), "command": supernode_args(i, site_devices), "secrets": node_secrets(name)}
                for i, name in zip(partitions, names)}
    return {
        "name": "term-fl-site",
        "x-flwr-env": env, "x-term-fl-image": image, "x-supernode-env": node_env, "x-site-supernode": node,
        "services": services,
        "secrets": {"ca.crt": {"file": SECRETS["ca.crt"]}, **key_secrets(names)},
    }


def _all_supernodes(fairness_supernodes: int, site_devices: int) -> list[str]:
    return [name for p in profiles(fairness_supernodes, site_devices) for name in p.supernode_services()]


def build_gpu(fairness_supernodes: int = DEFAULT_FAIRNESS_SUPERNODES,
              site_devices: int = DEFAULT_SITE_DEVICES) -> dict[str, Any]:
    """docker-compose.gpu.yml: the CUDA image and NVIDIA GPUs for every SuperNode of docker-compose.yml."""
    gpu = Anchor("gpu-supernode", {
        "image": GPU_IMAGE,
        "build": {"context": ".", "dockerfile": "Dockerfile", "args": {"TORCH_INDEX_URL": CUDA_TORCH_INDEX}},
        "deploy": {"resources": {"reservations": {
            "devices": [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]}}},
    })
    services = {name: Alias(gpu) for name in _all_supernodes(fairness_supernodes, site_devices)}
    return {"x-gpu-supernode": gpu, "services": services}


def _without_auth(fairness_supernodes: int, site_devices: int, *, tls: bool) -> dict[str, Any]:
    """The services of an override without SuperNode authentication (and without TLS when ``tls`` is False)."""
    services: dict[str, Any] = {"superlink": {"command": superlink_command(tls=tls, auth=False)}}
    services[REGISTER_SERVICE] = {
        "command": ["echo", "SuperNode authentication is off: no keys to register"],
        "volumes": Tagged("!override", []),
    }
    for name in _all_supernodes(fairness_supernodes, site_devices):
        # explicit per service (no anchor): a tag is applied where it is written
        services[name] = {"entrypoint": supernode_entrypoint(tls=tls, auth=False),
                          "secrets": Tagged("!override", node_secrets(name, auth=False) if tls else [])}
    return services


def build_noauth(fairness_supernodes: int = DEFAULT_FAIRNESS_SUPERNODES,
                 site_devices: int = DEFAULT_SITE_DEVICES) -> dict[str, Any]:
    """docker-compose.noauth.yml: SuperNode authentication off (TLS stays on)."""
    return {"services": _without_auth(fairness_supernodes, site_devices, tls=True),
            "secrets": Tagged("!override", {name: {"file": path} for name, path in SECRETS.items()})}


def build_dev(fairness_supernodes: int = DEFAULT_FAIRNESS_SUPERNODES,
              site_devices: int = DEFAULT_SITE_DEVICES) -> dict[str, Any]:
    """docker-compose.dev.yml: plaintext and no SuperNode authentication."""
    services = _without_auth(fairness_supernodes, site_devices, tls=False)
    services["superlink"]["secrets"] = Tagged("!reset", [])
    services[REGISTER_SERVICE]["secrets"] = Tagged("!reset", [])
    for p in profiles(fairness_supernodes, site_devices):
        services[p.submit_service] = {"environment": {"TERM_FL_INSECURE": "1"}, "secrets": Tagged("!reset", [])}
    return {"services": services, "secrets": Tagged("!reset", {})}


HEADER = """\
# GENERATED by deploy/gen_compose.py from one Python source -- do not edit by hand.
# Regenerate with `python deploy/gen_compose.py` (tests/test_compose.py checks it).
"""

HEADERS = {
    "docker-compose.yml": HEADER + """\
#
# Flower 1.42 Deployment Engine scenarios of term-fl (see deploy/README.md):
#   docker compose --profile vehicle-sensor up   # 23 SuperNodes, SensIT data (real)
#   docker compose --profile fairness up         # {n} SuperNodes, synthetic data
#   docker compose --profile server up           # SuperNodes join from site hosts (docker-compose.site.yml)
# First: deploy/make-certs.sh (TLS, deploy/certs/) and deploy/supernode_keys.py generate (SuperNode keys,
# deploy/keys/). Overrides: docker-compose.gpu.yml (NVIDIA GPUs), docker-compose.noauth.yml (no SuperNode
# authentication), docker-compose.dev.yml (plaintext).
# The ServerApp runs inside the superlink container (subprocess isolation):
# results land on the named volume `results` (/results), which the dashboard reads.
""",
    "docker-compose.site.yml": HEADER + """\
#
# A site host: SuperNodes only, for the partitions {parts} of a {n}-device federation, joining
# the SuperLink of another host by address and port (deploy/README.md, "SuperNodes on other hosts"):
#   TERM_FL_SUPERLINK=fl.example.org:8000 docker compose -f docker-compose.site.yml up -d
# Needs the server's CA certificate in deploy/certs/ca.crt and this host's SuperNode keys in
# deploy/keys/ (deploy/supernode_keys.py generate), their .pub files registered by the server.
""",
    "docker-compose.gpu.yml": HEADER + """\
#
# GPU override: SuperNodes use an image with CUDA torch and reserve NVIDIA GPUs
# (needs the NVIDIA Container Toolkit); client.device=auto then trains on CUDA.
#   docker compose -f docker-compose.yml -f docker-compose.gpu.yml --profile vehicle-sensor up --build
# Another CUDA wheel index: TERM_FL_TORCH_INDEX_URL=https://download.pytorch.org/whl/cuXYZ
""",
    "docker-compose.noauth.yml": HEADER + """\
#
# SuperNode authentication OFF: any process that reaches the SuperLink's port can join as a
# SuperNode (term-fl 0.2's deployments). For existing deployments that cannot make keys yet.
#   docker compose -f docker-compose.yml -f docker-compose.noauth.yml --profile fairness up
# Needs Docker Compose >= 2.24.4 (the `!override` tag).
""",
    "docker-compose.dev.yml": HEADER + """\
#
# DEVELOPMENT ONLY: plaintext gRPC/HTTP, no TLS, no SuperNode authentication, no certificates
# or keys needed. This is the only file of the project with --insecure. Never expose it.
#   docker compose -f docker-compose.yml -f docker-compose.dev.yml --profile fairness up
# Needs Docker Compose >= 2.24.4 (the `!reset` and `!override` tags).
""",
}


def render_all(fairness_supernodes: int = DEFAULT_FAIRNESS_SUPERNODES, site_devices: int = DEFAULT_SITE_DEVICES,
               partitions: list[int] | None = None) -> dict[str, str]:
    """File name -> content of every generated compose file."""
    n, s = fairness_supernodes, site_devices
    parts = list(range(s)) if partitions is None else partitions
    docs = {
        "docker-compose.yml": build_main(n, s),
        "docker-compose.site.yml": build_site(s, parts),
        "docker-compose.gpu.yml": build_gpu(n, s),
        "docker-compose.noauth.yml": build_noauth(n, s),
        "docker-compose.dev.yml": build_dev(n, s),
    }
    span = f"{parts[0]}-{parts[-1]}" if len(parts) > 1 else f"{parts[0]}"
    return {name: to_yaml(doc, HEADERS[name].format(n=n if name == "docker-compose.yml" else s, parts=span))
            for name, doc in docs.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fairness-supernodes", type=int, default=DEFAULT_FAIRNESS_SUPERNODES,
                        help=f"SuperNodes (= synthetic devices) of the fairness profile (default {DEFAULT_FAIRNESS_SUPERNODES})")
    parser.add_argument("--site-devices", type=int, default=DEFAULT_SITE_DEVICES,
                        help="devices of the federation whose SuperNodes join from sites (the server profile; "
                             f"default {DEFAULT_SITE_DEVICES})")
    parser.add_argument("--site-partitions", metavar="FIRST-LAST",
                        help="the partitions docker-compose.site.yml starts (default: all of --site-devices)")
    parser.add_argument("--output-dir", type=Path, default=REPO_ROOT,
                        help="where to write the files (default: the repository root)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file differs")
    args = parser.parse_args(argv)
    try:
        parts = site_partitions(args.site_partitions, args.site_devices) if args.site_partitions else None
        files = render_all(args.fairness_supernodes, args.site_devices, parts)
    except ValueError as exc:
        parser.error(str(exc))
    stale = []
    for name, text in files.items():
        path = args.output_dir / name
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        print(f"stale (run python deploy/gen_compose.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
