"""Configuration: TOML file, FLEETGUARD_* overrides, defaults for one host, errors that name the key."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleetguard.cli import cli
from fleetguard.config import ConfigError, RuntimeConfig, load_config

EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "fleetguard.example.toml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleetguard.toml"
    path.write_text(text)
    return path


def test_defaults_work_on_one_host_without_a_file() -> None:
    config = load_config(env={})
    assert config.agent.sample_interval_seconds == 1.0
    assert config.agent.metrics_port == 9476
    assert config.store.retention_days == 30
    assert config.runtime.port == 9477
    assert config.host  # the machine's hostname when not configured


def test_the_file_overrides_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, '[agent]\nmetrics_port = 9100\nhost = "gpu-17"\n[store]\nretention_days = 7\n')
    config = load_config(path, env={})
    assert (config.agent.metrics_port, config.host, config.store.retention_days) == (9100, "gpu-17", 7.0)


def test_environment_overrides_the_file_with_typed_values(tmp_path: Path) -> None:
    path = write(tmp_path, "[agent]\nmetrics_port = 9100\n")
    env = {
        "FLEETGUARD_AGENT_METRICS_PORT": "9200",
        "FLEETGUARD_COLLECTORS_NVML": "false",
        "FLEETGUARD_RUNTIME_RESTART_COMMAND": "scontrol requeue {job}",
        "FLEETGUARD_AGENT_URL": "http://127.0.0.1:9477",  # the training client's variable: not config
    }
    config = load_config(path, env=env)
    assert config.agent.metrics_port == 9200
    assert config.collectors.nvml is False
    assert config.runtime.restart_command == ["scontrol", "requeue", "{job}"]


def test_example_config_shipped_in_data_is_valid() -> None:
    config = load_config(EXAMPLE, env={})
    assert config.store.path


def test_the_example_config_shows_every_runtime_setting() -> None:
    with EXAMPLE.open("rb") as fh:
        shown = set(tomllib.load(fh)["runtime"])
    assert shown == {f.name for f in dataclasses.fields(RuntimeConfig)}


def test_the_action_policy_is_set_in_the_runtime_section(tmp_path: Path) -> None:
    text = (
        "[runtime]\ncooldown_seconds = 60.0\nmax_restarts_without_progress = 5\n"
        "crash_loop_window_seconds = 900.0\ncordon_stragglers = true\n"
        'cordon_command = ["kubectl", "cordon", "{host}"]\n'
    )
    rt = load_config(write(tmp_path, text), env={}).runtime
    assert (rt.cooldown_seconds, rt.max_restarts_without_progress, rt.crash_loop_window_seconds) == (
        60.0,
        5,
        900.0,
    )
    assert rt.cordon_stragglers is True


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("[agent]\nmetrics_prot = 1\n", {}, r"agent\.metrics_prot: unknown key"),
        ("[agnet]\n", {}, r"agnet: unknown section"),
        ('[agent]\nmetrics_port = "x"\n', {}, r"agent\.metrics_port: expected an integer"),
        ("[agent]\nmetrics_port = 70000\n", {}, r"agent\.metrics_port: must be within 0\.\.65535, got 70000"),
        (
            "[agent]\nsample_interval_seconds = 0\n",
            {},
            r"agent\.sample_interval_seconds: must be within 0\.01\.\.3600, got 0",
        ),
        ("[store]\nretention_days = -1\n", {}, r"store\.retention_days: must be within"),
        ("", {"FLEETGUARD_AGENT_METRICS_PORT": "abc"}, r"agent\.metrics_port: expected an integer"),
        ("", {"FLEETGUARD_COLLECTORS_NVML": "maybe"}, r"collectors\.nvml: expected true or false"),
        ('[runtime]\nrestart_command = "kill it"\n', {}, r"runtime\.restart_command: expected a list"),
        ("[runtime]\ncooldown_seconds = -1\n", {}, r"runtime\.cooldown_seconds: must be within 0\.\."),
        (
            "[runtime]\nmax_restarts_without_progress = 0\n",
            {},
            r"runtime\.max_restarts_without_progress: must be within 1\.\.1000",
        ),
        (
            "[runtime]\ncrash_loop_window_seconds = 0\n",
            {},
            r"runtime\.crash_loop_window_seconds: must be within 1\.\.",
        ),
        (
            "[runtime]\ncordon_stragglers = true\n",
            {},
            r"runtime\.cordon_stragglers: needs runtime\.cordon_command",
        ),
        (
            "[predictor]\naverage_retrains = 0\n",
            {},
            r"predictor\.average_retrains: must be within 1\.\.10",
        ),
        ("", {"FLEETGUARD_PREDICTOR_AVERAGE_RETRAINS": "11"}, r"predictor\.average_retrains: must be within"),
        ('[predictor]\naverage_retrains = "3"\n', {}, r"predictor\.average_retrains: expected an integer"),
        ("agent = 3\n", {}, r"agent: expected a \[agent\] table"),
        ("[agent\n", {}, r"not valid TOML"),
    ],
)
def test_an_invalid_config_names_the_key_and_why(
    tmp_path: Path, text: str, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text), env=env)


def test_a_missing_config_file_is_an_error() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("/nonexistent/fleetguard.toml", env={})


def test_the_cli_exits_non_zero_naming_the_bad_key(tmp_path: Path) -> None:
    path = write(tmp_path, "[store]\nretention_dayz = 3\n")
    result = CliRunner().invoke(cli, ["export", "--parquet", str(tmp_path / "out"), "--config", str(path)])
    assert result.exit_code != 0
    assert "store.retention_dayz: unknown key" in result.output


def test_the_stop_command_reaches_the_runtime_service() -> None:
    from fleetguard.runtime.service import runtime_config_from

    config = load_config(None, env={"FLEETGUARD_RUNTIME_STOP_COMMAND": "scancel {job}"})
    assert runtime_config_from(config).stop_command == ("scancel", "{job}")


def test_the_slurm_section_is_checked_with_errors_naming_the_key(tmp_path: Path) -> None:
    from fleetguard.config import ConfigError

    text = '[actions.slurm]\nenabled = true\nnodes = { "gpu-a.example.com" = "gpu-a" }\n'
    ok = load_config(write(tmp_path, text), env={}).actions.slurm
    assert ok.enabled and ok.node_for("gpu-a.example.com") == "gpu-a" and ok.node_for("gpu-b.x.y") == "gpu-b"
    for text, key in (
        ("[actions.slurm]\nenable = true\n", "actions.slurm.enable"),
        ("[actions.slurm]\ntimeout_seconds = 1e9\n", "actions.slurm.timeout_seconds"),
        ("[actions.slurm]\nreturn_interval_seconds = 0\n", "actions.slurm.return_interval_seconds"),
        ('[actions.slurm]\nreturn_interval_seconds = "soon"\n', "actions.slurm.return_interval_seconds"),
        ('[actions.slurm]\nnodes = { a = "x=y" }\n', "actions.slurm.nodes"),
        ("[actions]\nkubernetes = {}\n", "actions.kubernetes"),
    ):
        with pytest.raises(ConfigError, match=key):
            load_config(write(tmp_path, text), env={})
