"""Where one Deployment-Engine ClientApp message spends its time, from process start to reply.

    python -m benchmarks.clientapp_message [--tree DIR ...] [--reps N] [--scenario fairness|vehicle]
                                           [--clientapp auto,torch]

Flower 1.42's SuperNode starts a fresh ``flwr-clientapp`` process for every
message. This benchmark replays that life in a fresh Python process per
message, with the messages the ServerApp sends (query, train, evaluate of the
profile's scenario, the initial global model), and times each stage from
before the process is spawned:

    flower: start    interpreter start + what flwr-clientapp imports before the app
    term-fl: import  loading the app (``client.app``: term_fl and what it imports)
    flower: message  deserialising the message (pickle here; protobuf in Flower)
    term-fl: handle  the app's handler (scenario, data, model, training / evaluation)
    flower: reply    serialising the reply

``--tree`` runs the app from another source tree (e.g. a checkout of main),
interleaved with this one (A/B/A/B), so that before/after share the
machine's load. ``--clientapp auto,torch`` runs each tree with each value
of ``TERM_FL_CLIENTAPP``, interleaved the same way: ``auto`` answers a
linear model's messages without torch (term_fl.clientapp.linear_app),
``torch`` with the torch ClientApp; the table says whether torch was imported. Wall and CPU seconds are medians over ``--reps`` messages of
each kind. Nothing asserts anything about time.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, pickle, resource, sys, time
t = {"spawned": float(sys.argv[3])}
def mark(name):
    t[name] = time.time()
    t[name + "_cpu"] = time.process_time()
tree = sys.argv[1]
sys.path.insert(0, tree)
import flwr.supernode.cli.flwr_clientapp  # noqa: F401  what flwr-clientapp imports first
from flwr.app import Context, RecordDict
from flwr.supercore.task_identity import TaskIdentity
TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1  # as in a ClientApp process
mark("flower_start")
from client.app import app
mark("app_import")
with open(sys.argv[2], "rb") as fh:
    message, node_config = pickle.load(fh)
mark("message")
context = Context(run_id=1, node_id=1, node_config=node_config, state=RecordDict(), run_config={})
reply = app(message, context)
mark("handle")
blob = pickle.dumps(reply)
mark("reply")
assert not reply.has_error(), reply.error
import term_fl
t["term_fl_file"] = term_fl.__file__
t["torch_imported"] = "torch" in sys.modules
print(json.dumps(t))
"""

STAGES = (
    ("flower: start", "spawned", "flower_start"),
    ("term-fl: import", "flower_start", "app_import"),
    ("flower: message", "app_import", "message"),
    ("term-fl: handle", "message", "handle"),
    ("flower: reply", "handle", "reply"),
)


def build_messages(scenario_name: str, workdir: Path) -> dict[str, Path]:
    """Pickle the query, train and evaluate messages the ServerApp sends in round 1 (partition 0)."""
    from flwr.app import ConfigRecord, Message, MessageType, RecordDict
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    from term_fl.config import load_scenario
    from term_fl.federation.loop import initial_arrays

    try:
        from term_fl.common.keys import SCENARIO as SCENARIO_KEY
    except ImportError:  # a tree from before term_fl.common.keys
        from term_fl.federation.loop import SCENARIO_KEY

    if scenario_name == "vehicle":
        scenario = load_scenario(REPO / "configs" / "vehicle-sensor.toml")
    else:
        scenario = load_scenario(REPO / "configs" / "fairness.toml",
                                 ["data.num_devices=10", "run.clients_per_round=5"])
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID  # a ServerApp's
    num = 23 if scenario.data.name == "vehicle" else scenario.data.synthetic.num_devices
    node_config = {"partition-id": 0, "num-partitions": num}
    arrays = initial_arrays(scenario)
    config = ConfigRecord({SCENARIO_KEY: scenario.to_json(), "server-round": 1})
    messages = {
        "query": Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=1, message_type=MessageType.QUERY),
        "train": Message(RecordDict({"arrays": arrays, "config": config}), dst_node_id=1,
                         message_type=MessageType.TRAIN),
        "evaluate": Message(RecordDict({"arrays": arrays, "config": config}), dst_node_id=1,
                            message_type=MessageType.EVALUATE),
    }
    paths = {}
    for kind, message in messages.items():
        message.metadata.__dict__["_message_id"] = f"{kind}-0"  # set by the SuperLink
        path = workdir / f"{kind}.pkl"
        path.write_bytes(pickle.dumps((message, node_config)))
        paths[kind] = path
    return paths


