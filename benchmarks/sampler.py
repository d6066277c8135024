"""A tiny sampling profiler of every Python thread of this process (no dependencies).

cProfile sees one thread; the Flower Simulation Engine does its work in
several (the ServerApp, the link-state poller that hands messages to Ray
actors, the reply injector, one worker per actor). Every ``interval`` s this
samples ``sys._current_frames()`` and counts, per thread name, the innermost
function ("self") and every function on the stack ("inclusive"). A thread
waiting on a lock or in ``time.sleep`` shows up where it waits: read the
counts as "where each thread is", not CPU time. Samples are taken only when
the sampler thread holds the GIL, so CPU-bound pure-Python code is
under-sampled relative to code that releases the GIL.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from pathlib import Path


def _where(frame) -> str:  # noqa: ANN001
    code = frame.f_code
    parts = Path(code.co_filename).parts
    short = "/".join(parts[-3:]) if "site-packages" in parts or len(parts) > 3 else code.co_filename
    return f"{code.co_name} ({short}:{code.co_firstlineno})"


class StackSampler:
    """``with StackSampler() as s: ...``; then ``s.report(top)``."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.samples = 0
        self.self_counts: dict[str, Counter[str]] = {}
        self.inclusive_counts: dict[str, Counter[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stack-sampler", daemon=True)

    def _loop(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                name = names.get(ident, str(ident))
                name = name.split("(")[0].rstrip("_-0123456789") or name  # group pool threads
                self.self_counts.setdefault(name, Counter())[_where(frame)] += 1
                seen = set()
                f = frame
                while f is not None:
                    w = _where(f)
                    if w not in seen:
                        seen.add(w)
                        self.inclusive_counts.setdefault(name, Counter())[w] += 1
                    f = f.f_back
            self.samples += 1

    def __enter__(self) -> StackSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def report(self, top: int = 12) -> dict[str, object]:
        return {
            "samples": self.samples,
            "interval_s": self.interval,
            "threads": {
                name: {
                    "self": self.self_counts[name].most_common(top),
                    "inclusive": self.inclusive_counts[name].most_common(top),
                }
                for name in self.self_counts
            },
        }
