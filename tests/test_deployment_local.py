"""The compose topology as local processes on loopback (no Docker engine needed).

deploy/local_topology.py starts what docker-compose.yml's ``fairness``
profile starts, with the same flags: a TLS SuperLink with SuperNode
authentication, a registered key per SuperNode, SuperNodes under
``term-fl-supernode`` (ClientApp processes forked from one that imported
torch), and the submitter (deploy/submit.sh + ``flwr run``).

- One SuperNode is killed (SIGKILL, a crash) once round 1 is in the results
  store; the run must go on with the others, and every recorded round must
  be intact.
- The same run with forked ClientApps and with Flower's fresh process per
  message (``TERM_FL_PREFORK=0``) stores the same numbers, bit for bit.

Every process started here is stopped at the end (SuperNodes before the
SuperLink; SIGTERM, then SIGKILL after a timeout), whatever happens.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from compose_files import REPO, load_module

pytestmark = pytest.mark.slow

topology = load_module("term_fl_local_topology", REPO / "deploy" / "local_topology.py")

NUM_NODES = 4
ROUNDS = 3
CLIENTS_PER_ROUND = 3
# A crashed SuperNode stays "online" at the SuperLink until it misses two 30 s
# heartbeats (Flower 1.42 constants): until then every phase that addresses it
# waits run.round_timeout. The timeout must still let live replies arrive:
# scaled by how long importing torch and term-fl takes here (a measure of the
# machine's load), 8x, at least 30 s; TERM_FL_TEST_ROUND_TIMEOUT overrides.
MIN_ROUND_TIMEOUT_S = 30
RUN_DEADLINE_S = 300
SERVERAPP_EXIT_S = 5.0  # how long the ServerApp may take to record its run as interrupted once its SuperLink is gone


def rows(db: Path, sql: str, *params) -> list[tuple]:
    if not db.exists():
        return []
    try:
        con = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute(sql, params).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return []


def round_timeout_s() -> int:
    """run.round_timeout for this machine: 8 x the time it takes to import torch and term-fl's ClientApp."""
    if os.environ.get("TERM_FL_TEST_ROUND_TIMEOUT"):
        return int(os.environ["TERM_FL_TEST_ROUND_TIMEOUT"])
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch, flwr.clientapp, term_fl.clientapp.app"],
                   check=True, timeout=180, capture_output=True)
    return max(MIN_ROUND_TIMEOUT_S, int(8 * (time.monotonic() - t0)) + 1)


@pytest.fixture
def local(tmp_path, request):
    """A LocalTopology factory; every topology it made is stopped at the end."""
    made = []

    def make(name: str, nodes: int, **env: str):
        topo = topology.LocalTopology(tmp_path / name, nodes, env=env)
        made.append(topo)
        return topo

    yield make
    for topo in made:
        topo.stop_all()


def needs_flower() -> None:
    for exe in ("flower-superlink", "flower-supernode", "flower-superexec", "flwr", "term-fl-supernode"):
        if not (topology.BIN / exe).exists():
            pytest.skip(f"{exe} is not installed in {topology.BIN}")


