"""The in-process engine: a Grid that hands Messages straight to the ClientApp.

Same server loop (term_fl.federation.loop), same strategies, same ClientApp as
the Flower engines; only the transport differs: no Ray, no SuperLink, no
serialisation. Node ids are random, as Flower's are, so the server must
sample by partition-id to be reproducible, exactly as with Flower.

The grid is used inside a ``with`` block, which plays the ServerApp process:
there, Messages built in this process come from its run
(:func:`term_fl.flower_internals.serverapp_identity`); the process's identity
of before comes back at the end. Replies are computed when messages are
pushed, one client at a time, with torch on one thread as in Flower's
virtual clients (:func:`term_fl.learning.threads.single_threaded`: the
caller's thread count comes back after each push); a client that raises
becomes an error reply, as in Flower's Simulation Engine. With an
``executor`` (``run.executor = "cohort"``,
:mod:`term_fl.engines.cohort_executor`) a batch of train or evaluate
messages is answered by one batched computation instead, also
single-threaded; the server loop then receives the batch's replies as one
stacked record and one metric table (:meth:`InProcessGrid.exchange`,
:class:`~term_fl.strategies.cohort_replies.CohortReplies`), not a Message per
client.
"""

from __future__ import annotations

import contextlib
import gc
import secrets
import traceback
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack
from types import TracebackType
from typing import TYPE_CHECKING
from uuid import uuid4

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid

from term_fl.common.keys import NUM_PARTITIONS, PARTITION_ID
from term_fl.engines.cohort_executor import CohortExecutor
from term_fl.flower_internals.identity import empty_run, serverapp_identity, set_message_id
from term_fl.learning.threads import single_threaded
from term_fl.strategies.cohort_replies import CohortReplies
from term_fl.strategies.instructions import Instructions

if TYPE_CHECKING:
    from term_fl.flower_internals.identity import Run

CLIENT_APP_EXCEPTION = 2  # Flower's ErrorCode.CLIENT_APP_RAISED_EXCEPTION


