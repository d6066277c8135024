"""The compose topology as local processes on loopback (no Docker engine needed).

Starts what docker-compose.yml's `fairness` profile starts, with the same
flags (taken from the compose file, paths and addresses made local): a TLS
SuperLink, SuperNodes with the profile's --node-config values, and the
submitter (deploy/submit.sh + `flwr run <repo> local-test --stream`). One
SuperNode is killed (SIGKILL, a crash) once round 1 is in the results store;
the run must go on with the others, and every recorded round must be intact.

Every process started here is stopped at the end (SuperNodes before the
SuperLink; SIGTERM, then SIGKILL after a timeout), whatever happens.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import NamedTuple

import pytest

yaml = pytest.importorskip("yaml", reason="pyyaml is a test extra: pip install -e '.[test]'")

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NUM_NODES = 4
ROUNDS = 3
CLIENTS_PER_ROUND = 3
# A crashed SuperNode stays "online" at the SuperLink until it misses two 30 s
# heartbeats (Flower 1.42 constants): until then every phase that addresses it
# waits run.round_timeout. The timeout must still let live replies arrive: a
# ClientApp is a fresh process that imports torch (after a SuperNode poll of up
# to 3 s and a SuperExec poll of 1 s), so it is scaled by how long that import
# takes here: 8x, at least 30 s (20 s missed round 1 at load 52; measured: a phase takes about 5x the import on
# a loaded 2-core machine); TERM_FL_TEST_ROUND_TIMEOUT overrides.
MIN_ROUND_TIMEOUT_S = 30
RUN_DEADLINE_S = 300
SERVERAPP_EXIT_S = 5.0  # how long the ServerApp may take to record its run as interrupted once its SuperLink is gone
SECRETS_DIR = "/run/secrets/"


# --------------------------------------------------------------------------
# Process bookkeeping
# --------------------------------------------------------------------------


class Processes:
    """Processes started by this test; stopped in order by the fixture's finalizer."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.marker = f"TERM_FL_DEPLOY_TEST={uuid.uuid4().hex}"
        self.cli: list[subprocess.Popen] = []
        self.supernodes: list[subprocess.Popen] = []
        self.superlinks: list[subprocess.Popen] = []
        self.logs: dict[str, Path] = {}

    def env(self, flwr_home: Path, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FLWR_", "TERM_FL_"))}
        key, value = self.marker.split("=", 1)
        env.update(
            PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",  # flower-superexec, flwr-* of this venv
            FLWR_HOME=str(flwr_home),
            FLWR_TELEMETRY_ENABLED="0",
            FLWR_DISABLE_UPDATE_CHECK="1",
            FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
            RAY_USAGE_STATS_ENABLED="0",
            PYTHONUNBUFFERED="1",
            **{key: value},
        )
        env.update(extra)
        return env

    def start(self, group: list[subprocess.Popen], name: str, cmd: list[str], env: dict[str, str]):
        log = self.tmp / f"{name}.log"
        self.logs[name] = log
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, env=env, cwd=self.tmp, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        group.append(proc)
        return proc

    @staticmethod
    def signal_group(proc: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)  # the group of a child we started (start_new_session)
        except ProcessLookupError:
            pass

    def stop(self, proc: subprocess.Popen, timeout: float = 10.0) -> None:
        self.signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        self.signal_group(proc, signal.SIGKILL)  # also whatever the leader left in its group
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def stop_all(self) -> None:
        for proc in self.cli:
            self.stop(proc, timeout=5)
        for proc in self.supernodes:  # SuperNodes before the SuperLink
            self.stop(proc)
        for proc in self.superlinks:
            self.stop(proc)
        self.sweep()

    def sweep(self) -> None:
        """SIGKILL descendants that left their group (the SuperLink's SuperExec starts a new session)."""
        needle = self.marker.encode()
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ValueError):
                continue

    def tail(self, name: str, lines: int = 40) -> str:
        path = self.logs.get(name)
        if path is None or not path.exists():
            return f"[{name}: no log]"
        text = path.read_text(errors="replace").splitlines()[-lines:]
        return f"--- {name} (last {len(text)} lines) ---\n" + "\n".join(text)

    def tails(self) -> str:
        return "\n".join(self.tail(name) for name in self.logs)


