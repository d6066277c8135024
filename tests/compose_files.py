"""The generated compose files as the tests read them: loading, argv, flags, SuperNodes.

Shared by tests/test_compose.py (the server host's file, its overrides, the
generator) and tests/test_compose_sites.py (the site file, SuperNode
authentication, deploy/supernode_keys.py).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="pyyaml is a test extra: pip install -e '.[test]'")

REPO = Path(__file__).resolve().parents[1]
SCHEMA = Path(os.environ.get("TERM_FL_COMPOSE_SCHEMA")  # a worktree elsewhere than beside shared/
              or Path(__file__).resolve().parents[2] / "shared" / "schemas" / "compose-spec.json")
BIN = Path(sys.executable).parent
MAIN, SITE, GPU, NOAUTH, DEV = ("docker-compose.yml", "docker-compose.site.yml", "docker-compose.gpu.yml",
                                "docker-compose.noauth.yml", "docker-compose.dev.yml")
FILES = (MAIN, SITE, GPU, NOAUTH, DEV)
DATA_MOUNT = "${TERM_FL_DATA_DIR:-./data}:/data:ro"  # inside the repository: no default path outside it
SECRETS_DIR = "/run/secrets"
NODE_KEY = f"{SECRETS_DIR}/supernode.key"
SUPERNODE = "term-fl-supernode"  # flower-supernode with pre-forked ClientApp processes
PROFILES = ("vehicle-sensor", "fairness")  # the profiles with SuperNodes on the server host


def load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gen = load_module("term_fl_gen_compose", REPO / "deploy" / "gen_compose.py")


class ComposeLoader(yaml.SafeLoader):
    """SafeLoader plus compose's ``!reset`` and ``!override`` tags (an override that empties or replaces a value)."""


def _tagged(loader: yaml.SafeLoader, node: yaml.Node):
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    return None


for _tag in ("!reset", "!override"):
    ComposeLoader.add_constructor(_tag, _tagged)


def load(name: str) -> dict:
    return yaml.load((REPO / name).read_text(encoding="utf-8"), Loader=ComposeLoader)


def load_text(text: str) -> dict:
    return yaml.load(text, Loader=ComposeLoader)


def argv(service: dict) -> list[str]:
    """The container's argv as compose runs it: entrypoint + command (both exec form here)."""
    entry = service.get("entrypoint") or []
    cmd = service.get("command") or []
    assert isinstance(entry, list) and isinstance(cmd, list), "use the exec (list) form"
    return [*entry, *cmd]


def flag_value(args: list[str], flag: str) -> str:
    assert flag in args, f"{flag} missing from {args}"
    return args[args.index(flag) + 1]


def supernodes(doc: dict, profile: str | None = None) -> dict[str, dict]:
    """The SuperNode services of ``doc`` (of ``profile`` only, when given)."""
    return {
        name: svc for name, svc in doc["services"].items()
        if (profile is None or profile in svc.get("profiles", [])) and argv(svc)[:1] == [SUPERNODE]
    }


def node_config(svc: dict) -> dict[str, str]:
    text = flag_value(argv(svc), "--node-config")
    return dict(item.split("=", 1) for item in text.split())


_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def interpolate(text: str, env: dict[str, str] | None = None) -> str:
    """Compose's ${VAR:-default} interpolation (the form the generated files use but for TERM_FL_SUPERLINK)."""
    env = env or {}
    return _VAR.sub(lambda m: env.get(m[1]) or (m[2] or ""), text)
