"""Run the README's plug-in example: its ClientApp and ServerApp on 4 in-process nodes.

    python tests/readme_example.py README.md

Used by tests/test_readme.py, and by tests/test_packaging.py from a venv in
which term-fl was installed from its wheel. Prints what the example prints.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

NUM_NODES = 4


def readme_example(readme: Path) -> str:
    """The code between the README's ``readme-example`` markers."""
    text = Path(readme).read_text(encoding="utf-8")
    block = re.search(r"<!-- readme-example:start -->\s*```python\n(.*?)```", text, re.S)
    if block is None:
        raise SystemExit(f"{readme}: README example markers not found")
    return block.group(1)


def run_example(readme: Path, num_nodes: int = NUM_NODES) -> dict[str, Any]:
    """Execute the example, then its ServerApp over ``num_nodes`` nodes running its ClientApp.

    Returns the example's namespace with the ServerApp's context under ``"context"``.
    """
    from flwr.app import Context, RecordDict

    from term_fl.engines.inprocess import InProcessGrid

    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(readme_example(readme), str(readme), "exec"), namespace)  # noqa: S102 - the README's own code
    context = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    with InProcessGrid(namespace["client_app"], num_nodes) as grid:
        namespace["server_app"](grid, context)
    namespace["context"] = context
    return namespace


if __name__ == "__main__":
    run_example(Path(sys.argv[1]))
