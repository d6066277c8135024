#!/usr/bin/env python3
"""Generate the Docker Compose files of term-fl's Deployment Engine scenarios.

One Python source for every compose file, so the profiles cannot drift apart:

- ``docker-compose.yml``      profiles ``vehicle-sensor`` (23 SuperNodes, real SensIT
                              data) and ``fairness`` (N SuperNodes, synthetic data), TLS;
- ``docker-compose.gpu.yml``  override: CUDA torch image + NVIDIA GPUs for the SuperNodes;
- ``docker-compose.dev.yml``  override: plaintext (``--insecure``), development only.

The committed files must equal this script's output (tests/test_compose.py
checks it). Regenerate after changing anything here:

    python deploy/gen_compose.py                          # default: 10 fairness SuperNodes
    python deploy/gen_compose.py --fairness-supernodes 20 # another fairness federation size
    python deploy/gen_compose.py --check                  # exit 1 if a file is stale

Standard library only (no PyYAML needed to regenerate); the emitter writes the
small YAML subset used here, with anchors and merge keys to keep it short.

Topology (Flower 1.42, checked against the installed binaries' --help):

- ``superlink``: ``flower-superlink`` serves the Fleet, Control and Runtime
  APIs on ONE port (8000). With the default ``--isolation subprocess`` it
  starts its own ``flower-superexec`` that runs the ServerApp
  (``flwr-serverapp``) inside the same container and connects to
  127.0.0.1:8000: the results volume and the vehicle data are mounted there.
- one ``flower-supernode`` container per device (``--node-config
  "partition-id=i num-partitions=N"``); its ClientApps also run in
  subprocesses of the same container, so no separate SuperExec service is
  needed. Each container has its own loopback, so the default runtime port
  (127.0.0.1:9094) never collides.
- ``submit-<profile>``: one-shot ``flwr run /app compose --stream`` with the
  run config; it waits for the SuperLink and writes ``$FLWR_HOME/config.toml``
  (deploy/submit.sh).
- ``dashboard``: ``term-fl dashboard`` on the results volume (read-only).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------
# The single source of truth
# ---------------------------------------------------------------------------

VEHICLE_SUPERNODES = 23  # the SensIT slice has exactly 23 devices
DEFAULT_FAIRNESS_SUPERNODES = 10
SUPERLINK_HOST = "superlink"  # service name = DNS name; in the server certificate's SAN
SUPERLINK_PORT = 8000  # Flower 1.42: one port for Fleet, Control and Runtime APIs
CONNECTION = "compose"  # [superlink.compose] in the submitter's $FLWR_HOME/config.toml
RESULTS_DIR = "/results"
DATA_DIR = "/data"
VEHICLE_FILE = "vehicle_fewshot.json"
APP_DIR = "/app"  # where the Dockerfile puts the project (the Flower app)
SECRETS_DIR = "/run/secrets"
DASHBOARD_PORT = 8050

# TLS material made by deploy/make-certs.sh (compose secrets, mounted at /run/secrets/NAME);
# TERM_FL_CERTS_DIR points elsewhere (deploy/e2e.sh uses a temporary folder)
CERTS_DIR = "${TERM_FL_CERTS_DIR:-./deploy/certs}"
SECRETS = {name: f"{CERTS_DIR}/{name}" for name in ("ca.crt", "server.pem", "server.key")}

FLWR_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "TERM_FL_VEHICLE_DATA": f"{DATA_DIR}/{VEHICLE_FILE}",
}

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
CHECK_DATA_SERVICE = "check-vehicle-data"


@dataclass(frozen=True)
class Profile:
    """A compose profile: one federation of SuperNodes and its submitter."""

    name: str  # compose profile name
    node_prefix: str  # SuperNode service names: <node_prefix>-<partition-id>
    num_supernodes: int
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


def profiles(fairness_supernodes: int = DEFAULT_FAIRNESS_SUPERNODES) -> list[Profile]:
    """The two profiles; the fairness federation has ``fairness_supernodes`` devices."""
    if fairness_supernodes < 2:
        raise ValueError("the fairness profile needs at least 2 SuperNodes")
    n = fairness_supernodes
    return [
        Profile(
            name="vehicle-sensor",
            node_prefix="vehicle-supernode",
            num_supernodes=VEHICLE_SUPERNODES,
            scenario="configs/vehicle-sensor.toml",
            # 23 containers import torch at once: give discovery more time than the default
            overrides="run.node_timeout=300",
            vehicle_data=True,
            default_rounds=10,
        ),
        Profile(
            name="fairness",
            node_prefix="fairness-supernode",
            num_supernodes=n,
            scenario="configs/fairness.toml",
            # the synthetic federation must have exactly one device per SuperNode; every round evaluated
            # (the file evaluates every 10th of its 800 rounds) and the sequential executor (the file's
            # cohort executor is the in-process engine's)
            overrides=f"data.num_devices={n} run.clients_per_round={max(1, n // 2)} run.node_timeout=300 "
                      "run.evaluate_every=1 run.executor=sequential",
            vehicle_data=False,
            default_rounds=10,
        ),
    ]


def run_config(profile: Profile, *, overrides: str | None = None, results_dir: str = RESULTS_DIR) -> str:
    """The value of ``flwr run --run-config`` (keys of [tool.flwr.app.config])."""
    ov = profile.run_overrides if overrides is None else overrides
    for value in (profile.scenario, ov, results_dir):
        if '"' in value:
            raise ValueError(f"run-config value {value!r} must not contain a double quote")
    return f'scenario="{profile.scenario}" overrides="{ov}" results-dir="{results_dir}"'


def supernode_entrypoint(*, tls: bool = True) -> list[str]:
    """What every SuperNode runs; the per-node ``--node-config`` comes as the service's command."""
    cmd = ["flower-supernode", "--superlink", f"{SUPERLINK_HOST}:{SUPERLINK_PORT}"]
    cmd += ["--root-certificates", f"{SECRETS_DIR}/ca.crt"] if tls else ["--insecure"]
    return cmd


