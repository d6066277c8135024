"""How term-fl installs: `pip install term-fl` is the strategies with Flower and numpy; extras bring the rest."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

import term_fl
from term_fl.extras import EXTRA_MODULES

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
NOT_FOR_STRATEGIES = ("ray", "torch", "fastapi", "plotly")
# The distribution that provides each module term_fl.extras names.
DISTRIBUTION_OF = {"torch": "torch", "ray": "ray", "plotly": "plotly", "jinja2": "jinja2"}


def python(code: str, *, block: tuple[str, ...] = (), cwd: Path = REPO, exe: str = sys.executable):
    """Run ``code`` in a fresh interpreter in which the modules ``block`` cannot be imported."""
    prelude = "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in block)
    return subprocess.run([exe, "-c", prelude + textwrap.dedent(code)], cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False)


def test_the_plain_install_needs_only_flower_and_numpy():
    names = sorted(Requirement(r).name for r in PYPROJECT["project"]["dependencies"])
    assert names == ["flwr", "numpy"]
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {"sim", "dashboard", "all", "test"} <= set(extras)
    assert [str(Requirement(r)) for r in extras["all"]] == ["term-fl[dashboard,sim]"]


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
    assert PYPROJECT["project"]["version"] == term_fl.__version__ == "0.2.0"


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


def test_cli_without_the_sim_extra_names_it(tmp_path):
    result = python(
        f"""
        from term_fl.cli import main
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
        from term_fl.cli import main
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
