"""`python -m benchmarks --size small`: every benchmark runs and reports numbers; nothing is left running.

Nothing here asserts anything about time: the numbers depend on the machine
and its load. The slow test takes a few minutes (Ray starts several times).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.__main__ import BENCHMARKS, check_device, main, parse_args  # noqa: E402

NUMERIC = {
    "inprocess_vs_reference": [("engine_median_s",), ("reference_median_s",), ("ratio",)],
    "vehicle_table": [("inprocess", "total_s"), ("inprocess", "scaled_30_rounds_s"), ("flower", "total_s"),
                      ("flower", "scaled_30_rounds_s"), ("flower", "ray_start_s")],
    "term_vs_flower_fedavg": [("term_mean_s",), ("flwr_fedavg_mean_s",), ("ratio_mean",)],
    "store": [("median_s",), ("num_devices",)],
    "dashboard": [("stores", key, view, "median_s") for key in ("history_small", "history_large", "rounds_short",
                                                                "rounds_long")
                  for view in ("runs_page", "api_runs", "api_compare", "compare_page", "cli_runs", "report")]
    + [("ratios", "history", "api_runs"), ("ratios", "rounds", "report")],
    "discovery": [("points", "query", "discovery_s"), ("points", "engine", "discovery_s"),
                  ("points", "query", "wall_s"), ("points", "engine", "wall_s")],
    "flower_patches": [("dispatcher", mode, "round_median_s") for mode in ("flower", "linear")]
    + [("node_table", mode, "discovery_s") for mode in ("query", "engine")]
    + [("actor_reuse", mode, key) for mode in ("off", "on") for key in ("overhead_median_s", "total_s")],
    "cohort": [("vehicle", "client_ratio"), ("vehicle", "table_ratio"), ("vehicle", "cohort", "client_round_median_s"),
               ("synthetic", "logreg-60", "ratio"), ("synthetic", "mlp-60", "ratio"), ("floor", "mlp-60", "floor_s")],
    "arith": [("medians_s", part, clock) for part in ("floor_a", "floor_b", "kernel", "train_compiled")
              for clock in ("wall", "cpu")]
    + [("steady_round_s", ex, clock) for ex in ("auto", "cohort") for clock in ("wall", "cpu")]
    + [("load_start", 0), ("load_end", 0)],
}
SCALE_POINT = [("round_median_s",), ("discovery_s",), ("startup_to_server_s",), ("memory", "peak_rss_bytes")]


def _get(data: dict, path: tuple[str, ...]):
    for key in path:
        data = data[key]
    return data


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def test_unknown_benchmark_is_refused():
    with pytest.raises(SystemExit):
        parse_args(["--only", "nope"])
    assert parse_args(["--only", "store,scale"]).names == ["store", "scale"]


def test_cuda_without_a_gpu_is_a_clear_error(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert "no CUDA device" in check_device("cuda")
    assert main(["--device", "cuda", "--out", str(tmp_path / "r.json")]) == 2
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_small_benchmarks_report_every_number_and_leave_no_ray(tmp_path):
    import ray

    out = tmp_path / "results.json"
    assert main(["--size", "small", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["benchmarks"]) == set(BENCHMARKS)
    for name, bench in data["benchmarks"].items():
        assert bench["error"] is None, bench["error"]
        assert bench["rows"], name
        for path in NUMERIC.get(name, []):
            assert _is_number(_get(bench["raw"], path)), (name, path)
    scale = data["benchmarks"]["scale"]["raw"]
    points = [p for dispatcher in scale["points"].values() for p in dispatcher]
    assert points
    for point in points:
        assert point["rounds_completed"] == point["rounds_planned"] and not point["timed_out"]
        for path in SCALE_POINT:
            assert _is_number(_get(point, path)), path
    assert all(_is_number(p["one_poll_s"]) for p in scale["linkstate_probe"])
    machine = data["machine"]
    assert _is_number(machine["cpu_count"]) and machine["versions"]["torch"] and machine["versions"]["flwr"]
    assert data["table_markdown"].startswith("| benchmark |")
    assert not ray.is_initialized()


def test_the_benchmarks_that_need_no_ray_run_without_it(tmp_path):
    """`python -m benchmarks` where Ray is not installed: the store benchmark runs, the Ray ones are skipped."""
    import subprocess

    out = tmp_path / "r.json"
    code = ("import sys; sys.modules['ray'] = None\n"
            "import benchmarks.cohort, benchmarks.cohort_equivalence\n"  # the cohort group needs no Ray either
            "from benchmarks.__main__ import main\n"
            f"sys.exit(main(['--only', 'store,vehicle_table', '--out', {str(out)!r}]))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "vehicle_table skipped" in result.stdout and "needs Ray" in result.stdout
    assert "'term-fl[sim]'" in " ".join(result.stdout.split()), result.stdout  # the extra, named whole
    data = json.loads(out.read_text())
    assert list(data["benchmarks"]) == ["store"]
    assert data["machine"]["versions"]["ray"] is None


def test_deployment_round_phases_come_from_the_serverapp_log(tmp_path):
    """benchmarks.deployment_rounds splits a round into its training and evaluation phases from the
    timestamped ServerApp log lines (docker compose logs --timestamps, or the local run's stamps)."""
    from benchmarks.deployment_rounds import _read_compose_log, phases

    log = [
        "submit-fairness-1  | 2026-11-26T11:13:10.000000000Z INFO :      Start `flwr-serverapp` process",
        "superlink-1  | 2026-11-26T11:13:11.000000000Z configure_train: not the submitter's line",
        "submit-fairness-1  | 2026-11-26T11:13:20.500000000Z INFO :      configure_train: sampled partitions [0, 1]",
        "submit-fairness-1  | 2026-11-26T11:13:29.500000000Z INFO :      aggregate_train: 2 valid replies, 0 excluded",
        "submit-fairness-1  | 2026-11-26T11:13:29.500000000Z INFO :      aggregate_train: round 1: running_estimate",
        "submit-fairness-1  | 2026-11-26T11:13:29.750000000Z INFO :      configure_evaluate: sampled partitions",
        "submit-fairness-1  | 2026-11-26T11:13:42.250000000Z INFO :      aggregate_evaluate: 4 valid replies",
    ]
    path = tmp_path / "fairness.log"
    path.write_text("\n".join(log) + "\n")
    lines = _read_compose_log(path, "submit-fairness")
    assert len(lines) == 6
    got = phases(lines)
    assert got["train_s"] == pytest.approx([9.0]) and got["evaluate_s"] == pytest.approx([12.5])
    assert got["start_to_first_round_s"] == pytest.approx(10.5)
