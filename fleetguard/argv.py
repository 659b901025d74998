"""Operator-configured commands (restart, cordon, repairs) as argv lists with {placeholders}; never run
through a shell.

Each placeholder is replaced inside its own argument, so a value such as `x; rm -rf /` stays one literal
argument of the command instead of becoming shell syntax."""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PLACEHOLDERS = frozenset({"job", "host", "rank", "pid"})  # the runtime's commands (restart, cordon, stop)
REPAIR_PLACEHOLDERS = frozenset({"host", "component"})  # the incidents' repair commands (diagnosis.*_command)
MAX_OUTPUT_CHARS = 2048  # the tail of a command's output an action or repair record keeps
_TOKEN = re.compile(r"\{\{|\}\}|\{([A-Za-z_]+)\}|[{}]")


class ArgvTemplateError(ValueError):
    """A command template uses an unknown placeholder or an unbalanced brace."""


def check_template(template: Sequence[str], placeholders: frozenset[str] = PLACEHOLDERS) -> None:
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
            if name not in placeholders:
                raise ArgvTemplateError(
                    f"unknown placeholder {{{name}}} in {arg!r}; known: {', '.join(sorted(placeholders))}"
                )


def render_argv(
    template: Sequence[str], values: Mapping[str, object], placeholders: frozenset[str] = PLACEHOLDERS
) -> list[str]:
    """Fill each `{name}` of `placeholders` inside its own argument, in one pass (a value is never read for
    placeholders again); a missing value becomes ''."""
    check_template(template, placeholders)

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


@dataclass(frozen=True, slots=True)
class RunAs:
    """Credentials a command runs with when it is not to run as the agent: a user's uid, primary gid, no
    supplementary groups, and a reset environment (the agent's may hold secrets the user could then read)."""

    uid: int
    gid: int
    env: Mapping[str, str]

    @classmethod
    def user(cls, uid: int) -> RunAs:
        """`uid`'s credentials; a uid without a passwd entry (a container's) gets the overflow group."""
        try:
            entry = pwd.getpwuid(uid)
            gid, home, name = entry.pw_gid, entry.pw_dir, entry.pw_name
        except KeyError:
            gid, home, name = _OVERFLOW_GID, "/", str(uid)
        env = {"PATH": _SAFE_PATH, "HOME": home, "USER": name, "LOGNAME": name, "LANG": "C.UTF-8"}
        return cls(uid, gid, env)


_OVERFLOW_GID = 65534
_SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def run_as_for(owner_uid: int | None) -> RunAs | None:
    """Who a command acting on a job of `owner_uid` runs as: the owner, when the agent is root and the
    owner is another user; None (the agent itself) for root's jobs, jobs without an owner (the
    controller's), or an agent that is not root (it cannot act beyond its own authority anyway)."""
    if owner_uid is None or owner_uid == os.geteuid() or os.geteuid() != 0:
        return None
    return RunAs.user(owner_uid)


def run_argv(
    argv: Sequence[str],
    timeout_seconds: float,
    run_as: RunAs | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> CommandResult:
    """Run `argv` (no shell) in a session of its own and keep the last 2 kB of its output (stdout, then
    stderr, undecodable bytes replaced) for the record; with `run_as`, as that user (in `/`, with its reset
    environment); `extra_env` is added to the environment. The one runner of operator commands: the runtime's
    actions, the incidents' repairs and `scontrol`.

    A command that outlives `timeout_seconds` is killed with every process of its session: a child it left
    behind holding the output pipe would otherwise keep the caller waiting for the pipe to close."""
    env = None if run_as is None else dict(run_as.env)
    if extra_env:
        env = {**(os.environ if env is None else env), **extra_env}
    try:
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            shell=False,
            start_new_session=True,
            user=None if run_as is None else run_as.uid,
            group=None if run_as is None else run_as.gid,
            extra_groups=None if run_as is None else [],
            env=env,
            cwd=None if run_as is None else "/",
        )
    except (OSError, subprocess.SubprocessError) as exc:  # SubprocessError: could not switch user
        return CommandResult(tuple(argv), None, f"cannot start: {exc}")
    try:
        stdout, stderr = proc.communicate(timeout=timeout_seconds)
    except subprocess.TimeoutExpired:
        _kill_session(proc)
        proc.communicate()  # reaps it; every writer of the pipes is gone with the session
        return CommandResult(tuple(argv), None, f"timed out after {timeout_seconds:g} s")
    return CommandResult(tuple(argv), proc.returncode, (stdout + stderr)[-MAX_OUTPUT_CHARS:])


def _kill_session(proc: subprocess.Popen[str]) -> None:
    # start_new_session made the command its session's and process group's leader: pgid == pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.kill()
