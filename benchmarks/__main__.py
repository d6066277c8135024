"""``python -m benchmarks``: run the benchmarks, print one table, write JSON.

    python -m benchmarks [--size small|full] [--device cpu|cuda] [--only NAME[,NAME]] [--out FILE]

--size small runs tiny sizes (seconds to a few minutes, for CI); --size full
the real sizes (see benchmarks/README.md). Every ratio is measured within
this run against a baseline measured in this run. Nothing asserts anything
about time: the exit status is 0 unless a benchmark raised.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
import traceback
from pathlib import Path

from rich.console import Console

from .common import BenchResult, Options, Row, quiet_environment

BENCHMARKS = ("inprocess_vs_reference", "vehicle_table", "term_vs_flower_fedavg", "scale", "discovery",
              "flower_patches", "store", "dashboard", "cohort", "arith")
NEEDS_RAY = ("vehicle_table", "term_vs_flower_fedavg", "scale", "discovery", "flower_patches")  # Flower's engine
DEFAULT_OUT = Path(__file__).resolve().parent / "results.json"


def _module(name: str):  # noqa: ANN202
    import importlib

    return importlib.import_module(f"benchmarks.{name}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=("small", "full"), default="small")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--only", default="", help=f"comma-separated subset of: {', '.join(BENCHMARKS)}")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"--only: unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    args.names = names
    return args


def check_device(device: str) -> str | None:
    """An error message when --device cuda is asked for on a machine without CUDA."""
    if device != "cuda":
        return None
    import torch

    if not torch.cuda.is_available():
        return (
            f"--device cuda: torch {torch.__version__} finds no CUDA device on this machine "
            "(torch.cuda.is_available() is False); run on a machine with an NVIDIA GPU and a CUDA "
            "build of torch, or use --device cpu"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console()
    error = check_device(args.device)
    if error:
        console.print(f"[bold red]error:[/] {error}")
        return 2
    quiet_environment()
    from .machine import machine_info
    from .report import print_table, write_json

    results: list[BenchResult] = []
    with tempfile.TemporaryDirectory(prefix="tfl-bench-") as work:
        opts = Options(size=args.size, device=args.device, work_dir=Path(work))
        for name in args.names:
            console.print(f"[bold]running {name}[/] ({args.size}, {args.device}) ...")
            start = time.perf_counter()
            if name in NEEDS_RAY and importlib.util.find_spec("ray") is None:
                console.print(f"  {name} skipped: it runs Flower's Simulation Engine, which needs Ray "
                              "(pip install 'term-fl[sim]')", markup=False)  # [sim] is not a style
                continue
            try:
                result = _module(name).run(opts)
            except Exception as exc:  # one failing benchmark must not hide the others
                result = BenchResult(name, error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
                result.rows.append(Row(name, f"{type(exc).__name__}: {exc}", "-", "-", "ERROR"))
            result.wall_s = time.perf_counter() - start
            console.print(f"  {name} done in {result.wall_s:.1f} s")
            results.append(result)
            meta = {"size": args.size, "device": args.device, "machine": machine_info()}
            write_json(args.out, results, meta)  # after every benchmark: a crash keeps what ran
    print_table(results, f"term-fl benchmarks ({args.size}, {args.device})", console)
    console.print(f"JSON: {args.out}")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