@pytest.fixture
def procs(tmp_path, request):
    p = Processes(tmp_path)
    request.addfinalizer(p.stop_all)
    return p


# --------------------------------------------------------------------------
# The topology, from docker-compose.yml
# --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def compose_argv(service: dict) -> list[str]:
    return [*(service.get("entrypoint") or []), *(service.get("command") or [])]


def localize(args: list[str], certs: Path, replace: dict[str, str]) -> list[str]:
    """Compose paths and addresses -> local ones (secrets -> the test's certificates)."""
    out = []
    for a in args:
        a = replace.get(a, a)
        if a.startswith(SECRETS_DIR):
            a = str(certs / a[len(SECRETS_DIR):])
        out.append(a)
    return out


def set_flag(args: list[str], flag: str, value: str) -> list[str]:
    if flag in args:
        args = list(args)
        args[args.index(flag) + 1] = value
        return args
    return [*args, flag, value]


def parse_run_config(text: str) -> dict[str, str]:
    pattern = re.compile(r"(\S+?)=(\'[^\']*\'|\"[^\"]*\"|\S+)")  # flwr's run-config parser
    return {k: v.strip("\"'") for k, v in pattern.findall(text)}


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


def round_timeout_s(env: dict[str, str]) -> int:
    """run.round_timeout for this machine: 8 x the start-up time of a ClientApp process."""
    if os.environ.get("TERM_FL_TEST_ROUND_TIMEOUT"):
        return int(os.environ["TERM_FL_TEST_ROUND_TIMEOUT"])
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch, flwr.clientapp, term_fl.clientapp.app"],
                   check=True, timeout=180, env=env, capture_output=True)
    return max(MIN_ROUND_TIMEOUT_S, int(8 * (time.monotonic() - t0)) + 1)


class Topology(NamedTuple):
    """The compose topology started on loopback: its processes and where the run lands."""

    link: subprocess.Popen
    nodes: dict[int, subprocess.Popen]  # partition id -> SuperNode
    cli: subprocess.Popen  # the submitter (deploy/submit.sh + flwr run --stream)
    db: Path
    round_timeout: int
    config_toml: Path


