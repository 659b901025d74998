"""Operator-configured commands (restart, cordon) as argv lists with {placeholders};
never run through a shell.

Each placeholder is replaced inside its own argument, so a value such as `x; rm -rf /` stays one literal
argument of the command instead of becoming shell syntax."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PLACEHOLDERS = frozenset({"job", "host", "rank", "pid"})
_TOKEN = re.compile(r"\{\{|\}\}|\{([A-Za-z_]+)\}|[{}]")


class ArgvTemplateError(ValueError):
    """A command template uses an unknown placeholder or an unbalanced brace."""


def check_template(template: Sequence[str]) -> None:
    """Raise ArgvTemplateError for a template that `render_argv` could not fill (call at config time)."""
    if not template:
        raise ArgvTemplateError("command is empty")
    for arg in template:
        for match in _TOKEN.finditer(arg):
            token = match.group(0)
            if token in ("{{", "}}"):
                continue
            name = match.group(1)
            if name is None:
                raise ArgvTemplateError(
                    f"unbalanced brace in argument {arg!r} (write {{{{ or }}}} for a literal)"
                )
            if name not in PLACEHOLDERS:
                raise ArgvTemplateError(
                    f"unknown placeholder {{{name}}} in {arg!r}; known: {', '.join(sorted(PLACEHOLDERS))}"
                )


def render_argv(template: Sequence[str], values: Mapping[str, object]) -> list[str]:
    """Fill `{job}`, `{host}`, `{rank}`, `{pid}` in each argument; a missing value becomes ''."""
    check_template(template)

    def fill(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "{{":  # noqa: S105
            return "{"
        if token == "}}":  # noqa: S105
            return "}"
        value = values.get(match.group(1))
        return "" if value is None else str(value)

    return [_TOKEN.sub(fill, arg) for arg in template]


@dataclass(frozen=True, slots=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int | None  # None: it could not be started or timed out
    output: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def run_argv(argv: Sequence[str], timeout_seconds: float) -> CommandResult:
    """Run `argv` (no shell), capture at most the last 2 kB of output for the action record."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_seconds, check=False, shell=False
        )
    except FileNotFoundError as exc:
        return CommandResult(tuple(argv), None, f"cannot start: {exc}")
    except subprocess.TimeoutExpired:
        return CommandResult(tuple(argv), None, f"timed out after {timeout_seconds:g} s")
    except OSError as exc:
        return CommandResult(tuple(argv), None, f"cannot start: {exc}")
    output = (done.stdout + done.stderr)[-2048:]
    return CommandResult(tuple(argv), done.returncode, output)