def supernode_args(partition_id: int, num_partitions: int) -> list[str]:
    return ["--node-config", f"partition-id={partition_id} num-partitions={num_partitions}"]


def supernode_command(partition_id: int, num_partitions: int, *, tls: bool = True) -> list[str]:
    """The full argv of one SuperNode (entrypoint + command)."""
    return supernode_entrypoint(tls=tls) + supernode_args(partition_id, num_partitions)


def superlink_command(*, tls: bool = True) -> list[str]:
    cmd = ["flower-superlink", "--host", "0.0.0.0", "--port", str(SUPERLINK_PORT)]
    if tls:
        cmd += [
            "--ssl-ca-certfile", f"{SECRETS_DIR}/ca.crt",
            "--ssl-certfile", f"{SECRETS_DIR}/server.pem",
            "--ssl-keyfile", f"{SECRETS_DIR}/server.key",
        ]
    else:
        cmd += ["--insecure"]
    cmd += ["--disable-runtime-dependency-installation"]
    return cmd


def check_data_command(profile: Profile) -> list[str]:
    """The vehicle profile's data check: the scenario's own file and sha256 checks, a clear message."""
    return ["python", f"{APP_DIR}/deploy/check_data.py", profile.scenario, profile.run_overrides]


def submit_command(profile: Profile) -> list[str]:
    return [
        f"{APP_DIR}/deploy/submit.sh",
        "flwr", "run", APP_DIR, CONNECTION, "--stream",
        "--run-config", run_config(profile),
    ]


# ---------------------------------------------------------------------------
# Building the documents
# ---------------------------------------------------------------------------


class Anchor:
    """A mapping emitted with ``&name``."""

    def __init__(self, name: str, value: dict[str, Any]):
        self.name, self.value = name, value


class Alias:
    """``*name`` (as a value, or as ``<<: *name`` merge key)."""

    def __init__(self, anchor: Anchor):
        self.name = anchor.name


class Tagged:
    """A value with an explicit YAML tag, e.g. compose's ``!reset []``."""

    def __init__(self, tag: str, value: Any):
        self.tag, self.value = tag, value


class Comment:
    """A comment line placed before the next key of a mapping."""

    def __init__(self, text: str):
        self.text = text


def _secrets(names: list[str]) -> list[str]:
    return list(names)


