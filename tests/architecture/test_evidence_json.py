"""A finding's evidence is turned to and from JSON in one module only (fleetguard/records/evidence.py): every
other module builds it with `evidence_json` and reads it through the typed views. An AST scan of the
production packages finds a `json` call that handles evidence anywhere else."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("fleetguard", "collectors", "straggler", "diagnosis", "predictor", "dashboard")
THE_ONE_MODULE = Path("fleetguard/records/evidence.py")
# The incident store writes its own table of what an incident saw when it opened (incident_evidence rows):
# store code for another table, not a finding's evidence.
STORE_MODULES = frozenset({Path("fleetguard/incidents/incident_store.py")})
_JSON_CALLS = frozenset({"loads", "dumps", "load", "dump"})


def _is_json_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _JSON_CALLS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "json"
    )


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.keyword):
        return node.arg or ""
    if isinstance(node, ast.arg):
        return node.arg
    return ""


def _mentions_evidence(node: ast.AST) -> bool:
    """Whether code names evidence: a variable, attribute, argument or keyword with "evidence" in its name."""
    return any("evidence" in _name(sub).lower() for sub in ast.walk(node))


def evidence_json_calls(source: str, filename: str = "<source>") -> list[int]:
    """Lines of `json` calls that handle evidence: the call's arguments name evidence, or the function it is
    in does (a function that builds or reads a finding's evidence must do it through the records)."""
    tree = ast.parse(source, filename)
    found: set[int] = set()

    def visit(node: ast.AST, function: ast.AST | None) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            function = node
        if _is_json_call(node):
            assert isinstance(node, ast.Call)
            scope = function if function is not None else node
            if any(_mentions_evidence(a) for a in [*node.args, *node.keywords]) or _mentions_evidence(scope):
                found.add(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, None)
    return sorted(found)


def test_evidence_is_turned_to_and_from_json_only_in_the_records() -> None:
    offenders = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO)
            if relative == THE_ONE_MODULE or relative in STORE_MODULES:
                continue
            for line in evidence_json_calls(path.read_text(), str(relative)):
                offenders.append(f"{relative}:{line}")
    assert offenders == [], "use fleetguard.records.evidence (evidence_json, the typed views): " + ", ".join(
        offenders
    )


def test_the_scan_finds_evidence_parsed_by_hand() -> None:
    by_hand = (
        "import json\n"
        "def cause(f):\n"
        "    doc = json.loads(f.evidence_json)\n"
        "    return doc.get('cause')\n"
        "def extend(finding, more):\n"
        "    value = {**json.loads(finding.summary), **more}\n"
        "    return replace(finding, evidence_json=json.dumps(value))\n"
        "def unrelated(text):\n"
        "    return json.loads(text)\n"
    )
    assert evidence_json_calls(by_hand) == [3, 6, 7]


def test_the_one_module_does_turn_evidence_to_json() -> None:
    # the exemption is for a module that does the work, not a blind spot
    assert evidence_json_calls((REPO / THE_ONE_MODULE).read_text()) != []
