"""A round's instructions to many nodes as one record, Messages built only when someone asks for them.

A strategy's ``configure_train`` / ``configure_evaluate`` sends every
sampled node the same content (the global model and the config). Flower's
``_construct_messages`` builds one Message per node; :class:`Instructions`
is that list, built lazily: a Grid that iterates it (Flower's engines, a
deployment) gets the same Messages as before, and the in-process engine's
batch executors read the shared content and the node ids directly, so a
round of theirs builds no Message at all (``InProcessGrid.exchange``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

from flwr.app import Message, RecordDict

__all__ = ["Instructions"]


class Instructions(Sequence[Message]):
    """The same ``content`` for each node of ``node_ids``: a sequence of Messages, each built on first use.

    The Messages are kept once built, so iterating twice gives the same
    objects (a Grid sets their ids when it pushes them).

    Parameters
    ----------
    content : RecordDict
        What every node receives (shared, as Flower's ``_construct_messages`` shares it).
    node_ids : sequence of int
        The destination nodes, in order.
    message_type : str
        Flower's message type (``MessageType.TRAIN``, ``MessageType.EVALUATE`` ...).
    """

    def __init__(self, content: RecordDict, node_ids: Sequence[int], message_type: str) -> None:
        self.content = content
        self.node_ids = [int(n) for n in node_ids]
        self.message_type = message_type
        self._messages: list[Message] | None = None

    @property
    def messages(self) -> list[Message]:
        """One Message per node (built on first use), as Flower's ``_construct_messages`` builds them."""
        if self._messages is None:
            self._messages = [Message(content=self.content, message_type=self.message_type, dst_node_id=node)
                              for node in self.node_ids]
        return self._messages

    @property
    def built(self) -> bool:
        """Whether the Messages were built."""
        return self._messages is not None

    def __len__(self) -> int:
        return len(self.node_ids)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        return self.messages[index]

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)
