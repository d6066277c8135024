"""``--ray-address``, ``--parallel`` and ``run.threads`` without a cluster: bad input refused early and by name, the
settings outside the config hash, and torch's thread count pinned for a run and given back, without moving a number.
"""

from __future__ import annotations

import json
import socket
import time

import pytest
import torch

from conftest import small_scenario
from test_cli import sweep_file
from term_fl.cli.commands import main
from term_fl.common.errors import EngineStartError
from term_fl.config import ConfigError, config_hash, with_overrides
from term_fl.engines import run_scenario
from term_fl.engines.ray_cluster import check_address
from term_fl.federation.loop import Recorder
from term_fl.learning.threads import pinned_threads


def _closed_port() -> int:
    """A port of this machine on which nothing listens (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Threads(Recorder):
    """Keeps every round's record and torch's thread count while the round was recorded."""

    def __init__(self) -> None:
        self.records, self.threads = [], []

    def record_round(self, record) -> None:
        self.records.append(record)
        self.threads.append(torch.get_num_threads())


@pytest.mark.parametrize("value", ["0", "-2"])
def test_parallel_below_one_is_refused_naming_the_option(value, tmp_path, capsys):
    code = main(["sweep", str(sweep_file(tmp_path)), "--parallel", value, "--db", str(tmp_path / "r.db"),
                 "--out", str(tmp_path / "o")])
    assert code == 2
    assert f"--parallel must be a positive number of cells at a time, got {value}" in capsys.readouterr().err
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize("command", [["sweep"], ["run", "--engine", "flower"]])
def test_an_address_where_no_cluster_answers_fails_within_seconds_naming_the_option(command, tmp_path, capsys):
    pytest.importorskip("ray")
    address = f"127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    code = main([command[0], str(sweep_file(tmp_path)), *command[1:], "--ray-address", address,
                 "--db", str(tmp_path / "r.db"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and time.monotonic() - start < 30
    assert f"{address}: no Ray cluster answers there" in err and "ray-address" in err


def test_check_address_names_the_option_and_leaves_auto_to_ray():
    with pytest.raises(EngineStartError, match=r"^run.ray_address 127.0.0.1:\d+: no Ray cluster answers there"):
        check_address(f"127.0.0.1:{_closed_port()}", "run.ray_address")
    check_address("auto")  # Ray itself looks for a cluster started on this machine


@pytest.mark.parametrize("value", ["localhost", "ray://head:10001", "head:port", "a b:1"])
def test_a_malformed_ray_address_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"run.ray_address"):
        small_scenario(f"run.ray_address={value}")


def test_parallel_on_the_flower_engine_is_refused_with_the_way_out(tmp_path, capsys):
    code = main(["sweep", str(sweep_file(tmp_path)), "--engine", "flower", "--parallel", "2",
                 "--db", str(tmp_path / "r.db"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "--parallel runs each cell as a Ray task on the in-process engine" in err
    assert "--engine inprocess" in err


def test_a_ray_address_on_the_in_process_engine_is_refused_for_a_run():
    scenario = small_scenario("run.engine=inprocess", "run.ray_address=127.0.0.1:6379")
    with pytest.raises(ConfigError, match=r"run.ray_address = '127.0.0.1:6379' joins a Ray cluster"):
        run_scenario(scenario)


def test_the_address_and_the_thread_count_leave_the_config_hash_alone():
    base = small_scenario()
    moved = with_overrides(base, {"run.ray_address": "10.0.0.1:6379", "run.threads": 4})
    assert config_hash(moved) == config_hash(base)


def test_pinned_threads_pins_and_gives_the_count_back():
    before = torch.get_num_threads()
    with pinned_threads(1):
        assert torch.get_num_threads() == 1
    with pinned_threads(0):
        assert torch.get_num_threads() == before
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("executor", ["sequential", "cohort"])
def test_a_run_records_the_same_numbers_on_one_thread_as_on_two(executor):
    runs = []
    for threads in (1, 2):
        recorder = _Threads()
        run_scenario(small_scenario("run.engine=inprocess", f"run.executor={executor}", "model.name=mlp",
                                    f"run.threads={threads}"), recorder)
        runs.append(recorder)
    one, two = runs
    assert set(one.threads) == {1} and set(two.threads) == {2}
    assert [json.dumps([r.train_rows, r.eval_rows, r.stats], default=str) for r in one.records] == \
        [json.dumps([r.train_rows, r.eval_rows, r.stats], default=str) for r in two.records]
