"""One scale point, run in a child process: the Flower Simulation Engine with N virtual clients.

    python -m benchmarks.scale_worker --num-clients N --clients-per-round M --rounds R \
        --evaluate-fraction F --device cpu --progress FILE [--profile]

Starts one ``ray_session``, runs ``term_fl.federation.loop.run_federation`` as the
ServerApp (Synthetic data, ``data.max_samples`` = 60) behind a
:class:`benchmarks.timing_grid.TimingGrid`, and appends one JSON object per
event to FILE as it happens (so a run stopped at a deadline still tells how
far it got): ray_started, simulation_started, server_started, call (each
send_and_receive: query / train / evaluate), round, done, error, profile.
SIGTERM writes the profile (with --profile) and exits at once; the parent
then stops the process tree.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from typing import Any

from .common import ONE_RUN, Options, quiet_environment
from .sampler import StackSampler
from .timing_grid import Call, TimingGrid


class Progress:
    def __init__(self, path: str) -> None:
        self._fh = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
        self.t0 = time.perf_counter()

    def emit(self, event: str, **fields: Any) -> None:
        self._fh.write(json.dumps({"event": event, "t": time.perf_counter() - self.t0, **fields}) + "\n")
        self._fh.flush()


def scale_scenario(num_clients: int, clients_per_round: int, rounds: int, evaluate_fraction: float, device: str):
    from term_fl.config import load_scenario

    return load_scenario(
        None,
        [
            "sweep={}", *ONE_RUN, "name=scale", "data.name=synthetic", f"data.num_devices={num_clients}",
            "data.max_samples=60", "model.name=logreg", "strategy.name=term", "strategy.t=1.0",
            f"run.clients_per_round={clients_per_round}", f"run.rounds={rounds}",
            f"run.evaluate_fraction={evaluate_fraction}", "run.engine=flower",
            "run.node_timeout=3600", "run.round_timeout=3600",
            *Options(device=device).device_overrides,  # type: ignore[arg-type]
        ],
        environ={},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale_worker")
    parser.add_argument("--num-clients", type=int, required=True)
    parser.add_argument("--clients-per-round", type=int, required=True)
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--evaluate-fraction", type=float, required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--progress", required=True)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--linear-dispatcher", action="store_true",
                        help="term-fl's linear dispatcher (patch 'dispatcher' of term_fl.flower_internals); "
                             "without it Flower's own, which polls nodes x messages")
    args = parser.parse_args(argv)

    quiet_environment()
    progress = Progress(args.progress)
    sampler = StackSampler() if args.profile else None

    def on_term(signum: int, frame: object) -> None:
        if sampler is not None:
            progress.emit("profile", **sampler.report())
        progress.emit("terminated")
        os._exit(3)

    signal.signal(signal.SIGTERM, on_term)

    from flwr.app import Context
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation

    from term_fl.clientapp.cache import app as client_app
    from term_fl.engines.flower import backend_config, ray_session, without_run_simulation_notice
    from term_fl.federation.loop import Recorder, RoundRecord, run_federation

    from term_fl.flower_internals import override, simulation_node_table

    # the engine's node table in both points (discovery is the 'discovery' benchmark's subject)
    patches = ["node-table", *(["dispatcher"] if args.linear_dispatcher else [])]
    scenario = scale_scenario(args.num_clients, args.clients_per_round, args.rounds, args.evaluate_fraction, args.device)
    server_app = ServerApp()
    outcome: dict[str, Any] = {}
    node_table: list[Any] = []  # the engine's node -> partition table (term_fl.flower_internals)

    @server_app.main()
    def server(grid: Grid, context: Context) -> None:
        progress.emit("server_started", nodes_connected=len(list(grid.get_node_ids())))

        def on_call(call: Call) -> None:
            progress.emit("call", kind=call.kind, messages=call.messages, replies=call.replies,
                          duration_s=call.duration)

        def on_round(record: RoundRecord, total: int) -> None:
            progress.emit("round", round=record.server_round, duration_s=record.duration_s, status=record.status,
                          trained=len(record.train_rows), evaluated=len(record.eval_rows) // 2)

        try:
            result = run_federation(TimingGrid(grid, on_call), scenario, Recorder(), on_round=on_round,
                                    node_partitions=node_table[0])
            outcome["discovery_s"] = result.discovery_s
            progress.emit("done", discovery_s=result.discovery_s, rounds_completed=result.rounds_completed)
        except BaseException as exc:  # reported to the parent through the progress file
            progress.emit("error", error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
            outcome["error"] = exc

    if sampler is not None:
        sampler.__enter__()
    try:
        t0 = time.perf_counter()
        with override(patches=patches), ray_session(scenario), \
                tempfile.TemporaryDirectory(prefix="tfl-ray-", dir="/tmp") as ray_tmp:
            progress.emit("ray_started", duration_s=time.perf_counter() - t0)
            progress.emit("simulation_started")
            with without_run_simulation_notice(), simulation_node_table() as known:
                node_table.append(known)
                run_simulation(server_app=server_app, client_app=client_app, num_supernodes=args.num_clients,
                               backend_config=backend_config(scenario, ray_tmp))
            progress.emit("simulation_ended")
        progress.emit("ray_stopped")
    finally:
        if sampler is not None:
            sampler.__exit__(None, None, None)
            progress.emit("profile", **sampler.report())
    return 1 if "error" in outcome or "discovery_s" not in outcome else 0


if __name__ == "__main__":
    sys.exit(main())
