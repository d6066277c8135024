"""How term-fl installs: `pip install term-fl` is the strategies with Flower, numpy and pydantic; extras bring the rest.

The slow test builds the wheel, installs it in a fresh venv outside the
repository and runs the README's plug-in example and `term-fl run` from it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import term_fl
from term_fl.common.extras import EXTRA_MODULES

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
NOT_FOR_STRATEGIES = ("ray", "torch", "fastapi", "plotly")
# The distribution that provides each module term_fl.common.extras names.
DISTRIBUTION_OF = {"torch": "torch", "ray": "ray", "plotly": "plotly", "jinja2": "jinja2", "scipy": "scipy"}


def clean_env() -> dict[str, str]:
    """This process's environment without PYTHONPATH (term-fl's Flower engine sets it for Ray)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def python(code: str, *, block: tuple[str, ...] = (), cwd: Path = REPO, exe: str = sys.executable):
    """Run ``code`` in a fresh interpreter in which the modules ``block`` cannot be imported."""
    prelude = "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in block)
    return subprocess.run([exe, "-c", prelude + textwrap.dedent(code)], cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False, env=clean_env())


def test_the_plain_install_needs_only_flower_numpy_and_pydantic():
    names = sorted(Requirement(r).name for r in PYPROJECT["project"]["dependencies"])
    assert names == ["flwr", "numpy", "pydantic"]
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {"sim", "dashboard", "all", "test", "test-frameworks"} <= set(extras)
    assert [str(Requirement(r)) for r in extras["all"]] == ["term-fl[dashboard,fast,sim]"]
    assert [Requirement(r).name for r in extras["fast"]] == ["numba"]  # optional: the compiled executor falls back


def all_requirements() -> list[Requirement]:
    project = PYPROJECT["project"]
    return [Requirement(r) for r in project["dependencies"] + sum(project["optional-dependencies"].values(), [])]


def test_every_flower_requirement_is_the_same_range_of_releases():
    """Extras included: a pin would make `pip install term-fl` replace a newer Flower (or flwr-nightly's files)."""
    flower = [r for r in all_requirements() if r.name == "flwr"]
    assert len(flower) == 2  # the plain install and the sim extra (flwr[simulation])
    for req in flower:
        assert str(req.specifier) == "<1.44,>=1.42", req
        assert [v in req.specifier for v in ("1.41.0", "1.42.0", "1.42.3", "1.43.0", "1.44.0")] == [
            False, True, True, True, False]


def test_pydantic_is_declared_by_the_plain_install_because_the_strategies_import_it():
    importing = [p.name for p in (REPO / "term_fl" / "strategies").glob("*.py")
                 if "from pydantic import" in p.read_text()]
    assert importing, "the strategies' settings are pydantic models"
    (pydantic,) = [Requirement(r) for r in PYPROJECT["project"]["dependencies"] if r.startswith("pydantic")]
    assert Version("2.7") in pydantic.specifier and Version("3.0") not in pydantic.specifier


