"""Check a deployment's data before its SuperNodes start (compose service check-vehicle-data).

    python deploy/check_data.py SCENARIO "OVERRIDES"

Resolves the scenario exactly as the ServerApp will (same file, same
overrides, ``TERM_FL_VEHICLE_DATA`` from the environment), which checks that
the data file exists and that its sha256 is the expected one. Exit 0 with one
line naming the file; exit 2 with a message saying what is missing and where
it goes.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from term_fl.config import ConfigError, file_digest, load_scenario

APP_DIR = Path(__file__).resolve().parent.parent
HINT = (
    "Put vehicle_fewshot.json into the deployment's data/ folder (or point TERM_FL_DATA_DIR at the "
    "folder that holds it); where the file comes from and its sha256: data/README.md."
)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: check_data.py SCENARIO OVERRIDES", file=sys.stderr)
        return 2
    scenario_path = Path(argv[0])
    if not scenario_path.is_absolute():
        scenario_path = APP_DIR / scenario_path
    try:
        scenario = load_scenario(scenario_path, shlex.split(argv[1]))
    except ConfigError as exc:
        print(f"term-fl: the deployment's data is not ready: {exc}\n{HINT}", file=sys.stderr)
        return 2
    if scenario.data.name != "vehicle":
        print(f"term-fl: {scenario.name} uses {scenario.data.name} data: no file needed")
        return 0
    path = scenario.data.vehicle.path
    print(f"term-fl: vehicle data ok: {path} (sha256 {file_digest(path)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
