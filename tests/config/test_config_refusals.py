"""Values refused at config load: out-of-bounds intervals, FLEETGUARD_* typos, unknown placeholders, addresses
that cannot be listened on. Each error names the key (or the variable) so the operator can fix it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetguard.config import BOUNDS, ConfigError, check_agent_host, load_config

INTERVALS = [key for key in BOUNDS if key.endswith(("_seconds", "_days"))]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleetguard.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("key", INTERVALS)
@pytest.mark.parametrize("value", ["inf", "1e-9", "1e308", "nan", "-1"])
def test_an_interval_outside_its_bounds_is_refused_naming_the_key(key: str, value: str) -> None:
    if value == "1e-9" and BOUNDS[key][0] == 0:
        value = "-1e-9"  # zero is allowed for these (no wait); the smallest refused is below it
    variable = "FLEETGUARD_" + key.replace(".", "_").upper()
    with pytest.raises(ConfigError, match=rf"^{key}: "):
        load_config(None, env={variable: value})


@pytest.mark.parametrize("toml_value", ["inf", "nan", "-inf", "1e308", "1e-9"])
def test_the_same_bounds_hold_for_values_from_the_file(tmp_path: Path, toml_value: str) -> None:
    path = write(tmp_path, f"[agent]\nsample_interval_seconds = {toml_value}\n")
    with pytest.raises(ConfigError, match=r"^agent\.sample_interval_seconds: "):
        load_config(path, env={})


def test_values_at_the_bounds_are_accepted() -> None:
    env = {"FLEETGUARD_" + key.replace(".", "_").upper(): repr(low) for key, (low, _) in BOUNDS.items()}
    config = load_config(
        None, env={**env, "FLEETGUARD_RUNTIME_PORT": "0", "FLEETGUARD_AGENT_METRICS_PORT": "0"}
    )
    assert config.agent.sample_interval_seconds == BOUNDS["agent.sample_interval_seconds"][0]
    assert config.runtime.max_restarts_without_progress == 1


def test_an_integer_beyond_int64_is_refused_not_wrapped(tmp_path: Path) -> None:
    path = write(tmp_path, "[simulate]\nseed = 99999999999999999999\n")
    with pytest.raises(ConfigError, match=r"^simulate\.seed: "):
        load_config(path, env={})


@pytest.mark.parametrize(
    ("variable", "message"),
    [
        (
            "FLEETGUARD_AGENT_METRICS_PROT",
            r"^FLEETGUARD_AGENT_METRICS_PROT: \[agent\] has no key 'metrics_prot'",
        ),
        ("FLEETGUARD_AGNET_METRICS_PORT", r"^FLEETGUARD_AGNET_METRICS_PORT: no such setting"),
        ("FLEETGUARD_RUNTIME", r"^FLEETGUARD_RUNTIME: no such setting"),
    ],
)
def test_a_typo_in_a_fleetguard_variable_is_refused_naming_it(variable: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, env={variable: "9100"})


def test_the_training_clients_variables_are_not_config_and_not_refused() -> None:
    env = {"FLEETGUARD_AGENT_URL": "127.0.0.1:9477", "FLEETGUARD_JOB_ID": "job-1", "OTHER_VAR": "x"}
    assert load_config(None, env=env).agent.metrics_port == 9476


@pytest.mark.parametrize("key", ["restart_command", "cordon_command", "stop_command"])
def test_an_unknown_placeholder_in_a_command_is_refused_at_load(tmp_path: Path, key: str) -> None:
    path = write(tmp_path, f'[runtime]\n{key} = ["scancel", "{{jobid}}"]\n')
    with pytest.raises(ConfigError, match=rf"^runtime\.{key}: unknown placeholder \{{jobid\}}"):
        load_config(path, env={})


@pytest.mark.parametrize("key", ["reset_gpu_command", "reboot_node_command", "drain_command"])
@pytest.mark.parametrize(
    ("arg", "why"),
    [
        ("{gpu}", r"unknown placeholder \{gpu\}"),
        ("{rank}", r"unknown placeholder \{rank\}"),
        ("{host", "unbalanced"),
    ],
)
def test_a_repair_command_is_checked_at_load_with_its_own_placeholders(
    tmp_path: Path, key: str, arg: str, why: str
) -> None:
    """A repair knows a host and a component ({rank} is the runtime's): a typo fails at start-up, not at the
    first repair hours later."""
    path = write(tmp_path, f'[diagnosis]\n{key} = ["repair-tool", "{arg}"]\n')
    with pytest.raises(ConfigError, match=rf"^diagnosis\.{key}: {why}"):
        load_config(path, env={})


def test_a_repair_command_with_host_and_component_loads(tmp_path: Path) -> None:
    path = write(
        tmp_path, '[diagnosis]\nreset_gpu_command = ["reset", "{host}:{component}", "{{literal}}"]\n'
    )
    assert load_config(path, env={}).diagnosis.reset_gpu_command == [
        "reset",
        "{host}:{component}",
        "{{literal}}",
    ]


@pytest.mark.parametrize("address", ["not-an-ip", "", "0.0.0.0:9476", "300.1.1.1"])
def test_a_metrics_address_that_is_not_an_ip_address_is_refused(address: str) -> None:
    with pytest.raises(ConfigError, match=r"^agent\.metrics_address: .* is not an IP address"):
        load_config(None, env={"FLEETGUARD_AGENT_METRICS_ADDRESS": address})


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "127.0.0.1", "::1"])
def test_ip_addresses_are_accepted_as_the_metrics_address(address: str) -> None:
    assert (
        load_config(None, env={"FLEETGUARD_AGENT_METRICS_ADDRESS": address}).agent.metrics_address == address
    )


def test_the_runtime_and_metrics_cannot_share_a_port() -> None:
    env = {"FLEETGUARD_AGENT_METRICS_PORT": "9500", "FLEETGUARD_RUNTIME_PORT": "9500"}
    with pytest.raises(ConfigError, match=r"^runtime\.port: 9500 is agent\.metrics_port as well"):
        load_config(None, env=env)
    env["FLEETGUARD_RUNTIME_ENABLED"] = "false"
    assert load_config(None, env=env).runtime.port == 9500  # no runtime: no clash


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('[collectors]\nkmsg_state_path = "var/kmsg\\u0000.seq"\n', "collectors.kmsg_state_path"),
        ('[runtime]\nrestart_command = ["scancel", "\\u0000{job}"]\n', "runtime.restart_command"),
    ],
)
def test_a_nul_character_in_a_path_or_command_is_refused_at_load(tmp_path: Path, toml: str, key: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=f"{key}: contains a NUL character"):
        load_config(path, env={})


def test_the_name_fleet_wide_incidents_are_filed_under_is_no_agents_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ConfigError, match=r"^agent\.host: host name 'fleet' is reserved"):
        load_config(None, env={"FLEETGUARD_AGENT_HOST": "fleet"})
    # A machine whose hostname is the name: every command still loads the config (a controller or a
    # dashboard may run there); the agent, which files its rows under it, refuses at its start.
    monkeypatch.setattr("socket.gethostname", lambda: "fleet")
    config = load_config(None, env={})
    with pytest.raises(ConfigError, match=r"^this machine's hostname \(agent\.host\): host name 'fleet'"):
        check_agent_host(config)
    assert check_agent_host(load_config(None, env={"FLEETGUARD_AGENT_HOST": "gpu-017"})) == "gpu-017"