BUILD = r"""
import importlib.util, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])  # that tree's term_fl
spec = importlib.util.spec_from_file_location("clientapp_message", sys.argv[2])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module.build_messages(sys.argv[3], Path(sys.argv[4]))
"""


def build_for_tree(tree: Path, scenario: str, workdir: Path, env: dict[str, str]) -> dict[str, Path]:
    """The messages as that tree's ServerApp would send them (its own scenario schema)."""
    workdir.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", BUILD, str(tree), __file__, scenario, str(workdir)],
                   check=True, env=env, timeout=600)
    return {kind: workdir / f"{kind}.pkl" for kind in ("query", "train", "evaluate")}


def one_message(tree: Path, path: Path, env: dict[str, str]) -> dict:
    spawned = time.time()
    out = subprocess.run([sys.executable, "-c", CHILD, str(tree), str(path), repr(spawned)],
                         capture_output=True, text=True, env=env, check=False, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"ClientApp process failed ({tree}, {path.name}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _name(tree: Path, mode: str) -> str:
    return f"{tree}[{mode}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, action="append", default=[],
                        help="another source tree to compare (default: only this one)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--scenario", choices=("fairness", "vehicle"), default="fairness")
    parser.add_argument("--kinds", default="query,train,evaluate")
    parser.add_argument("--clientapp", default="auto",
                        help="comma-separated values of TERM_FL_CLIENTAPP to run each tree with (auto, torch)")
    parser.add_argument("--json", type=Path, help="write every measurement here")
    args = parser.parse_args(argv)
    trees = [REPO, *[t.resolve() for t in args.tree]]
    kinds = [k for k in args.kinds.split(",") if k]
    modes = [m for m in args.clientapp.split(",") if m]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}
    variants = [(tree, mode) for tree in trees for mode in modes]
    results: dict[str, dict[str, list[dict]]] = {_name(t, m): {k: [] for k in kinds} for t, m in variants}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {str(t): build_for_tree(t, args.scenario, Path(tmp) / str(i), env) for i, t in enumerate(trees)}
        for _ in range(args.reps):
            for kind in kinds:
                for tree, mode in variants:  # interleaved: A B A B
                    results[_name(tree, mode)][kind].append(
                        one_message(tree, paths[str(tree)][kind], {**env, "TERM_FL_CLIENTAPP": mode}))
    load = os.getloadavg()[0]
    print(f"ClientApp message, fresh process each ({args.scenario} scenario, partition 0, "
          f"median of {args.reps}; load average {load:.1f} on {os.cpu_count()} CPUs)")
    header = f"{'tree':<28} {'message':<9} " + " ".join(f"{s[0]:>16}" for s in STAGES)
    print(header + f" {'total':>8} {'term-fl':>8} {'share':>6}")
    summary = {}
    for tree, mode in variants:
        for kind in kinds:
            runs = results[_name(tree, mode)][kind]
            med = {name: statistics.median(r[b] - r[a] for r in runs) for name, a, b in STAGES}
            total = statistics.median(r["reply"] - r["spawned"] for r in runs)
            ours = statistics.median((r["app_import"] - r["flower_start"]) + (r["handle"] - r["message"]) for r in runs)
            cpu = statistics.median(r["handle_cpu"] - r["message_cpu"] for r in runs)
            summary[f"{_name(tree, mode)}:{kind}"] = {**med, "total": total, "term-fl": ours, "handle_cpu": cpu,
                                                      "torch_imported": runs[0]["torch_imported"]}
            label = (tree.name if tree != REPO else f"{tree.name} (this tree)") + f" [{mode}]"
            print(f"{label[:28]:<28} {kind:<9} " + " ".join(f"{med[s[0]]:>16.3f}" for s in STAGES)
                  + f" {total:>8.3f} {ours:>8.3f} {ours / total:>6.0%}"
                  + f"  torch {'imported' if runs[0]['torch_imported'] else 'not imported'}")
    if args.json:
        args.json.write_text(json.dumps({"load": load, "summary": summary, "raw": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