def start_topology(procs: Processes, tmp_path: Path, **overrides: str) -> Topology:
    """docker-compose.yml's `fairness` profile as local processes: SuperLink, NUM_NODES SuperNodes, submitter."""
    for exe in ("flower-superlink", "flower-supernode", "flower-superexec", "flwr"):
        if not (BIN / exe).exists():
            pytest.skip(f"{exe} is not installed in {BIN}")
    round_timeout = round_timeout_s(procs.env(tmp_path / "flwr-probe"))
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    services = compose["services"]

    # TLS material, made by the same script as for compose
    certs = tmp_path / "certs"
    subprocess.run(["bash", str(REPO / "deploy" / "make-certs.sh"), str(certs)], check=True,
                   capture_output=True, timeout=120)

    # SuperLink: the compose command, on loopback and a free port
    port = free_port()
    link_cmd = localize(compose_argv(services["superlink"]), certs, {})
    link_cmd = set_flag(set_flag(link_cmd, "--host", "127.0.0.1"), "--port", str(port))
    assert link_cmd[0] == "flower-superlink" and "--disable-runtime-dependency-installation" in link_cmd
    link_cmd[0] = str(BIN / link_cmd[0])
    link = procs.start(procs.superlinks, "superlink", link_cmd, procs.env(tmp_path / "flwr-superlink"))

    # SuperNodes: the first NUM_NODES of the fairness profile, num-partitions made consistent
    fairness = sorted(
        (s for s in services.values()
         if "fairness" in s.get("profiles", []) and compose_argv(s)[:1] == ["flower-supernode"]),
        key=lambda s: int(re.search(r"partition-id=(\d+)", " ".join(compose_argv(s))).group(1)),
    )[:NUM_NODES]
    assert len(fairness) == NUM_NODES
    node_procs: dict[int, subprocess.Popen] = {}
    for svc in fairness:
        args = compose_argv(svc)
        host = args[args.index("--superlink") + 1]
        args = localize(args, certs, {host: f"127.0.0.1:{port}"})
        node_config = re.sub(r"num-partitions=\d+", f"num-partitions={NUM_NODES}",
                             args[args.index("--node-config") + 1])
        args = set_flag(args, "--node-config", node_config)
        pid = int(re.search(r"partition-id=(\d+)", node_config).group(1))
        # each SuperNode opens its own runtime API: distinct ports on one host (default 9094)
        args = [str(BIN / args[0]), *args[1:], "--host", "127.0.0.1", "--port", str(free_port())]
        assert "--root-certificates" in args and "--insecure" not in args
        node_procs[pid] = procs.start(procs.supernodes, f"supernode-{pid}", args,
                                      procs.env(tmp_path / f"flwr-node-{pid}"))
    assert sorted(node_procs) == list(range(NUM_NODES))

    # Submitter: deploy/submit.sh + flwr run, with the fairness profile's run config
    submit = compose_argv(services["submit-fairness"])
    submit_env = services["submit-fairness"]["environment"]
    run_config = parse_run_config(submit[submit.index("--run-config") + 1])
    scenario = run_config["scenario"]
    if scenario and not (REPO / scenario).is_file():
        print(f"note: {scenario} (fairness profile) is not in the repository: using the embedded default scenario")
        scenario = ""
    # compose's ${VAR:-default} interpolation, with the defaults (no variables set)
    defaults = re.sub(r"\$\{\w+(?::-([^}]*))?\}", lambda m: m[1] or "", run_config["overrides"])
    run_overrides = dict(item.split("=", 1) for item in shlex.split(defaults))
    run_overrides.update({
        "data.num_devices": str(NUM_NODES),
        "run.rounds": str(ROUNDS),
        "run.clients_per_round": str(CLIENTS_PER_ROUND),
        "run.round_timeout": str(round_timeout),
        "run.node_timeout": "90",
        "data.max_samples": "200",
        "client.device": "cpu",
        **overrides,
    })
    results = tmp_path / "results"
    rc_value = (f'scenario="{scenario}" overrides="{" ".join(f"{k}={v}" for k, v in run_overrides.items())}" '
                f'results-dir="{results}"')
    app_dir = submit[submit.index("run") + 1]
    connection = submit_env["TERM_FL_CONNECTION"]
    submit = localize(submit, certs, {app_dir: str(REPO), connection: "local-test"})
    submit = set_flag(submit, "--run-config", rc_value)
    submit = ["sh", str(REPO / "deploy" / "submit.sh"), *submit[1:]]
    assert submit[2:7] == ["flwr", "run", str(REPO), "local-test", "--stream"]
    cli = procs.start(
        procs.cli, "flwr-run", submit,
        procs.env(tmp_path / "flwr-cli", TERM_FL_SUPERLINK_ADDRESS=f"127.0.0.1:{port}",
                  TERM_FL_CONNECTION="local-test", TERM_FL_ROOT_CERTIFICATES=str(certs / "ca.crt"),
                  TERM_FL_WAIT_TIMEOUT="60"),
    )
    return Topology(link, node_procs, cli, results / "results.db", round_timeout, tmp_path / "flwr-cli" / "config.toml")


