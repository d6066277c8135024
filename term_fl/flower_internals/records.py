"""Record views and client replies without Flower's per-call checks.

- :func:`records_of`: the records of one type in a RecordDict, without the
  synchronised typed views (``content.metric_records`` ...) Flower builds per call;
- :func:`reply_message`: a client's reply Message, with the attributes
  Flower's reply constructor sets, without its per-argument checks.

Private names the fast paths use: the ``_data`` dictionary of ``RecordDict``
and the fields of ``Metadata`` and ``Message`` (``_run_id``, ``_message_id``
... ``_metadata``, ``_content``, ``_error``). Only public ``flwr.app`` names
are imported; with the gate's fast paths off both functions call Flower's
public API.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TypeVar

from flwr.app import ArrayRecord, ConfigRecord, Message, Metadata, MetricRecord, RecordDict

from .gate import fast_paths

__all__ = ["records_of", "reply_message"]

RecordT = TypeVar("RecordT", ArrayRecord, MetricRecord, ConfigRecord)
_TYPED_VIEWS = {ArrayRecord: "array_records", MetricRecord: "metric_records", ConfigRecord: "config_records"}
_RECORD_TYPES = (ArrayRecord, MetricRecord, ConfigRecord)


def records_of(content: RecordDict, kind: type[RecordT]) -> list[RecordT]:
    """The records of one type in a RecordDict, in order (what ``content.metric_records`` ... hold).

    The fast path reads the RecordDict's items instead of building Flower's
    synchronised typed view, a cost per call and per reply.
    """
    if fast_paths():
        return [record for record in content.values() if isinstance(record, kind)]
    return list(getattr(content, _TYPED_VIEWS[kind]).values())


def reply_message(reply_to: Message, records: Mapping[str, ArrayRecord | MetricRecord | ConfigRecord]) -> Message:
    """``Message(RecordDict(records), reply_to=reply_to)``: a client's reply, built as Flower builds it.

    Flower's constructors check every argument, key and value and validate the
    message type again (tens of microseconds per reply: a cost that matters
    when a round answers thousands of messages in one process, as the cohort
    executor does). The fast path sets the same attributes to the same values
    (the metadata of Flower's reply branch: source and destination swapped,
    the run, group and message type of ``reply_to``, a TTL that ends when
    ``reply_to``'s does) after one check that every key is a string and every
    value a record; anything else takes Flower's constructors, and their errors.
    """
    if not (fast_paths() and all(type(k) is str and type(v) in _RECORD_TYPES for k, v in records.items())):
        return Message(RecordDict(dict(records)), reply_to=reply_to)
    content = RecordDict()
    content.__dict__["_data"] = dict(records)
    request = reply_to.metadata
    current = datetime.datetime.now(tz=datetime.UTC).timestamp()  # Flower's clock (flwr.supercore.date.now)
    metadata = Metadata.__new__(Metadata)
    metadata.__dict__.update(
        _run_id=request.run_id,
        _message_id="",  # set by the SuperLink (or the Grid) when it stores the reply
        _src_node_id=request.dst_node_id,
        _dst_node_id=request.src_node_id,
        _src_task_id=request.dst_task_id,
        _dst_task_id=request.src_task_id,
        _reply_to_message_id=request.message_id,
        _group_id=request.group_id,
        _created_at=current,
        _ttl=request.created_at + request.ttl - current,
        _message_type=request.message_type,  # validated when the request was built
        _delivered_at="",
    )
    reply = Message.__new__(Message)
    reply.__dict__.update(_metadata=metadata, _content=content, _error=None)
    return reply