def build_main(fairness_supernodes: int = DEFAULT_FAIRNESS_SUPERNODES) -> dict[str, Any]:
    profs = profiles(fairness_supernodes)
    all_profiles = [p.name for p in profs]

    env = Anchor("flwr-env", dict(FLWR_ENV))
    image = Anchor(
        "term-fl-image",
        {
            "image": IMAGE,
            "build": {"context": ".", "dockerfile": "Dockerfile", "args": {"TORCH_INDEX_URL": CPU_TORCH_INDEX}},
            "environment": Alias(env),
            "init": True,
        },
    )
    supernode = Anchor(
        "supernode",
        {
            "<<": Alias(image),
            "entrypoint": supernode_entrypoint(),
            "depends_on": {"superlink": {"condition": "service_healthy"}},
            "secrets": _secrets(["ca.crt"]),
            "restart": "on-failure",
            "stop_grace_period": "5s",
        },
    )
    profile_nodes: dict[str, Anchor] = {}
    for p in profs:
        body: dict[str, Any] = {"<<": Alias(supernode), "profiles": [p.name]}
        if p.vehicle_data:
            body["volumes"] = [DATA_MOUNT]
            body["depends_on"] = {
                "superlink": {"condition": "service_healthy"},
                CHECK_DATA_SERVICE: {"condition": "service_completed_successfully"},
            }
        profile_nodes[p.name] = Anchor(p.node_prefix, body)

    services: dict[str, Any] = {}
    services["superlink"] = {
        "<<": Alias(image),
        "profiles": all_profiles,
        "command": superlink_command(),
        "secrets": _secrets(list(SECRETS)),
        "ports": [f"${{TERM_FL_SUPERLINK_PUBLISH:-127.0.0.1:{SUPERLINK_PORT}}}:{SUPERLINK_PORT}"],
        "volumes": [f"results:{RESULTS_DIR}", DATA_MOUNT],
        "healthcheck": {
            "test": [
                "CMD", "python", "-c",
                f"import socket; socket.create_connection(('127.0.0.1', {SUPERLINK_PORT}), 2).close()",
            ],
            "interval": "5s",
            "timeout": "3s",
            "retries": 24,
            "start_period": "10s",
        },
    }
    services["dashboard"] = {
        "<<": Alias(image),
        "profiles": all_profiles,
        Comment("the dashboard answers only the Host: names it knows (DNS-rebinding guard): loopback,"): None,
        Comment("IP addresses, its service name for other containers, and TERM_FL_DASHBOARD_HOSTNAME"): None,
        Comment("(comma-separated names it is published under, e.g. fl.example.org)"): None,
        "command": ["term-fl", "dashboard", "--db", f"{RESULTS_DIR}/results.db",
                    "--host", "0.0.0.0", "--port", str(DASHBOARD_PORT),
                    "--allowed-host", "dashboard", "--allowed-host", "${TERM_FL_DASHBOARD_HOSTNAME:-}"],
        "ports": [f"${{TERM_FL_DASHBOARD_PUBLISH:-127.0.0.1:{DASHBOARD_PORT}}}:{DASHBOARD_PORT}"],
        Comment("read-write on purpose: results.db is SQLite in WAL mode, and a reader on a"): None,
        Comment("read-only mount cannot open it once the writer has closed it (\"unable to open"): None,
        Comment("database file\"); the dashboard itself opens the database read-only."): None,
        "volumes": [f"results:{RESULTS_DIR}"],
        "restart": "on-failure",
    }
    for p in profs:
        services[Comment(f"--- profile {p.name}: {p.num_supernodes} SuperNodes + submitter ---")] = None
        if p.vehicle_data:
            services[Comment("fails with a clear message when ./data lacks the vehicle file (or its sha256 differs)")] = None
            services[CHECK_DATA_SERVICE] = {
                "<<": Alias(image),
                "profiles": [p.name],
                "command": check_data_command(p),
                "volumes": [DATA_MOUNT],
                "restart": "no",
            }
        for i, name in enumerate(p.supernode_services()):
            services[name] = {
                "<<": Alias(profile_nodes[p.name]),
                "command": supernode_args(i, p.num_supernodes),
            }
        depends: dict[str, Any] = {"superlink": {"condition": "service_healthy"}}
        if p.vehicle_data:
            depends[CHECK_DATA_SERVICE] = {"condition": "service_completed_successfully"}
        depends.update({name: {"condition": "service_started"} for name in p.supernode_services()})
        services[p.submit_service] = {
            "<<": Alias(image),
            "profiles": [p.name],
            "command": submit_command(p),
            "environment": {
                "<<": Alias(env),
                "TERM_FL_SUPERLINK_ADDRESS": f"{SUPERLINK_HOST}:{SUPERLINK_PORT}",
                "TERM_FL_CONNECTION": CONNECTION,
                "TERM_FL_ROOT_CERTIFICATES": f"{SECRETS_DIR}/ca.crt",
            },
            "secrets": _secrets(["ca.crt"]),
            "depends_on": depends,
            "restart": "no",
        }

    return {
        "name": "term-fl",
        "x-flwr-env": env,
        "x-term-fl-image": image,
        "x-supernode": supernode,
        **{f"x-{a.name}": a for a in profile_nodes.values()},
        "services": services,
        "volumes": {"results": {}},
        "secrets": {name: {"file": path} for name, path in SECRETS.items()},
    }