class InProcessGrid(Grid):
    """A Grid over ``num_nodes`` virtual nodes that run ``client_app`` in this process.

    Use it in a ``with`` block (``with InProcessGrid(app, n) as grid:
    run_federation(grid, ...)``): inside, Messages built in this process come
    from the grid's ServerApp; outside, the grid refuses to work. ``run_id``:
    the Flower run the grid's ServerApp serves (random by default); the grids
    of a group of runs (:mod:`term_fl.engines.group`) share one, so that
    their blocks nest and interleave without changing the process's identity.
    """

    def __init__(
        self,
        client_app: ClientApp,
        num_nodes: int,
        node_ids: Iterable[int] | None = None,
        executor: CohortExecutor | None = None,
        run_id: int | None = None,
    ) -> None:
        if num_nodes < 1:
            raise ValueError(f"num_nodes must be >= 1 (got {num_nodes})")
        ids = list(node_ids) if node_ids is not None else _random_node_ids(num_nodes)
        if len(ids) != num_nodes or len(set(ids)) != num_nodes:
            raise ValueError("node_ids must hold num_nodes distinct ids")
        self._client_app = client_app
        self._executor = executor
        self._run_id = secrets.randbits(63) if run_id is None else run_id
        self._run: Run | None = None
        self._contexts = {
            node_id: Context(
                run_id=self._run_id,
                node_id=node_id,
                node_config={PARTITION_ID: pid, NUM_PARTITIONS: num_nodes},
                state=RecordDict(),
                run_config={},
            )
            for pid, node_id in enumerate(ids)
        }
        self._replies: dict[str, Message] = {}
        self._serving: ExitStack | None = None

    # -- the ServerApp's block --------------------------------------------------
    def __enter__(self) -> InProcessGrid:
        """Act as this grid's ServerApp until the block ends."""
        if self._serving is not None:
            raise RuntimeError("this InProcessGrid's with-block is already open")
        stack = ExitStack()
        stack.enter_context(serverapp_identity(self._run_id))
        self._serving = stack
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Give the process its identity of before back."""
        stack, self._serving = self._serving, None
        if stack is not None:
            stack.close()

    def _check_serving(self) -> None:
        if self._serving is None:
            raise RuntimeError(
                "InProcessGrid used outside its with-block: the Messages for it are built with the ServerApp "
                "identity it sets there; write `with InProcessGrid(client_app, num_nodes) as grid: "
                "run_federation(grid, ...)`"
            )

    @property
    def contexts(self) -> Mapping[int, Context]:
        """Each node's Context (its partition in ``node_config``), by node id: what the executor answers for."""
        return self._contexts

    @property
    def executor(self) -> CohortExecutor | None:
        """The batch executor, or None (the ClientApp message by message)."""
        return self._executor

    # -- Grid API -----------------------------------------------------------
    def set_run(self, run: Run) -> None:  # noqa: D102
        self._run = run

    @property
    def run(self) -> Run:  # noqa: D102
        if self._run is None:
            self._run = empty_run(self._run_id)
        return self._run

    def create_message(  # noqa: D102
        self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str, ttl: float | None = None
    ) -> Message:
        self._check_serving()
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:  # noqa: D102
        self._check_serving()
        return list(self._contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:  # noqa: D102
        self._check_serving()
        messages = self._with_ids(messages)
        with answering():
            replies = self._executor.replies(messages, self._contexts) if self._executor is not None else None
            if replies is None:
                replies = [self._deliver(msg) for msg in messages]
        for msg, reply in zip(messages, replies, strict=True):
            self._replies[msg.metadata.message_id] = reply
        return [msg.metadata.message_id for msg in messages]

    def exchange(self, messages: Iterable[Message]) -> CohortReplies | list[Message]:
        """The replies to a batch: one stacked :class:`CohortReplies` where the executor answers it as one,
        else one Message per message (:meth:`send_and_receive`).

        A strategy's :class:`~term_fl.strategies.instructions.Instructions`
        reach the executor as they are: no Message is built unless it declines.
        """
        self._check_serving()
        if not isinstance(messages, Instructions):
            messages = list(messages)
        if self._executor is not None:
            batch = messages if isinstance(messages, Instructions) else self._with_ids(messages)
            with answering():
                cohort = self._executor.cohort_replies(batch, self._contexts)
            if cohort is not None:
                return cohort
        return list(self.send_and_receive(messages))  # declined, or no executor: through the Grid API

    @staticmethod
    def _with_ids(messages: Iterable[Message]) -> list[Message]:
        messages = list(messages)
        for msg in messages:
            set_message_id(msg, str(uuid4()))
        return messages

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:  # noqa: D102
        return [self._replies.pop(mid) for mid in message_ids if mid in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:  # noqa: D102
        return self.pull_messages(self.push_messages(messages))

    # -- delivery -------------------------------------------------------------
    def _deliver(self, msg: Message) -> Message:
        context = self._contexts.get(msg.metadata.dst_node_id)
        if context is None:
            return Message(Error(code=CLIENT_APP_EXCEPTION, reason=f"unknown node {msg.metadata.dst_node_id}"), reply_to=msg)
        try:
            return self._client_app(msg, context)
        except Exception as exc:  # a failing client becomes an error reply, as in Flower
            reason = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
            return Message(Error(code=CLIENT_APP_EXCEPTION, reason=reason), reply_to=msg)


@contextlib.contextmanager
def answering() -> Iterator[None]:
    """While a batch is answered: one torch thread, as Flower's virtual clients, and the garbage collector paused.

    The replies allocate many small objects and no reference cycles, and a
    collection every 700 allocations that walks everything alive cost a cohort
    round of 1,000 MLP clients a fifth of its time. Both are restored after
    (:func:`term_fl.learning.threads.single_threaded` gives the caller's
    thread count back).
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        with single_threaded():
            yield
    finally:
        if collecting:
            gc.enable()


def _random_node_ids(n: int) -> list[int]:
    ids: set[int] = set()
    while len(ids) < n:
        ids.add(secrets.randbits(63) or 1)
    return list(ids)
