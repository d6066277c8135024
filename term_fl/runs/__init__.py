"""Layer 5, runs: a run's id and folder (config.json, summary.json, model.pt), its recorder, ``run_one``.

Everything lives in :mod:`.run`; the names below are the public ones
(``term_fl.runs.load_model(run_dir)`` loads a run's final global model).
"""

from term_fl.runs.run import (
    DEFAULT_RUNS_DIR,
    RUN_FILES,
    OutputInUse,
    RunRecorder,
    build_summary,
    check_output_dir,
    load_model,
    run_id_for,
    run_id_in,
    run_one,
    save_model,
    write_summary,
)

__all__ = [
    "DEFAULT_RUNS_DIR",
    "RUN_FILES",
    "OutputInUse",
    "RunRecorder",
    "build_summary",
    "check_output_dir",
    "load_model",
    "run_id_for",
    "run_id_in",
    "run_one",
    "save_model",
    "write_summary",
]
