"""Seeds of every random choice, derived from (run seed, round, partition-id).

One place derives them so that both engines, every client and the server
make the same choices for the same run seed, whatever order work happens in.
"""

from __future__ import annotations

import numpy as np

# Stream tags keep independent choices independent for the same (seed, round).
TRAIN_SAMPLING = 0
EVAL_SAMPLING = 1
CLIENT_TRAINING = 2


def derive_seed(run_seed: int, server_round: int, partition_id: int, stream: int = CLIENT_TRAINING) -> int:
    """A 63-bit seed for one (run seed, round, partition, stream) combination."""
    state = np.random.SeedSequence([int(run_seed), int(server_round), int(partition_id), int(stream)])
    return int(state.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))
