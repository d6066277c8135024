"""SuperNode authentication as the compose files set it up, on loopback (no Docker engine needed).

A TLS SuperLink with ``--enable-supernode-auth`` (deploy/local_topology.py,
the compose file's flags), the public key of one SuperNode registered by
deploy/supernode_keys.py as the ``register-supernodes`` service does: that
SuperNode joins; one whose key was not registered, and one without a key,
are refused. deploy/e2e.sh checks the same across two Docker networks.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest
from compose_files import REPO, load_module

pytestmark = pytest.mark.slow

topology = load_module("term_fl_local_topology_auth", REPO / "deploy" / "local_topology.py")
REFUSED = "Exit Code: 305"  # flower-supernode: "Failed to initialize the connection to the SuperLink"


def supernode_list(topo) -> list[dict]:  # noqa: ANN001
    out = subprocess.run([str(topology.BIN / "flwr"), "supernode", "list", topology.CONNECTION, "--format", "json"],
                         env=topo.connection_env("register"), capture_output=True, text=True, timeout=120, check=False)
    return json.loads(out.stdout)["nodes"]


def wait_exit(proc: subprocess.Popen, timeout: float) -> int | None:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def test_only_supernodes_with_a_registered_key_join(tmp_path):
    for exe in ("flower-superlink", "flower-supernode", "flwr", "term-fl-supernode"):
        if not (topology.BIN / exe).exists():
            pytest.skip(f"{exe} is not installed in {topology.BIN}")
    topo = topology.LocalTopology(tmp_path / "auth", 3, env={"TERM_FL_PREFORK": "0"})  # no torch needed to join
    try:
        topo.make_certs()
        topo.generate_keys([topo.node_name(0), topo.node_name(1)])
        topo.start_superlink()
        known = tmp_path / "registered"  # what the server's operator got: node 0's public key only
        known.mkdir()
        shutil.copy(topo.keys / f"{topo.node_name(0)}.pub", known)
        registered = topo.register(known)
        assert registered.returncode == 0, registered.stdout + registered.stderr + topo.tail("superlink")
        assert "1 of 1 public keys registered" in registered.stdout

        member = topo.start_supernode(0)
        stranger = topo.start_supernode(1)  # a key of its own, never registered
        keyless = topo.start(None, "keyless", [
            str(topology.BIN / "flower-supernode"), "--superlink", f"127.0.0.1:{topo.port}",
            "--root-certificates", str(topo.certs / "ca.crt"), "--host", "127.0.0.1",
            "--port", str(topology.free_port())], topo.env("keyless"))

        for name, proc in (("fairness-supernode-1", stranger), ("keyless", keyless)):
            code = wait_exit(proc, 120)
            assert code not in (None, 0), f"{name} was let in (exit {code}):\n{topo.tail(name)}"
            assert REFUSED in topo.logs[name].read_text(errors="replace"), topo.tail(name)
        assert "Failed to activate SuperNode" in topo.logs["fairness-supernode-1"].read_text(errors="replace")
        assert "No SuperNode found with the given public key" in topo.logs["superlink"].read_text(errors="replace")

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            nodes = supernode_list(topo)
            if [n["status"] for n in nodes] == ["online"]:
                break
            time.sleep(1)
        assert [n["status"] for n in nodes] == ["online"], (nodes, topo.tail(topo.node_name(0)))
        assert member.poll() is None, "the registered SuperNode stays connected"
    finally:
        topo.stop_all()
