# Copyright 2025 Flower Labs GmbH. All Rights Reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
# ==============================================================================
# Modified by the term-fl authors: create_mock_reply of Flower's
# framework/py/flwr/serverapp/strategy/strategy_utils_test.py, with any metrics
# and the integer src_node_id a real reply carries.
"""Mock replies as Flower's own strategy tests build them, with the integer src_node_id a real reply carries."""

from __future__ import annotations

from collections.abc import Mapping
from unittest.mock import Mock

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict


def mock_reply(arrays: ArrayRecord | Mapping[str, np.ndarray], metrics: Mapping, node_id: int) -> Message:
    """A Mock(spec=Message) with content {"arrays", "metrics"} (Flower's strategy_utils_test.create_mock_reply)."""
    if not isinstance(arrays, ArrayRecord):
        arrays = ArrayRecord({k: Array(np.asarray(v)) for k, v in arrays.items()})
    message = Mock(spec=Message)
    message.content = RecordDict({"arrays": arrays, "metrics": MetricRecord(dict(metrics))})
    message.has_error.side_effect = lambda: False
    message.has_content.side_effect = lambda: True
    message.metadata.src_node_id = node_id
    return message
