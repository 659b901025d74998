"""Configured commands: placeholders are filled per argument and run without a shell."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from diagnosis.incident import ActionEntry, ActionOutcome
from diagnosis.model import ComponentKind, IncidentKey, RepairAction
from fleetguard.argv import MAX_OUTPUT_CHARS, ArgvTemplateError, check_template, render_argv, run_argv
from fleetguard.incidents.repairs import RepairExecutor
from fleetguard.settings.diagnosis import DiagnosisConfig


def test_placeholders_are_filled_inside_each_argument() -> None:
    argv = render_argv(
        ["scontrol", "requeue", "{job}", "--host={host}", "r{rank}:{pid}"],
        {"job": "42", "host": "n1", "rank": 3, "pid": 777},
    )
    assert argv == ["scontrol", "requeue", "42", "--host=n1", "r3:777"]


def test_a_value_with_shell_syntax_stays_one_literal_argument() -> None:
    hostile = "x; rm -rf / #"
    argv = render_argv(
        [sys.executable, "-c", "import sys; print(repr(sys.argv[1:]))", "{job}"], {"job": hostile}
    )
    result = run_argv(argv, timeout_seconds=10)
    assert result.ok
    assert result.output.strip() == repr([hostile])


def test_an_unknown_placeholder_is_refused_at_check_time() -> None:
    with pytest.raises(ArgvTemplateError, match="unknown placeholder"):
        check_template(["kubectl", "delete", "pod", "{pod_name}"])


def test_an_attribute_lookup_is_not_a_placeholder() -> None:
    with pytest.raises(ArgvTemplateError):
        check_template(["echo", "{job.__class__}"])


def test_doubled_braces_are_literal_braces() -> None:
    assert render_argv(["echo", "{{job}}", "{job}"], {"job": "j"}) == ["echo", "{job}", "j"]


def test_a_missing_value_becomes_an_empty_argument() -> None:
    assert render_argv(["echo", "{pid}"], {}) == ["echo", ""]


def test_a_command_that_cannot_start_is_a_result_not_an_exception() -> None:
    result = run_argv(["/nonexistent/fleetguard-hook"], timeout_seconds=5)
    assert not result.ok and "cannot start" in result.output


def test_a_hanging_command_times_out() -> None:
    result = run_argv([sys.executable, "-c", "import time; time.sleep(5)"], timeout_seconds=0.2)
    assert result.returncode is None and "timed out" in result.output


def test_only_the_tail_of_the_output_is_kept() -> None:
    argv = [sys.executable, "-c", "import sys; print('x' * 10000 + 'END'); sys.stderr.write('ERR')"]
    result = run_argv(argv, timeout_seconds=10)
    assert result.ok
    assert len(result.output) == MAX_OUTPUT_CHARS
    assert result.output.endswith("END\nERR")  # stdout, then stderr


def test_undecodable_output_is_replaced_not_raised() -> None:
    result = run_argv([sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'\\xff\\xfe ok')"], 10)
    assert result.ok and result.output.endswith(" ok")


def _gone(pid: int) -> bool:
    """Dead: no such process, or a zombie waiting for init (a killed orphan in a container)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_a_timed_out_command_is_killed_with_the_children_holding_its_output(tmp_path: Path) -> None:
    # The command starts a child that inherits its stdout and outlives it: were only the command killed, the
    # runner would wait for that child to close the pipe (600 s here) instead of returning at the timeout.
    pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(600)\n"
    )
    result = run_argv([sys.executable, "-c", script], timeout_seconds=2)
    assert result.returncode is None and "timed out after 2 s" in result.output
    child = int(pid_file.read_text())
    for _ in range(50):
        if _gone(child):
            break
        time.sleep(0.1)  # polling a real process's exit, seen in /proc: it offers no event to wait on
    assert _gone(child)


def test_a_failed_repair_is_recorded_with_its_exit_status_and_output() -> None:
    config = DiagnosisConfig(
        reset_gpu_command=[sys.executable, "-c", "import sys; print('no such GPU {component}'); sys.exit(3)"]
    )
    key = IncidentKey("node1", ComponentKind.GPU, "GPU-aaaa", "xid:79")
    entry = ActionEntry("a1", "i1", "node1", RepairAction.RESET_GPU, "xid", 0.0, ActionOutcome.REQUESTED)
    outcome, detail = RepairExecutor(config).carry_out(entry, key)
    assert (outcome, detail) == (ActionOutcome.FAILED, "exit 3: no such GPU GPU-aaaa")


def test_a_repair_that_cannot_start_says_so() -> None:
    config = DiagnosisConfig(drain_command=["/nonexistent/fleetguard-drain", "{host}"])
    key = IncidentKey("node1", ComponentKind.HOST, "node1", "xid:79")
    entry = ActionEntry("a1", "i1", "node1", RepairAction.DRAIN, "xid", 0.0, ActionOutcome.REQUESTED)
    outcome, detail = RepairExecutor(config).carry_out(entry, key)
    assert outcome is ActionOutcome.FAILED and detail.startswith("cannot start:")
