"""A finding's evidence is turned to and from JSON in one module only (fleetguard/records/evidence.py): every
other module builds its kind's record, turns it to text with `evidence_json`, and reads it back through the
records. AST scans of the production packages find a `json` call that handles evidence anywhere else, and a
dict (or JSON text written by hand) given to a `Finding` as its evidence."""

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


# ---- writers build their kind's record --------------------------------------------------------------------
# A finding's evidence is its kind's record (fleetguard/records/evidence.py), built in the factory of the
# module that detects it and turned to text by `evidence_json(record)`. A dict (or JSON text) handed to a
# `Finding` is evidence no reader has a definition for: the scan below finds one in the production packages.
_EVIDENCE_KEYWORDS = frozenset({"evidence", "evidence_json"})
_FINDING_EVIDENCE_POSITION = (
    10  # Finding(ts, finding_id, kind, severity, subject, summary, host, job, rank, gpu, ev)
)


def _is_dict(node: ast.AST) -> bool:
    """A dict literal, a dict comprehension, a `dict(...)` call, or text written by hand."""
    if isinstance(node, ast.Dict | ast.DictComp | ast.JoinedStr):
        return True
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    return isinstance(node, ast.Call) and _name(node.func) == "dict"


def _is_untyped_evidence(node: ast.AST) -> bool:
    if _is_dict(node):
        return True
    # evidence_json({...}): the one encoder takes a record, never a mapping
    return (
        isinstance(node, ast.Call)
        and _name(node.func) == "evidence_json"
        and any(_is_dict(a) for a in node.args)
    )


def untyped_evidence_lines(source: str, filename: str = "<source>") -> list[int]:
    """Lines where a `Finding` (or `replace` of one) gets evidence that is not a record: a dict literal, a
    `dict(...)`, JSON text, or `evidence_json` of a dict; and any `evidence_json` call of a dict."""
    found: set[int] = set()
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call):
            continue
        callee = _name(node.func)
        if callee == "evidence_json" and any(_is_dict(a) for a in node.args):
            found.add(node.lineno)
        if callee not in ("Finding", "replace"):
            continue
        given = [k.value for k in node.keywords if k.arg in _EVIDENCE_KEYWORDS]
        if callee == "Finding" and len(node.args) > _FINDING_EVIDENCE_POSITION:
            given.append(node.args[_FINDING_EVIDENCE_POSITION])
        if any(_is_untyped_evidence(value) for value in given):
            found.add(node.lineno)
    return sorted(found)


def test_findings_are_given_their_kind_record_not_a_dict() -> None:
    offenders = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO)
            for line in untyped_evidence_lines(path.read_text(), str(relative)):
                offenders.append(f"{relative}:{line}")
    assert offenders == [], "build the kind's evidence record (fleetguard.records.evidence): " + ", ".join(
        offenders
    )


def test_the_scan_finds_a_dict_given_as_evidence() -> None:
    untyped = (
        "def a(now):\n"
        "    return Finding(ts=now, evidence={'cause': 'silent'})\n"
        "def b(now, hb):\n"
        "    return Finding(ts=now, evidence_json=evidence_json({'status': hb.status}))\n"
        "def c(f):\n"
        "    return dataclasses.replace(f, evidence_json=dict(cause='x'))\n"
        "def d(f):\n"
        '    return replace(f, evidence_json=\'{"cause": "x"}\')\n'
        "def e(values):\n"
        "    text = evidence_json({k: v for k, v in values})\n"
        "def f(a, b, c, d, e, f, g, h, i, j):\n"
        "    return Finding(a, b, c, d, e, f, g, h, i, j, {'cause': 'x'})\n"
        "def typed(now, hb, f):\n"
        "    Finding(ts=now, evidence_json=evidence_json(RankErrorEvidence(hb.status, 1, 's', 2)))\n"
        "    return replace(f, evidence_json=with_more_evidence(f.evidence_json, {'gpu_jobs': []}))\n"
    )
    assert untyped_evidence_lines(untyped) == [2, 4, 6, 8, 10, 12]
