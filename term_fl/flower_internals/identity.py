"""Message ids, the ServerApp identity and the Run of the in-process engine.

The in-process engine (:class:`term_fl.engines.inprocess.InProcessGrid`)
plays the SuperLink and the ServerApp process in the caller's process, and
Flower 1.42 has no public way to do either:

- a Grid names the messages it stores; Flower's own grids write
  ``Metadata._message_id`` (:func:`set_message_id`);
- a Message built without metadata takes its run and source from the
  process's ``flwr.supercore.task_identity.TaskIdentity``, which Flower sets
  when it starts a ServerApp process and never restores;
  :func:`serverapp_identity` sets it for a block and restores what was there
  (:func:`preserved_identity` restores it around Flower's own
  ``run_simulation``, which sets it in this process);
- the Grid API's ``run`` is a ``flwr.supercore.run.Run`` (:func:`empty_run`).

These are required internals (:func:`term_fl.flower_internals.gate.required`):
used on every Flower version, imported when first used, and a Flower
without them stops the in-process engine with one error naming what is
missing. Off the supported version the writes are checked through Flower's
public getters.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from flwr.app import Message

from .gate import FlowerInternalsError, fast_paths, required

if TYPE_CHECKING:
    from flwr.supercore.run import Run

__all__ = ["empty_run", "preserved_identity", "serverapp_identity", "set_message_id"]

PURPOSE = "term-fl's in-process engine"
_IDENTITY = ("_task_id", "_run_id", "_node_id")  # TaskIdentity's class attributes (None until a task sets them)


def set_message_id(msg: Message, message_id: str) -> None:
    """Give a message its id, as Flower's own grids do when they store it (no public setter exists)."""
    msg.metadata.__dict__["_message_id"] = message_id
    if not fast_paths() and msg.metadata.message_id != message_id:
        raise FlowerInternalsError(
            f"this Flower's Metadata keeps its message id elsewhere: {PURPOSE} cannot name the messages it "
            "delivers; install flwr==1.42.0, or try --engine flower"
        )


def empty_run(run_id: int) -> Run:
    """Flower's ``Run`` of a run with this id and nothing else (what the Grid API's ``run`` returns)."""
    run_type = required("flwr.supercore.run", "Run", f"{PURPOSE} (the Grid API's run)")
    return run_type.create_empty(run_id=run_id)


def _task_identity() -> Any:
    return required("flwr.supercore.task_identity", "TaskIdentity", f"{PURPOSE} (the ServerApp identity)")


def _saved(identity: Any) -> tuple[Any, ...]:
    try:
        return tuple(getattr(identity, name) for name in _IDENTITY)
    except AttributeError as exc:
        raise FlowerInternalsError(
            f"this Flower's TaskIdentity has no {exc.name or 'field'}: {PURPOSE} cannot restore the process's "
            "identity; install flwr==1.42.0, or try --engine flower"
        ) from exc


def _restore(identity: Any, saved: tuple[Any, ...]) -> None:
    for name, value in zip(_IDENTITY, saved, strict=True):
        setattr(identity, name, value)


@contextmanager
def preserved_identity() -> Iterator[None]:
    """Whatever sets this process's task identity inside the block (Flower's ``run_simulation``), it is restored after.

    Does nothing on a Flower without ``TaskIdentity``.
    """
    try:
        identity = _task_identity()
        saved = _saved(identity)
    except FlowerInternalsError:
        yield
        return
    try:
        yield
    finally:
        _restore(identity, saved)


@contextmanager
def serverapp_identity(run_id: int) -> Iterator[None]:
    """Inside the block, Messages built in this process come from the SuperLink's ServerApp of run ``run_id``.

    As Flower sets it when it starts a ServerApp process (task 1, the
    SuperLink's node id); the identity of before comes back at the end.
    """
    identity = _task_identity()
    node_id = required("flwr.common.constant", "SUPERLINK_NODE_ID", f"{PURPOSE} (the ServerApp identity)")
    saved = _saved(identity)
    try:
        identity.task_id, identity.run_id, identity.node_id = 1, run_id, node_id
        if not fast_paths() and (identity.task_id, identity.run_id, identity.node_id) != (1, run_id, node_id):
            raise FlowerInternalsError(f"this Flower's TaskIdentity ignores what is set: {PURPOSE} cannot act as "
                                       "a ServerApp; install flwr==1.42.0, or try --engine flower")
        yield
    finally:
        _restore(identity, saved)
