"""What the numbers were measured on: machine, versions, git commit."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone
from typing import Any

from .common import REPO
from .memory import proc_kib_field


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _mem_total() -> int | None:
    return proc_kib_field("/proc/meminfo", "MemTotal:")


def machine_info() -> dict[str, Any]:
    import importlib.util
    from importlib.metadata import version

    import flwr
    import numpy
    import torch

    # The benchmarks that need no Ray run without it.
    ray_version = version("ray") if importlib.util.find_spec("ray") else None

    cuda = torch.cuda.is_available()
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": _cpu_model(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "memory_total_bytes": _mem_total(),
        "versions": {"torch": torch.__version__, "flwr": flwr.__version__, "ray": ray_version,
                     "numpy": numpy.__version__},
        "cuda_available": cuda,
        "cuda_device": torch.cuda.get_device_name(0) if cuda else None,
        "cuda_device_count": torch.cuda.device_count() if cuda else 0,
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(status) if status is not None else None,
    }
