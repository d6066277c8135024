"""The Docker Compose deployments built and run for real: ``deploy/e2e.sh all``.

The script builds the image, brings each profile up with a small size and
SuperNode authentication (fairness; the server and a site as two compose
projects on two Docker networks that meet only at the SuperLink's published
port; vehicle-sensor), checks the finished run in the results store, the
dashboard with its token, TLS, the registered keys, the refusal of a
SuperNode with an unregistered key, and removes everything it started
(deploy/README.md). It needs Docker, or root and apt-get to install it:
without either the test is skipped, unless ``TERM_FL_E2E_REQUIRED=1`` (set
by .ci/run), where that is a failure. The vehicle-sensor profile needs the
vehicle data ($TERM_FL_VEHICLE_DATA or data/vehicle_fewshot.json); without
it fairness and site run. ``TERM_FL_E2E_PROFILES`` (all, fairness, site or
vehicle-sensor; default all) picks the profiles. Deselect with
``-m "not docker"``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "deploy" / "e2e.sh"
TIMEOUT_S = 45 * 60  # cold: apt, base image, image build, two deployments


def _docker_possible() -> str | None:
    """Why Docker cannot be had here, or None."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "info"], capture_output=True, timeout=60, check=False).returncode == 0:
        return None
    if os.geteuid() == 0 and (shutil.which("dockerd") or shutil.which("apt-get")):
        return None
    return "no running Docker daemon, and no root with dockerd or apt-get to provide one"


def _vehicle_data() -> bool:
    path = os.environ.get("TERM_FL_VEHICLE_DATA") or str(REPO / "data" / "vehicle_fewshot.json")
    return Path(path).is_file()


def test_both_compose_profiles_build_run_and_clean_up(tmp_path):
    reason = _docker_possible()
    if reason:
        if os.environ.get("TERM_FL_E2E_REQUIRED") == "1":
            pytest.fail(f"TERM_FL_E2E_REQUIRED=1 but {reason}")
        pytest.skip(reason)
    which = os.environ.get("TERM_FL_E2E_PROFILES", "all")
    if which in ("all", "vehicle-sensor") and not _vehicle_data():
        if os.environ.get("TERM_FL_E2E_REQUIRED") == "1":
            pytest.fail("TERM_FL_E2E_REQUIRED=1 but the vehicle data is missing (TERM_FL_VEHICLE_DATA)")
        which = "fairness site"
    log = tmp_path / "e2e.log"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with log.open("w") as out:
        proc = subprocess.run(["bash", str(SCRIPT), *which.split()], stdout=out, stderr=subprocess.STDOUT,
                              env=env, timeout=TIMEOUT_S, check=False)
    text = log.read_text(errors="replace")
    # the step table and the results go to the test report (pytest -rA shows them)
    print(text[text.find("e2e step"):] if "e2e step" in text else text[-4000:])
    assert proc.returncode == 0, text[-8000:]
    assert f"e2e {which}: passed" in text
    profiles = ["fairness", "site", "vehicle-sensor"] if which == "all" else which.split()
    for profile in profiles:
        for check in ("TLS ok", "store ok", "authentication ok"):
            assert f"{profile}: {check}" in text, (profile, check)
    if "site" in profiles:
        assert "site: isolation ok" in text and "site: unregistered SuperNode refused" in text
