"""Shared pieces of the benchmarks: options, scenarios, timing helpers, result rows.

Every benchmark module exposes ``run(opts: Options) -> BenchResult``. A
result holds table rows (what ``python -m benchmarks`` prints) and the raw
numbers (what it writes to JSON). Nothing here asserts anything about time.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from term_fl.config import Scenario, load_scenario

REPO = Path(__file__).resolve().parents[1]
SHARED_VEHICLE = REPO.parent / "shared" / "data" / "vehicle" / "vehicle_fewshot.json"
VEHICLE_CONFIG = REPO / "configs" / "vehicle-sensor.toml"

# Until configs/vehicle-sensor.toml exists: the vehicle-sensor scenario on the embedded defaults.
# The embedded default runs a FedAvg reference too, batched, evaluated every 10th round: the benchmarks
# time one run, sequential unless they say otherwise, evaluated every round.
ONE_RUN = ["run.reference=none", "run.executor=sequential", "run.evaluate_every=1"]
VEHICLE_FALLBACK = [
    *ONE_RUN,
    "name=vehicle-sensor",
    "data.name=vehicle",
    "model.name=linear_svm",
    "data.train_fraction=0.5",
    "data.val_fraction=0.2",
    "data.test_fraction=0.3",
    "run.clients_per_round=10",
]
# When the vehicle data is missing: a Synthetic(1, 1) federation of the same shape.
SYNTHETIC_FALLBACK = [
    *ONE_RUN,
    "name=synthetic-23",
    "data.name=synthetic",
    "data.num_devices=23",
    "model.name=logreg",
    "run.clients_per_round=10",
]

QUIET_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
}

Size = Literal["small", "full"]
Device = Literal["cpu", "cuda"]


@dataclass(frozen=True)
class Options:
    """Command-line options every benchmark sees."""

    size: Size = "small"
    device: Device = "cpu"
    work_dir: Path = Path("/tmp")

    @property
    def device_overrides(self) -> list[str]:
        """Overrides that put clients on the chosen device (GPU: 4 virtual clients per GPU)."""
        if self.device == "cuda":
            return ["client.device=cuda", "resources.num_gpus=0.25"]
        return ["client.device=cpu", "resources.num_gpus=0.0"]


@dataclass
class Row:
    """One line of the printed table."""

    benchmark: str
    measured: str
    baseline: str
    ratio_target: str
    verdict: str  # PASS | MISS | info | n/a | ERROR


@dataclass
class BenchResult:
    """Rows for the table and every raw number for the JSON file."""

    name: str
    rows: list[Row] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rows": [asdict(r) for r in self.rows],
            "raw": self.raw,
            "error": self.error,
            "wall_s": self.wall_s,
        }


def quiet_environment() -> None:
    """No telemetry, no update checks, no dependency installs; Flower logs only warnings."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    import flwr.supercore.logger  # noqa: F401 - sets the "flwr" logger to DEBUG on import: import it first

    logging.getLogger("flwr").setLevel(logging.WARNING)
    logging.getLogger("term_fl").setLevel(logging.WARNING)


def vehicle_path() -> Path | None:
    """The real vehicle data: $TERM_FL_VEHICLE_DATA, else ../shared beside the repo, else None."""
    env = os.environ.get("TERM_FL_VEHICLE_DATA")
    for candidate in (Path(env) if env else None, SHARED_VEHICLE):
        if candidate is not None and candidate.is_file():
            return candidate.resolve()
    return None


def vehicle_scenario(opts: Options, *overrides: str) -> tuple[Scenario, dict[str, Any]]:
    """The vehicle-sensor scenario (or a Synthetic stand-in of the same shape) and where it came from.

    configs/vehicle-sensor.toml when it exists, else the embedded defaults with
    VEHICLE_FALLBACK; without the vehicle data, SYNTHETIC_FALLBACK (23 devices,
    logistic regression: the linear SVM is binary).
    """
    path = vehicle_path()
    common = ["sweep={}", *opts.device_overrides, *overrides]
    if path is None:
        scenario = load_scenario(None, [*SYNTHETIC_FALLBACK, *common], environ={})
        return scenario, {"data": "synthetic (vehicle data not found)", "config": "embedded default"}
    environ = {"TERM_FL_VEHICLE_DATA": str(path)}
    if VEHICLE_CONFIG.is_file():
        scenario = load_scenario(VEHICLE_CONFIG, common, environ=environ)
        source = str(VEHICLE_CONFIG.relative_to(REPO))
    else:
        scenario = load_scenario(None, [*VEHICLE_FALLBACK, *common], environ=environ)
        source = "embedded default + " + " ".join(VEHICLE_FALLBACK)
    return scenario, {"data": str(path), "config": source}


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def mean(values: Sequence[float]) -> float:
    return float(statistics.fmean(values)) if values else float("nan")


@contextmanager
def stopwatch() -> Iterator[Callable[[], float]]:
    """``with stopwatch() as elapsed: ...; elapsed()`` gives seconds since entry (frozen at exit)."""
    start = time.perf_counter()
    end: list[float] = []
    yield lambda: (end[0] if end else time.perf_counter()) - start
    end.append(time.perf_counter())


def fmt_s(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "MISS")
