"""Benchmark: node discovery in Flower's Simulation Engine, and where its time goes.

Discovery maps each node id to the partition it holds before round 1
(``term_fl.federation.loop.discover_nodes``). Measured per point (a child process
each: Ray start, ``run_flower_simulation`` of one round with 10 clients):

- ``query``: every node is asked for its partition-id (the default; what a
  deployment does): one message per node through the link state and a Ray
  actor;
- ``engine``: the engine's own table of which virtual node holds which
  partition (the opt-in patch ``node-table``, ``simulation_node_table``), no
  message.

Each point also reports its whole run: with few nodes, asking them mostly
starts the ClientApp actors (imports, first messages), which round 1 then
does instead.

For each, the discovery time (``FederationResult.discovery_s``) and, up to the
end of discovery, the time spent in the parts that handle the messages:
``push_messages`` (the server storing the queries), ``get_message_res`` (each
pull of the server loop: a scan of every pending message under the link
state's lock), ``RayBackend.process_message`` (one Ray round trip per
message, summed over the worker threads, one per actor) and
``store_message_res`` (the thread that stores the replies). --size small:
200 nodes; full: 10,000.

    python -m benchmarks --only discovery [--size full]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from typing import Any

from .common import ONE_RUN, REPO, BenchResult, Options, Row, fmt_s

NAME = "discovery"
SIZES = {"small": 200, "full": 10_000}
MODES = ("query", "engine")
PARTS = {  # (class path, method) -> what it is
    ("flwr.superlink.grid.inmemory_grid", "InMemoryGrid", "push_messages"): "push (server)",
    ("flwr.server.superlink.linkstate.in_memory_linkstate", "InMemoryLinkState", "get_message_res"): "pulls (server)",
    ("flwr.server.superlink.fleet.vce.backend.raybackend", "RayBackend", "process_message"): "Ray round trips",
    ("flwr.server.superlink.linkstate.in_memory_linkstate", "InMemoryLinkState", "store_message_res"): "store replies",
}


def run(opts: Options) -> BenchResult:
    num_nodes = SIZES[opts.size]
    result = BenchResult(NAME)
    points = {mode: _point(num_nodes, mode, opts) for mode in MODES}
    result.raw = {"num_nodes": num_nodes, "points": points}
    for mode, p in points.items():
        parts = "; ".join(
            f"{label} {fmt_s(t)} ({n} calls)" for label, (n, t) in p.get("parts", {}).items() if n
        ) or "no messages"
        result.rows.append(Row(
            f"{NAME} {num_nodes:,} nodes, {'ask every node' if mode == 'query' else 'engine node table'}",
            f"discovery {fmt_s(p.get('discovery_s'))}; the whole run (Ray start, discovery, one round) "
            f"{fmt_s(p.get('wall_s'))}" + (f"; error: {p['error']}" if p.get("error") else ""),
            "-", parts, "info",
        ))
    q, e = (points[m].get("discovery_s") for m in MODES)
    result.rows.append(Row(f"{NAME} {num_nodes:,} nodes, engine table vs asking every node", fmt_s(e), fmt_s(q),
                           "-" if not q or e is None else f"{e / q:.3f}", "info"))
    return result


def _point(num_nodes: int, mode: str, opts: Options) -> dict[str, Any]:
    env = {**os.environ, "TERM_FL_FLOWER_PATCHES": "node-table" if mode == "engine" else "none"}
    env.pop("TERM_FL_DISCOVERY", None)
    cmd = [sys.executable, "-m", "benchmarks.discovery", str(num_nodes), opts.device]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"error": f"exit {done.returncode}: {(done.stderr or done.stdout)[-500:]}"}
    return json.loads(lines[-1])


def _instrument() -> dict[str, list[float]]:
    """Time every call of the PARTS methods (all threads); ``{label: [calls, seconds]}``."""
    import importlib

    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    lock = threading.Lock()
    for (module, cls_name, method), label in PARTS.items():
        cls = getattr(importlib.import_module(module), cls_name)
        original = getattr(cls, method)

        def timed(*args: Any, _original: Any = original, _label: str = label, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                with lock:
                    totals[_label][0] += 1
                    totals[_label][1] += elapsed

        setattr(cls, method, timed)
    return totals


def worker(num_nodes: int, device: str) -> dict[str, Any]:
    """One point, in this process: discovery at ``num_nodes`` nodes, timed by part."""
    from .common import quiet_environment

    quiet_environment()
    from term_fl.config import load_scenario
    from term_fl.engines import flower

    totals = _instrument()
    at_discovery: dict[str, Any] = {}
    run_federation = flower.run_federation

    def first_round_marks_the_end_of_discovery(grid: Any, *args: Any, **kwargs: Any) -> Any:
        inner_send = grid.send_and_receive

        def send_and_receive(messages: Any, *, timeout: float | None = None) -> Any:
            messages = list(messages)
            if messages and messages[0].metadata.message_type != "query" and "done" not in at_discovery:
                at_discovery.update({label: list(v) for label, v in totals.items()}, done=True)
            return inner_send(messages, timeout=timeout)

        grid.send_and_receive = send_and_receive
        return run_federation(grid, *args, **kwargs)

    flower.run_federation = first_round_marks_the_end_of_discovery
    scenario = load_scenario(None, [
        "sweep={}", *ONE_RUN, "name=discovery", "data.name=synthetic", f"data.num_devices={num_nodes}", "data.max_samples=60",
        "model.name=logreg", "run.clients_per_round=10", "run.rounds=1", f"run.evaluate_fraction={10 / num_nodes}",
        "run.engine=flower", "run.node_timeout=3600", "run.round_timeout=3600", *Options(device=device).device_overrides,  # type: ignore[arg-type]
    ], environ={})
    start = time.perf_counter()
    result = flower.run_flower_simulation(scenario, num_nodes)
    mode = "engine" if os.environ.get("TERM_FL_FLOWER_PATCHES") == "node-table" else "query"
    return {"mode": mode, "num_nodes": num_nodes,
            "discovery_s": result.discovery_s, "wall_s": time.perf_counter() - start,
            "parts": {label: at_discovery.get(label, [0, 0.0]) for label in PARTS.values()}}


if __name__ == "__main__":
    print(json.dumps(worker(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "cpu")))