def test_the_template_apps_frameworks_are_an_extra_of_their_own():
    """JAX, Flax and scikit-learn are for tests/plugin_apps (scripts/plugin_apps.sh), not for `[all,test]`."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert sorted(Requirement(r).name for r in extras["test-frameworks"]) == ["flax", "jax", "jaxlib", "scikit-learn"]
    assert not {"jax", "jaxlib", "flax", "scikit-learn"} & {Requirement(r).name for r in extras["test"] + extras["sim"]}


def test_the_readme_says_how_to_install_next_to_flwr_nightly():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Flower versions"):]
    assert "pip install --no-deps term-fl" in section and "flwr-nightly" in section


def test_each_module_term_fl_asks_an_extra_for_is_in_that_extra():
    extras = PYPROJECT["project"]["optional-dependencies"]
    for extra, modules in EXTRA_MODULES.items():
        provided = set()
        for text in extras[extra]:
            req = Requirement(text)
            provided.add(req.name)
            if req.name == "flwr" and "simulation" in req.extras:
                provided.add("ray")
        for module in modules:
            assert DISTRIBUTION_OF[module] in provided, f"{module} is not installed by term-fl[{extra}]"


def test_version_is_the_same_in_pyproject_and_the_package():
    assert PYPROJECT["project"]["version"] == term_fl.__version__ == "0.3.0"


def test_the_docker_image_installs_the_sim_and_dashboard_extras():
    line = next(line for line in (REPO / "Dockerfile").read_text().splitlines() if "import tomllib" in line)
    code = line[line.index("python -c '") + len("python -c '"):line.rindex("'")]
    printed = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    names = {Requirement(r).name for r in printed.split()}
    assert {"flwr", "numpy", "torch", "pydantic", "rich", "plotly", "jinja2"} <= names


def test_import_term_fl_strategies_loads_no_ray_torch_fastapi_or_plotly():
    result = python(
        f"""
        import term_fl.strategies
        print(sorted(m for m in {NOT_FOR_STRATEGIES!r} if m in sys.modules))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_strategies_aggregate_where_ray_torch_fastapi_and_plotly_are_absent():
    """As after `pip install term-fl` on a machine without them: build, configure and aggregate a round."""
    result = python(
        """
        import numpy as np
        from unittest.mock import Mock
        from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
        from term_fl.strategies import QFFL, FedAvg, TermFedAvg

        def reply(node, w, loss):
            msg = Mock(spec=Message)
            msg.content = RecordDict({"arrays": ArrayRecord({"w": Array(w)}),
                                      "metrics": MetricRecord({"num-examples": 2, "train_loss_before": loss})})
            msg.has_error.side_effect = lambda: False
            msg.has_content.side_effect = lambda: True
            msg.metadata.src_node_id = node
            return msg

        for strategy in (FedAvg(), TermFedAvg(1.0), QFFL(0.1)):
            strategy.current_arrays = ArrayRecord({"w": Array(np.zeros(3, dtype=np.float32))})
            arrays, _ = strategy.aggregate_train(1, [reply(1, np.ones(3, np.float32), 0.5),
                                                     reply(2, 3 * np.ones(3, np.float32), 1.5)])
            print(type(strategy).__name__, arrays["w"].numpy().round(4).tolist())
        """,
        block=NOT_FOR_STRATEGIES,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "FedAvg [2.0, 2.0, 2.0]"
    assert [line.split()[0] for line in lines] == ["FedAvg", "TermFedAvg", "QFFL"]


def test_cli_without_the_sim_extra_names_it(tmp_path):
    result = python(
        f"""
        from term_fl.cli.commands import main
        sys.exit(main(["run", "--engine", "inprocess", "--rounds", "1", "--db", {str(tmp_path / "r.db")!r}]))
        """,
        block=("torch",),
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert "term-fl run needs torch" in result.stderr
    assert "pip install torch==2.13.0" in result.stderr and "'term-fl[sim]'" in result.stderr
    assert not (tmp_path / "r.db").exists(), "nothing is recorded for a run that cannot start"


def test_cli_dashboard_without_its_extra_names_it(tmp_path):
    result = python(
        """
        from term_fl.cli.commands import main
        sys.exit(main(["report", "x", "--out", "r.html"]))
        """,
        block=("plotly",),
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert "term-fl report needs plotly" in result.stderr and "'term-fl[dashboard]'" in result.stderr


def test_flower_engine_without_ray_names_the_extra_and_the_inprocess_engine():
    result = python(
        """
        from conftest import small_scenario
        from term_fl.engines.flower import run_flower_simulation
        try:
            run_flower_simulation(small_scenario("run.engine=flower"), 6)
        except ImportError as err:
            print(err)
        """,
        block=("ray",),
        cwd=REPO / "tests",
    )
    assert result.returncode == 0, result.stderr
    assert "needs ray" in result.stdout and "'term-fl[sim]'" in result.stdout
    assert "--engine inprocess needs no Ray" in result.stdout


# --- the wheel, installed as a user installs it --------------------------------------


def source_tree(dest: Path) -> Path:
    """The project's files (tracked and new, not ignored) copied to ``dest``: builds never touch the checkout."""
    listing = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                             capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listing):
        source = REPO / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return dest


def layered_venv(path: Path) -> Path:
    """A new venv whose interpreter also sees this environment's packages, after its own.

    The site-packages of the running environment are appended through a
    ``.pth`` file, so pip finds flwr, torch, Ray ... already installed and
    downloads nothing (``--no-index``: it could not pull a CUDA torch), while
    what pip installs into the new venv, term-fl's wheel, comes first on
    ``sys.path``. The running environment's own ``.pth`` files (an editable
    term-fl) are not processed there.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    exe = path / "bin" / "python"
    purelib = subprocess.run([str(exe), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    layers = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (Path(purelib) / "_term_fl_test_layer.pth").write_text("\n".join(layers) + "\n")
    return exe


@pytest.mark.slow
def test_wheel_installs_outside_the_repo_and_runs_the_plugin_example_and_term_fl_run(tmp_path):
    work = tmp_path / "outside"
    work.mkdir()
    src = source_tree(tmp_path / "src")
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels), str(src)], check=True, timeout=300, capture_output=True, env=clean_env())
    (wheel,) = wheels.glob("term_fl-0.3.0-*.whl")

    with zipfile.ZipFile(wheel) as archive:
        metadata = Parser().parsestr(archive.read("term_fl-0.3.0.dist-info/METADATA").decode())
        names = archive.namelist()
    requires = [Requirement(r) for r in metadata.get_all("Requires-Dist")]
    assert sorted(r.name for r in requires if r.marker is None) == ["flwr", "numpy", "pydantic"]
    assert {"sim", "dashboard", "all"} <= set(metadata.get_all("Provides-Extra"))
    assert not any(n.startswith(("tests/", "server/", "client/", "benchmarks/")) for n in names)

    exe = layered_venv(tmp_path / "venv")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(exe), "install", "--no-index", "-q",
                              f"{wheel}[all]"], capture_output=True, text=True, timeout=300, check=False,
                             env=clean_env())
    assert install.returncode == 0, install.stdout + install.stderr

    where = python("import term_fl, term_fl.strategies; print(term_fl.__file__, term_fl.__version__)",
                   cwd=work, exe=str(exe))
    assert where.returncode == 0, where.stderr
    location, version = where.stdout.split()
    assert Path(location).is_relative_to(tmp_path / "venv") and version == "0.3.0", "term_fl comes from the wheel"

    example = subprocess.run([str(exe), str(REPO / "tests" / "readme_example.py"), str(REPO / "README.md")],
                             cwd=work, capture_output=True, text=True, timeout=300, check=False, env=clean_env())
    assert example.returncode == 0, example.stdout + example.stderr
    assert "tilted weights of the last round" in example.stdout

    env = {**clean_env(), "RAY_USAGE_STATS_ENABLED": "0", "FLWR_TELEMETRY_ENABLED": "0"}
    run = subprocess.run([str(exe.parent / "term-fl"), "run", "--engine", "inprocess", "--rounds", "2",
                          "--no-reference"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    (summary_path,) = (work / "runs").glob("*/summary.json")
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "finished" and summary["rounds_completed"] == 2
    assert summary["versions"]["term-fl"] == "0.3.0"
    assert (work / "runs" / "results.db").is_file()
