"""The command channel: a command runs once, however often it is delivered, across agent restarts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import fleetguard.shipping.channel as channel_module
from fleetguard.shipping.channel import CommandChannel
from fleetguard.shipping.commands import CommandAck, CommandKind, CommandOutcome, HostCommand

CMD = HostCommand("c1", CommandKind.CORDON, None, "test")


class Recorder:
    """A runner that remembers what it ran."""

    def __init__(self) -> None:
        self.runs: list[str] = []

    def __call__(self, command: HostCommand) -> tuple[CommandOutcome, str]:
        self.runs.append(command.command_id)
        return CommandOutcome.DONE, "ok"


def _wait_acks(channel: CommandChannel, n: int) -> list[CommandAck]:
    acks: list[CommandAck] = []
    deadline = time.monotonic() + 30
    while len(acks) < n and time.monotonic() < deadline:
        acks.extend(channel.take_acks())
        time.sleep(0.01)
    return acks


def test_a_command_delivered_three_times_runs_once_and_is_acked_each_time_it_is_delivered_after(
    tmp_path: Path,
) -> None:
    recorder = Recorder()
    channel = CommandChannel(tmp_path / "commands.jsonl", recorder)
    channel.start()
    try:
        channel.deliver([CMD])
        first = _wait_acks(channel, 1)
        channel.deliver([CMD])
        channel.deliver([CMD])
        again = channel.take_acks()
    finally:
        channel.stop()
    assert recorder.runs == ["c1"]
    assert first == [CommandAck("c1", CommandOutcome.DONE, "ok")]
    assert again == [CommandAck("c1", CommandOutcome.DONE, "ok")]


def test_after_a_restart_a_known_command_is_not_run_again(tmp_path: Path) -> None:
    journal = tmp_path / "commands.jsonl"
    channel = CommandChannel(journal, Recorder())
    channel.start()
    channel.deliver([CMD])
    _wait_acks(channel, 1)
    channel.stop()
    recorder = Recorder()
    restarted = CommandChannel(journal, recorder)
    restarted.start()
    restarted.deliver([CMD])
    acks = restarted.take_acks()
    restarted.stop()
    assert recorder.runs == []
    assert [a.outcome for a in acks] == [CommandOutcome.DONE]


def test_a_command_interrupted_by_a_crash_is_acked_interrupted_not_rerun(tmp_path: Path) -> None:
    journal = tmp_path / "commands.jsonl"
    journal.write_text('{"id": "c1", "state": "started", "kind": "cordon"}\n')
    recorder = Recorder()
    channel = CommandChannel(journal, recorder)
    assert [a.outcome for a in channel.take_acks()] == [CommandOutcome.INTERRUPTED]
    channel.start()
    channel.deliver([CMD])
    channel.stop()
    assert recorder.runs == []


def test_a_command_whose_journal_cannot_be_written_is_not_run_and_runs_once_later(tmp_path: Path) -> None:
    journal = tmp_path / "commands.jsonl"
    recorder = Recorder()
    channel = CommandChannel(journal, recorder)
    channel.start()
    try:
        journal.mkdir()  # the journal cannot be opened for writing (as on a full or read-only disk)
        channel.deliver([CMD])
        assert recorder.runs == [] and channel.take_acks() == []
        journal.rmdir()
        channel.deliver([CMD])  # delivered again with the next reply: now it runs
        assert [a.command_id for a in _wait_acks(channel, 1)] == ["c1"]
        channel.deliver([CMD])
        assert recorder.runs == ["c1"]
    finally:
        channel.stop()


def test_the_journal_stays_bounded_and_remembers_the_recent_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(channel_module, "MAX_REMEMBERED", 5)
    journal = tmp_path / "commands.jsonl"
    recorder = Recorder()
    channel = CommandChannel(journal, recorder)
    channel.start()
    try:
        for i in range(40):
            channel.deliver([HostCommand(f"c{i}", CommandKind.CORDON, None, "test")])
            assert len(_wait_acks(channel, 1)) == 1
            assert len(journal.read_text().splitlines()) <= 2 * 5 + 1
        assert channel.compactions > 0
        channel.deliver([HostCommand("c39", CommandKind.CORDON, None, "again")])  # recent: answered, not run
    finally:
        channel.stop()
    assert recorder.runs == [f"c{i}" for i in range(40)]
    reopened_runs = Recorder()
    reopened = CommandChannel(journal, reopened_runs)
    reopened.start()
    try:
        reopened.deliver([HostCommand(f"c{i}", CommandKind.CORDON, None, "again") for i in range(35, 40)])
        assert {a.command_id for a in _wait_acks(reopened, 5)} == {f"c{i}" for i in range(35, 40)}
    finally:
        reopened.stop()
    assert reopened_runs.runs == []  # every remembered id survived the rewrites
    assert not journal.with_name("commands.jsonl.tmp").exists()
