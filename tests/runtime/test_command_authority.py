"""Operator commands that act on a job (restart_command, stop_command) run with the job owner's authority.

Any local user can report a job under any id (say the id of root's Slurm job) and then fake the finding that
leads to a restart or a crash-loop stop. Run as root, `scancel {job}` would end root's job: the agent would be
a confused deputy. Run as the job's owner, the scheduler refuses what that user could not do alone.
The tests run as root, like CI; the other user is uid 65534."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetguard.actions.executor import ActionExecutor, ActionRequest, ExecutorConfig
from fleetguard.clock import SystemClock
from fleetguard.jobcontrol.commands import CommandQueue
from fleetguard.jobcontrol.trust import job_key
from fleetguard.records.action_requests import ActionKind

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a command as another user")

# `id` writes who ran the command; "$0" is the output file, "$1" the job id (argv elements, no data in shell)
_WHO = ("/bin/sh", "-c", 'echo "$(id -u) $(id -g) $(id -G) $1" > "$0"')


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A directory the other user can reach and write (pytest's own sits under a root-only directory)."""
    path = Path(tempfile.mkdtemp(prefix="fleetguard-authority-", dir="/tmp"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path)


def _run(tmp_path: Path, action: str, owner: int, **config: object) -> tuple[str, str]:
    out = tmp_path / "who.txt"
    cfg = ExecutorConfig(host="node1", **config)  # type: ignore[arg-type]
    executor = ActionExecutor(cfg, SystemClock(), CommandQueue(), lambda job: {})
    request = ActionRequest(
        action=ActionKind(action), job_id=job_key(owner, "12345"), finding_id="f", reason="r"
    )
    record = executor.execute(request)
    return str(record.outcome), out.read_text().strip() if out.exists() else ""


def test_a_restart_command_for_another_users_job_runs_as_that_user(tmp_path: Path) -> None:
    outcome, who = _run(
        tmp_path, "restart", NOBODY, restart_command=(*_WHO, str(tmp_path / "who.txt"), "{job}")
    )
    gid = pwd.getpwuid(NOBODY).pw_gid
    assert outcome == "succeeded"
    assert who == f"{NOBODY} {gid} {gid} 12345"  # not root, no supplementary groups of root's


def test_a_stop_command_for_another_users_job_runs_as_that_user(tmp_path: Path) -> None:
    outcome, who = _run(
        tmp_path, "stop_crash_loop", NOBODY, stop_command=(*_WHO, str(tmp_path / "who.txt"), "{job}")
    )
    assert outcome == "succeeded" and who.split()[0] == str(NOBODY)


def test_a_command_for_roots_job_runs_as_root(tmp_path: Path) -> None:
    outcome, who = _run(tmp_path, "restart", 0, restart_command=(*_WHO, str(tmp_path / "who.txt"), "{job}"))
    assert outcome == "succeeded" and who.split()[0] == "0"


def test_the_owners_command_does_not_inherit_the_agents_environment(tmp_path: Path) -> None:
    os.environ["FLEETGUARD_TEST_SECRET"] = "s3cret"
    try:
        script = 'echo "${{FLEETGUARD_TEST_SECRET:-none}} $HOME" > "$0"'  # {{ }}: literal braces
        outcome, who = _run(
            tmp_path, "restart", NOBODY, restart_command=("/bin/sh", "-c", script, str(tmp_path / "who.txt"))
        )
    finally:
        del os.environ["FLEETGUARD_TEST_SECRET"]
    assert outcome == "succeeded" and who == f"none {pwd.getpwuid(NOBODY).pw_dir}"