def test_compose_topology_runs_locally_and_survives_a_dead_supernode(procs, tmp_path):
    t_start = time.monotonic()
    topology = start_topology(procs, tmp_path)
    cli, node_procs, db, round_timeout = topology.cli, topology.nodes, topology.db, topology.round_timeout
    config_toml = topology.config_toml

    # Wait for round 1 in the results store, then crash one SuperNode
    victim = NUM_NODES - 1
    deadline = time.monotonic() + RUN_DEADLINE_S
    while not rows(db, "SELECT round FROM rounds WHERE round = 1"):
        if cli.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"round 1 never recorded (flwr run exit {cli.poll()}):\n{procs.tails()}")
        time.sleep(0.5)
    first = rows(db, "SELECT status, num_included, duration_s FROM rounds WHERE round = 1")[0]
    assert first[0] == "ok", (
        f"round 1 got no valid reply within run.round_timeout={round_timeout} s ({first}); on a busy "
        f"machine raise it with TERM_FL_TEST_ROUND_TIMEOUT=60\n{procs.tails()}"
    )
    t_kill = time.monotonic()
    procs.signal_group(node_procs[victim], signal.SIGKILL)
    node_procs[victim].wait(timeout=10)
    kill_round = max(r for (r,) in rows(db, "SELECT round FROM rounds"))

    try:
        cli.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pytest.fail(f"flwr run did not finish within {RUN_DEADLINE_S} s:\n{procs.tails()}")
    t_end = time.monotonic()

    # ---- what the store holds
    assert 'root-certificates = "/' in config_toml.read_text(), "the connection must use an absolute CA path"
    runs = rows(db, "SELECT run_id, status, rounds_completed, rounds_planned, error FROM runs")
    assert len(runs) == 1, f"{runs}\n{procs.tails()}"
    run_id, status, completed, planned, error = runs[0]
    assert (status, completed, planned) == ("finished", ROUNDS, ROUNDS), f"{runs[0]} {error}\n{procs.tails()}"
    assert cli.returncode == 0, procs.tail("flwr-run")

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
    assert last_eval and last_eval <= survivors, (last_eval, procs.tails())
    if last_eval != survivors:
        print(f"note: only partitions {sorted(last_eval)} of the survivors {sorted(survivors)} replied "
              f"within run.round_timeout={round_timeout} s in the last round (busy machine?)")

    wall = time.monotonic() - t_start
    print(f"\nlocal deployment test: wall {wall:.1f} s (run after kill {t_end - t_kill:.1f} s; "
          f"{NUM_NODES} SuperNodes, {ROUNDS} rounds, run.round_timeout={round_timeout} s, "
          f"SuperNode {victim} killed after round {kill_round})")


def test_compose_stop_stops_every_service_within_its_grace_period_and_the_serverapp_records_the_run_interrupted(
        procs, tmp_path):
    """`docker compose stop`, as processes: SIGTERM to the SuperNodes and the submitter (the services that depend
    on the SuperLink), then to the SuperLink; tini (compose's `init`) hands it to the service's process alone.
    Each must exit within its stop_grace_period (SuperNodes 5 s, the others compose's 10 s), or compose kills it.
    The run must not fail while its SuperNodes are gone, and the ServerApp, once its SuperLink is gone, records it
    as interrupted within SERVERAPP_EXIT_S; then what is left is killed (SIGKILL to every process the topology
    started). A container ends with its process at once: in compose's SuperLink container the ServerApp may not
    get those seconds (a known gap, README "Deployment")."""
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    grace = {"supernode": float(compose["services"]["fairness-supernode-0"]["stop_grace_period"].rstrip("s")),
             "other": 10.0}
    topology = start_topology(procs, tmp_path, **{"run.rounds": "50"})
    deadline = time.monotonic() + RUN_DEADLINE_S
    while not rows(topology.db, "SELECT round FROM rounds WHERE round = 1"):
        if topology.cli.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"round 1 never recorded (flwr run exit {topology.cli.poll()}):\n{procs.tails()}")
        time.sleep(0.5)
    took = {}
    for name, proc, limit in [*((f"supernode-{p}", n, grace["supernode"]) for p, n in topology.nodes.items()),
                              ("flwr-run", topology.cli, grace["other"]), ("superlink", topology.link, grace["other"])]:
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name} did not stop within {limit:g} s of SIGTERM:\n{procs.tails()}")
        took[name] = round(time.monotonic() - sent, 1)
    # The SuperNodes went first: the run waited for them (run.node_timeout) instead of failing its rounds
    status = rows(topology.db, "SELECT status FROM runs")
    assert status in ([("running",)], [("interrupted",)]), f"{status} {took}\n{procs.tails()}"
    # The ServerApp sees its SuperExec gone (Flower's parent-process monitor) and its exit handler records the run
    # as interrupted, given SERVERAPP_EXIT_S; in compose's SuperLink container, which ends with the SuperLink, it
    # may get less (README, "Deployment": the run then shows lost a minute later)
    deadline = time.monotonic() + SERVERAPP_EXIT_S
    while rows(topology.db, "SELECT status FROM runs") == [("running",)] and time.monotonic() < deadline:
        time.sleep(0.2)
    procs.sweep()  # what the superlink process left
    runs = rows(topology.db, "SELECT status, error FROM runs")
    assert len(runs) == 1 and runs[0][0] == "interrupted", f"{runs} {took}\n{procs.tails()}"
    print(f"\ncompose stop, as processes: seconds from SIGTERM to exit {took}; the run: {runs[0]}")