def test_compose_topology_runs_locally_and_survives_a_dead_supernode(local):
    needs_flower()
    t_start = time.monotonic()
    round_timeout = round_timeout_s()
    topo = local("crash", NUM_NODES)
    topo.up()
    cli = topo.submit(f"run.clients_per_round={CLIENTS_PER_ROUND} run.round_timeout={round_timeout} "
                      "run.node_timeout=90 data.max_samples=200 client.device=cpu", rounds=ROUNDS)

    # Wait for round 1 in the results store, then crash one SuperNode
    db = topo.results / "results.db"
    victim = NUM_NODES - 1
    deadline = time.monotonic() + RUN_DEADLINE_S
    while not rows(db, "SELECT round FROM rounds WHERE round = 1"):
        if cli.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"round 1 never recorded (flwr run exit {cli.poll()}):\n{topo.tails()}")
        time.sleep(0.5)
    first = rows(db, "SELECT status, num_included, duration_s FROM rounds WHERE round = 1")[0]
    assert first[0] == "ok", (
        f"round 1 got no valid reply within run.round_timeout={round_timeout} s ({first}); on a busy "
        f"machine raise it with TERM_FL_TEST_ROUND_TIMEOUT=60\n{topo.tails()}"
    )
    t_kill = time.monotonic()
    topo.signal_group(topo.supernodes[victim], signal.SIGKILL)  # the launcher, the SuperNode, its ClientApps
    topo.supernodes[victim].wait(timeout=10)
    kill_round = max(r for (r,) in rows(db, "SELECT round FROM rounds"))

    try:
        cli.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pytest.fail(f"flwr run did not finish within {RUN_DEADLINE_S} s:\n{topo.tails()}")
    t_end = time.monotonic()

    # ---- what the store holds
    config_toml = topo.work / "home-flwr-run" / "config.toml"
    assert 'root-certificates = "/' in config_toml.read_text(), "the connection must use an absolute CA path"
    runs = rows(db, "SELECT run_id, status, rounds_completed, rounds_planned, error FROM runs")
    assert len(runs) == 1, f"{runs}\n{topo.tails()}"
    run_id, status, completed, planned, error = runs[0]
    assert (status, completed, planned) == ("finished", ROUNDS, ROUNDS), f"{runs[0]} {error}\n{topo.tails()}"
    assert cli.returncode == 0, topo.tail("flwr-run")

    recorded = [r for (r,) in rows(db, "SELECT round FROM rounds WHERE run_id = ? ORDER BY round", run_id)]
    assert recorded == list(range(1, ROUNDS + 1))
    survivors = set(range(NUM_NODES)) - {victim}
    for rnd in recorded:
        evals = rows(db, "SELECT partition_id, split, loss, accuracy, correct, examples FROM device_eval "
                         "WHERE run_id = ? AND round = ?", run_id, rnd)
        by_split = {split: {r[0] for r in evals if r[1] == split} for split in ("val", "test")}
        assert by_split["val"] and by_split["val"] == by_split["test"], (rnd, by_split)
        for pid, split, loss, acc, correct, examples in evals:
            assert 0 <= pid < NUM_NODES
            assert 0.0 <= acc <= 1.0 and examples > 0 and 0 <= correct <= examples, (rnd, pid, split)
            assert loss is not None and loss >= 0.0
        stats = dict(rows(db, "SELECT split, stats_json FROM round_stats WHERE run_id = ? AND round = ?", run_id, rnd))
        assert set(stats) == {"val", "test"}, (rnd, stats)
        for split, text in stats.items():
            assert '"worst_10"' in text and '"mean"' in text, (rnd, split, text[:200])
        train = rows(db, "SELECT partition_id, included, train_loss, num_examples FROM device_train "
                         "WHERE run_id = ? AND round = ?", run_id, rnd)
        assert len(train) == CLIENTS_PER_ROUND, (rnd, train)
        for pid, included, loss, n in train:
            assert 0 <= pid < NUM_NODES
            if included:
                assert loss is not None and n and n > 0
        if rnd == 1:
            assert by_split["test"] == set(range(NUM_NODES)), "every SuperNode evaluated before the kill"
        if rnd > kill_round:
            # the crashed node never replies again; the others go on
            assert victim not in by_split["test"], (rnd, by_split)
            assert {pid for pid, included, _, _ in train if included} <= survivors
    last_eval = {r[0] for r in rows(db, "SELECT partition_id FROM device_eval WHERE run_id = ? AND round = ? "
                                        "AND split = 'test'", run_id, recorded[-1])}
    assert last_eval and last_eval <= survivors, (last_eval, topo.tails())
    if last_eval != survivors:
        print(f"note: only partitions {sorted(last_eval)} of the survivors {sorted(survivors)} replied "
              f"within run.round_timeout={round_timeout} s in the last round (busy machine?)")

    wall = time.monotonic() - t_start
    print(f"\nlocal deployment test: wall {wall:.1f} s (run after kill {t_end - t_kill:.1f} s; "
          f"{NUM_NODES} SuperNodes, {ROUNDS} rounds, run.round_timeout={round_timeout} s, "
          f"SuperNode {victim} killed after round {kill_round})")


# What a run stores that does not depend on when or where it ran (run ids, times and paths left out).
STORED = {
    "rounds": "SELECT round, status, num_sampled, num_included, excluded_json FROM rounds ORDER BY round",
    "device_train": "SELECT round, partition_id, sampled, included, train_loss, train_loss_after, tilted_weight, "
                    "num_examples FROM device_train ORDER BY round, partition_id",
    "device_eval": "SELECT round, partition_id, split, loss, accuracy, correct, examples FROM device_eval "
                   "ORDER BY round, split, partition_id",
    "round_stats": "SELECT round, split, mean, pooled_mean, worst_10, best_10, std, stats_json, var, cvar, evar, tivar "
                   "FROM round_stats ORDER BY round, split",
    "runs": "SELECT name, scenario, engine, strategy, strategy_params_json, seed, config_hash, status, "
            "rounds_completed FROM runs",
}


def stored(db: Path) -> dict[str, list[tuple]]:
    return {table: rows(db, sql) for table, sql in STORED.items()}


def final_model(results: Path):  # noqa: ANN201
    import torch

    (run_dir,) = [p for p in results.iterdir() if (p / "model.pt").is_file()]
    return torch.load(run_dir / "model.pt", map_location="cpu", weights_only=True)


