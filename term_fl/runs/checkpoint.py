"""A run's checkpoint: where it stands after a round, so that ``term-fl run --resume`` goes on from there.

``checkpoint.npz`` in the run directory holds the global model after the
round (every array with its name, dtype and shape), the strategy's state
(TERM's running estimate Rt, AFL's mixture weights: ``strategy.state``) and
the server loop's counters, written through a temporary file and a rename
after every ``run.checkpoint_every``-th round and the last. Nothing else is
needed to go on with the numbers of an uninterrupted run: sampling and
local training draw from (seed, round, partition) generators. A run that
finishes removes its checkpoint (model.pt holds the final model).
"""

from __future__ import annotations

import io
import json
import numbers
import os
from pathlib import Path
from typing import Any

import numpy as np

from term_fl.federation.records import Checkpoint
from term_fl.flower_internals import from_array_record, to_array_record

__all__ = ["CHECKPOINT_FILE", "CheckpointError", "load_checkpoint", "remove_checkpoint", "save_checkpoint"]

CHECKPOINT_FILE = "checkpoint.npz"
_MODEL = "model/"  # prefix of the model's arrays among the file's entries
_STATE = "state"
_META = "meta"


class CheckpointError(ValueError):
    """A checkpoint file cannot be read, or a strategy state cannot be written to one."""


def _encode_state(state: Any) -> tuple[str, np.ndarray | None]:
    """The strategy's state as (kind, array): None, a number (kept to the last bit as float64) or an array."""
    if state is None:
        return "none", None
    if isinstance(state, np.ndarray):
        return "array", state
    if isinstance(state, numbers.Real) and not isinstance(state, bool):
        return "float", np.asarray(float(state), dtype=np.float64)
    raise CheckpointError(f"a strategy state of type {type(state).__name__} cannot be checkpointed "
                          "(None, a number or a numpy array can)")


def _decode_state(kind: str, value: np.ndarray | None) -> Any:
    if kind == "none":
        return None
    if value is None:
        raise CheckpointError(f"the checkpoint's strategy state ({kind}) is missing")
    return float(value) if kind == "float" else value


def save_checkpoint(run_dir: str | os.PathLike[str], checkpoint: Checkpoint, **meta: Any) -> Path:
    """Write ``checkpoint`` (and ``meta``, plain JSON values) to ``run_dir/checkpoint.npz`` atomically.

    The file appears whole or not at all: it is written under a temporary name,
    removed again when the write fails, and renamed over the previous checkpoint.
    """
    path = Path(run_dir) / CHECKPOINT_FILE
    kind, state = _encode_state(checkpoint.strategy_state)
    entries = {_MODEL + name: array for name, array in from_array_record(checkpoint.arrays).items()}
    if state is not None:
        entries[_STATE] = state
    header = {"server_round": checkpoint.server_round, "ok_rounds": checkpoint.ok_rounds,
              "failed_in_a_row": checkpoint.failed_in_a_row, "state_kind": kind, **meta}
    entries[_META] = np.frombuffer(json.dumps(header, allow_nan=False).encode(), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **entries)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(buffer.getbuffer())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def load_checkpoint(run_dir: str | os.PathLike[str]) -> tuple[Checkpoint, dict[str, Any]] | None:
    """The checkpoint in ``run_dir`` and its meta values; None when there is none.

    Raises :class:`CheckpointError` naming the file when it is damaged.
    """
    path = Path(run_dir) / CHECKPOINT_FILE
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as npz:
            header = json.loads(npz[_META].tobytes().decode())
            arrays = {name[len(_MODEL):]: npz[name] for name in npz.files if name.startswith(_MODEL)}
            state = npz[_STATE] if _STATE in npz.files else None
        checkpoint = Checkpoint(
            server_round=int(header["server_round"]),
            arrays=to_array_record(arrays),
            strategy_state=_decode_state(header["state_kind"], state),
            ok_rounds=int(header["ok_rounds"]),
            failed_in_a_row=int(header["failed_in_a_row"]),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path}: not a readable term-fl checkpoint ({exc})") from exc
    if not arrays or checkpoint.server_round < 1:
        raise CheckpointError(f"{path}: not a readable term-fl checkpoint (no model, or round {checkpoint.server_round})")
    meta = {k: v for k, v in header.items() if k not in ("server_round", "ok_rounds", "failed_in_a_row", "state_kind")}
    return checkpoint, meta


def remove_checkpoint(run_dir: str | os.PathLike[str]) -> None:
    """Remove a run's checkpoint (and a temporary one a crash left), if any."""
    path = Path(run_dir) / CHECKPOINT_FILE
    path.unlink(missing_ok=True)
    path.with_name(f".{path.name}.tmp").unlink(missing_ok=True)