def build_gpu(fairness_supernodes: int = DEFAULT_FAIRNESS_SUPERNODES) -> dict[str, Any]:
    gpu = Anchor(
        "gpu-supernode",
        {
            "image": GPU_IMAGE,
            "build": {"context": ".", "dockerfile": "Dockerfile", "args": {"TORCH_INDEX_URL": CUDA_TORCH_INDEX}},
            "deploy": {
                "resources": {
                    "reservations": {
                        "devices": [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
                    }
                }
            },
        },
    )
    services: dict[str, Any] = {}
    for p in profiles(fairness_supernodes):
        for name in p.supernode_services():
            services[name] = Alias(gpu)
    return {"x-gpu-supernode": gpu, "services": services}


def build_dev(fairness_supernodes: int = DEFAULT_FAIRNESS_SUPERNODES) -> dict[str, Any]:
    services: dict[str, Any] = {
        "superlink": {"command": superlink_command(tls=False), "secrets": Tagged("!reset", [])},
    }
    for p in profiles(fairness_supernodes):
        for name in p.supernode_services():
            # explicit per service (no anchor): `!reset` is applied where it is written
            services[name] = {"entrypoint": supernode_entrypoint(tls=False), "secrets": Tagged("!reset", [])}
        services[p.submit_service] = {
            "environment": {"TERM_FL_INSECURE": "1"},
            "secrets": Tagged("!reset", []),
        }
    return {"services": services, "secrets": Tagged("!reset", {})}


# ---------------------------------------------------------------------------
# A small deterministic YAML emitter
# ---------------------------------------------------------------------------

_PLAIN = re.compile(r"^(?:[A-Za-z_/]|--?[A-Za-z])[A-Za-z0-9_./-]*$")
_RESERVED = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def _scalar(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _RESERVED:
        return text
    if '"' in text and "'" not in text and text.isprintable():
        return f"'{text}'"  # single-quoted: no escapes needed
    return json.dumps(text)  # a JSON string is a valid YAML double-quoted scalar


def _is_inline(value: Any) -> bool:
    if isinstance(value, Tagged):
        return True
    if isinstance(value, Anchor):
        return False
    if isinstance(value, dict):
        flat = len(value) <= 2 and all(not isinstance(v, (dict, list, Anchor, Alias)) for v in value.values())
        return not value or (flat and len(_inline(value)) <= 60)
    if isinstance(value, list):
        return not value or all(not isinstance(v, (dict, list, Anchor)) for v in value) and _short(value)
    return True


def _short(values: list[Any]) -> bool:
    return len(", ".join(_scalar(v) for v in values)) <= 60 and len(values) <= 4


def _inline(value: Any) -> str:
    if isinstance(value, Alias):
        return f"*{value.name}"
    if isinstance(value, Tagged):
        return f"{value.tag} {_inline(value.value)}"
    if isinstance(value, dict):
        return "{}" if not value else "{" + ", ".join(f"{_scalar(k)}: {_inline(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    return _scalar(value)


def _emit(value: Any, indent: int, out: list[str]) -> None:
    pad = "  " * indent
    if isinstance(value, Anchor):
        value = value.value
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, Comment):
                out.append(f"{pad}# {key.text}")
                continue
            k = "<<" if key == "<<" else _scalar(key)
            if isinstance(item, Anchor):
                out.append(f"{pad}{k}: &{item.name}")
                _emit(item.value, indent + 1, out)
            elif _is_inline(item):
                out.append(f"{pad}{k}: {_inline(item)}")
            else:
                out.append(f"{pad}{k}:")
                _emit(item, indent + 1, out)
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and item:
                lines: list[str] = []
                _emit(item, indent + 1, lines)
                first = lines[0].lstrip()
                out.append(f"{pad}- {first}")
                out.extend(lines[1:])
            else:
                out.append(f"{pad}- {_inline(item)}")
    else:
        raise TypeError(f"cannot emit {value!r} as a block")


HEADER = """\
# GENERATED by deploy/gen_compose.py from one Python source -- do not edit by hand.
# Regenerate with `python deploy/gen_compose.py` (tests/test_compose.py checks it).
"""

MAIN_HEADER = HEADER + """\
#
# Flower 1.42 Deployment Engine scenarios of term-fl (see deploy/README.md):
#   docker compose --profile vehicle-sensor up   # 23 SuperNodes, SensIT data (real)
#   docker compose --profile fairness up         # {n} SuperNodes, synthetic data
# TLS first: deploy/make-certs.sh (writes deploy/certs/, used as compose secrets).
# Overrides: docker-compose.gpu.yml (NVIDIA GPUs), docker-compose.dev.yml (plaintext).
# The ServerApp runs inside the superlink container (subprocess isolation):
# results land on the named volume `results` (/results), which the dashboard reads.
"""

GPU_HEADER = HEADER + """\
#
# GPU override: SuperNodes use an image with CUDA torch and reserve NVIDIA GPUs
# (needs the NVIDIA Container Toolkit); client.device=auto then trains on CUDA.
#   docker compose -f docker-compose.yml -f docker-compose.gpu.yml --profile vehicle-sensor up --build
# Another CUDA wheel index: TERM_FL_TORCH_INDEX_URL=https://download.pytorch.org/whl/cuXYZ
"""

DEV_HEADER = HEADER + """\
#
# DEVELOPMENT ONLY: plaintext gRPC/HTTP, no TLS, no certificates needed.
# This is the only file of the project with --insecure. Never expose it.
#   docker compose -f docker-compose.yml -f docker-compose.dev.yml --profile fairness up
# Needs Docker Compose >= 2.24 (the `!reset` tag drops the TLS secrets).
"""


def to_yaml(doc: dict[str, Any], header: str) -> str:
    out: list[str] = []
    _emit(doc, 0, out)
    # blank lines between top-level keys and between services, for the reader
    text: list[str] = []
    for line in out:
        top = not line.startswith(" ")
        service = _in_services(text) and re.match(r"^  [^ -]", line) is not None
        if text and (top or service) and not text[-1].lstrip().startswith("#"):
            one_liners = service and not line.endswith(":") and re.match(r"^  [^ #-].*[^:]$", text[-1])
            if not one_liners:
                text.append("")
        text.append(line)
    return header + "\n" + "\n".join(text) + "\n"


def _in_services(lines: list[str]) -> bool:
    for line in reversed(lines):
        if line and not line.startswith(" ") and not line.startswith("#"):
            return line.startswith("services:")
    return False


def render_all(fairness_supernodes: int = DEFAULT_FAIRNESS_SUPERNODES) -> dict[str, str]:
    """File name -> content of every generated compose file."""
    n = fairness_supernodes
    return {
        "docker-compose.yml": to_yaml(build_main(n), MAIN_HEADER.format(n=n)),
        "docker-compose.gpu.yml": to_yaml(build_gpu(n), GPU_HEADER),
        "docker-compose.dev.yml": to_yaml(build_dev(n), DEV_HEADER),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fairness-supernodes", type=int, default=DEFAULT_FAIRNESS_SUPERNODES,
                        help=f"SuperNodes (= synthetic devices) of the fairness profile (default {DEFAULT_FAIRNESS_SUPERNODES})")
    parser.add_argument("--output-dir", type=Path, default=REPO_ROOT,
                        help="where to write the files (default: the repository root)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file differs")
    args = parser.parse_args(argv)
    stale = []
    for name, text in render_all(args.fairness_supernodes).items():
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
