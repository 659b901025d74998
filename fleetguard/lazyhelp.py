"""One-line help of a lazily loaded click command, read from its source without importing it.

`fleetguard --help` lists the predictor's commands too; importing them to ask for their help would load
pandas and scikit-learn (or fail on the host agent's base install, which lacks them)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

_HELP_KEYWORDS = ("short_help", "help")


def short_help(target: str, limit: int = 45) -> str:
    """The short help of `module:attr` (a function decorated as a click command), or "" if not found."""
    module, _, attr = target.partition(":")
    path = source_path(module)
    if path is None:
        return ""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return ""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == attr:
            return _shorten(_help_of(node), limit)
    return ""


def source_path(module: str) -> Path | None:
    """The .py file of `module`, found without running any package's __init__ (only the top-level package is
    looked up, which imports nothing)."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin else None
    for base in spec.submodule_search_locations or ():
        for candidate in (Path(base, *rest).with_suffix(".py"), Path(base, *rest, "__init__.py")):
            if candidate.is_file():
                return candidate
    return None


def _help_of(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    for decorator in node.decorator_list:
        if not isinstance(decorator, ast.Call) or not _names_a_command(decorator.func):
            continue  # an option's help= is not the command's
        for keyword in decorator.keywords:
            if keyword.arg in _HELP_KEYWORDS and isinstance(keyword.value, ast.Constant):
                return str(keyword.value.value)
    return ast.get_docstring(node) or ""


def _names_a_command(func: ast.expr) -> bool:
    """`command(...)`, `click.command(...)`, `group.command(...)`."""
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name == "command"


def _shorten(text: str, limit: int) -> str:
    """The first sentence of the first paragraph, cut at a word to `limit` characters (as click does)."""
    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    sentence = paragraph.split(". ", 1)[0].rstrip(".")
    if len(sentence) <= limit:
        return sentence
    return sentence[: limit - 3].rsplit(" ", 1)[0] + "..."
