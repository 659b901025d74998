"""Configured commands: placeholders are filled per argument and run without a shell."""

from __future__ import annotations

import sys

import pytest

from fleetguard.argv import ArgvTemplateError, check_template, render_argv, run_argv


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
