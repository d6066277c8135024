"""benchmarks/reproduce.py: two runs of one checkout dump the same numbers; one changed bit is found and named."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import reproduce  # noqa: E402


def test_the_same_checkout_reproduces_itself_and_a_flipped_last_bit_is_named(tmp_path, capsys):
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    for out in (first, second):
        assert reproduce.main(["run", "--out", str(out), "--rounds", "2", "--only", "default-qffl/sequential"]) == 0
    assert reproduce.main(["compare", str(first), str(second)]) == 0
    assert "0 of 1 cases differ" in capsys.readouterr().out
    dump = json.loads(second.read_text())
    row = dump["cases"]["default-qffl/sequential"]["device_train"][3]
    value = float.fromhex(row["tilted_weight"])
    row["tilted_weight"] = (value + value * 2.0**-52).hex()  # the next float
    second.write_text(json.dumps(dump))
    assert reproduce.main(["compare", str(first), str(second)]) == 1
    assert ".device_train[3].tilted_weight" in capsys.readouterr().out


def test_exact_keeps_every_bit_and_non_finite_values():
    assert reproduce.exact({"a": [0.1, float("nan")], "b": float("inf"), "c": 3}) == {
        "a": [(0.1).hex(), "nan"], "b": "inf", "c": 3}
