"""predictor/ is the functional core: it never imports fleetguard's shell, the collectors or a CLI library."""

from __future__ import annotations

import ast
from pathlib import Path

PREDICTOR = Path(__file__).resolve().parents[2] / "predictor"
FORBIDDEN = ("fleetguard", "collectors", "click", "tqdm")


def test_predictor_imports_nothing_from_the_shell() -> None:
    offenders = []
    for path in sorted(PREDICTOR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == []
    assert len(list(PREDICTOR.glob("*.py"))) > 10