def test_forked_clientapps_store_the_numbers_of_a_fresh_process_per_message(local):
    """Same seed, same stored results: term-fl-supernode's forked ClientApps against Flower's own
    flwr-clientapp per message (TERM_FL_PREFORK=0), every stored row and the final model compared exactly."""
    needs_flower()
    # both deployments at once (their own ports and folders): when a reply comes changes no number
    topologies = {name: local(name, 3, TERM_FL_PREFORK=prefork) for name, prefork in (("forked", "1"),
                                                                                        ("per-message", "0"))}
    for topo in topologies.values():
        topo.up()
    clis = {name: topo.submit("run.clients_per_round=2 run.seed=5 strategy.t=2.0 client.device=cpu", rounds=2)
            for name, topo in topologies.items()}
    results = {}
    for name, topo in topologies.items():
        try:
            code = clis[name].wait(timeout=RUN_DEADLINE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name}: flwr run did not finish within {RUN_DEADLINE_S} s:\n{topo.tails()}")
        assert code == 0, topo.tails()
        logs = "\n".join(p.read_text(errors="replace") for p in topo.work.glob("fairness-supernode-*.log"))
        assert ("imported once" in logs) == (name == "forked"), f"{name}: which ClientApp processes ran"
        results[name] = (stored(topo.results / "results.db"), final_model(topo.results))
    (forked, forked_model), (fresh, fresh_model) = results["forked"], results["per-message"]
    assert forked["runs"][0][7:] == ("finished", 2) and len(forked["device_eval"]) == 2 * 2 * 3
    for table in STORED:
        assert forked[table] == fresh[table], f"{table} differs between forked and fresh ClientApp processes"
    assert forked_model.keys() == fresh_model.keys()
    for key, tensor in forked_model.items():
        assert tensor.equal(fresh_model[key]), key


def test_compose_stop_stops_every_service_within_its_grace_period_and_the_serverapp_records_the_run_interrupted(
        local):
    """`docker compose stop`, as processes: SIGTERM to the SuperNodes and the submitter (the services that depend
    on the SuperLink), then to the SuperLink; compose's `init` hands it to the service's process alone. Each must
    exit within its stop_grace_period (SuperNodes 5 s, the others compose's 10 s), or compose kills it. The run
    must not fail while its SuperNodes are gone, and the ServerApp, once its SuperLink is gone, records it as
    interrupted within SERVERAPP_EXIT_S; then what is left is killed. A container ends with its process at once:
    in compose's SuperLink container the ServerApp may not get those seconds (a known gap, deploy/README.md)."""
    import yaml

    needs_flower()
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    grace = {"supernode": float(compose["services"]["fairness-supernode-0"]["stop_grace_period"].rstrip("s")),
             "other": 10.0}
    topo = local("stop", NUM_NODES)
    topo.up()
    cli = topo.submit(f"run.clients_per_round={CLIENTS_PER_ROUND} run.round_timeout={round_timeout_s()} "
                      "run.node_timeout=90 data.max_samples=200 client.device=cpu", rounds=50)
    db = topo.results / "results.db"
    deadline = time.monotonic() + RUN_DEADLINE_S
    while not rows(db, "SELECT round FROM rounds WHERE round = 1"):
        if cli.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"round 1 never recorded (flwr run exit {cli.poll()}):\n{topo.tails()}")
        time.sleep(0.5)
    took = {}
    services = [*((f"supernode-{p}", n, grace["supernode"]) for p, n in topo.supernodes.items()),
                ("flwr-run", cli, grace["other"]), *(("superlink", link, grace["other"]) for link in topo.superlinks)]
    for name, proc, limit in services:
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name} did not stop within {limit:g} s of SIGTERM:\n{topo.tails()}")
        took[name] = round(time.monotonic() - sent, 1)
    # The SuperNodes went first: the run waited for them (run.node_timeout) instead of failing its rounds
    status = rows(db, "SELECT status FROM runs")
    assert status in ([("running",)], [("interrupted",)]), f"{status} {took}\n{topo.tails()}"
    # The ServerApp sees its SuperExec gone and its exit handler records the run as interrupted
    deadline = time.monotonic() + SERVERAPP_EXIT_S
    while rows(db, "SELECT status FROM runs") == [("running",)] and time.monotonic() < deadline:
        time.sleep(0.2)
    topo.stop_all()  # what the superlink process left
    runs = rows(db, "SELECT status, error FROM runs")
    assert len(runs) == 1 and runs[0][0] == "interrupted", f"{runs} {took}\n{topo.tails()}"
    print(f"\ncompose stop, as processes: seconds from SIGTERM to exit {took}; the run: {runs[0]}")
