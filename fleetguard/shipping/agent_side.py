"""Shipping as the agent runs it: spool + buffer + shipper + command channel, built from the config, with
its counters on the agent's /metrics and the controller's commands run by the host's training runtime.

`Shipping` is the agent's sink (fleetguard.agent.sink) when it ships to a controller: it keeps no store, and
nothing on this path imports DuckDB (nor numpy): on a GPU host the agent stays small."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector as PromCollector

from fleetguard.config import Config
from fleetguard.jobcontrol.runtime_slot import RuntimeSlot
from fleetguard.records.action_requests import ActionKind, ActionRequest
from fleetguard.secret_files import SecretFileError, read_secret_text
from fleetguard.shipping.channel import CommandChannel, Runner
from fleetguard.shipping.commands import CommandKind, CommandOutcome, HostCommand
from fleetguard.shipping.errors import ShippingError
from fleetguard.shipping.nats_shipper import NatsShipper, open_nats_shipper
from fleetguard.shipping.shipper import Shipper
from fleetguard.shipping.spool import Spool
from fleetguard.shipping.spool_buffer import SpoolBuffer

log = logging.getLogger(__name__)

SHUTDOWN_DRAIN_SECONDS = 5.0


# A controller's command kind -> the runtime executor's action.
_ACTIONS = {
    CommandKind.CHECKPOINT: ActionKind.CHECKPOINT,
    CommandKind.RESTART: ActionKind.RESTART,
    CommandKind.STOP: ActionKind.STOP_CRASH_LOOP,
    CommandKind.CORDON: ActionKind.CORDON,
}
_OUTCOMES = {
    "succeeded": CommandOutcome.DONE,
    "requested": CommandOutcome.DONE,
    "failed": CommandOutcome.FAILED,
    "skipped": CommandOutcome.REFUSED,
}


# A command the host runs itself, not through the training runtime (the self-check): its outcome, its
# detail, and records to ship with it (findings carrying the evidence). Given by the agent's entry point.
HostRunner = Callable[[HostCommand], tuple[CommandOutcome, str, list[object]]]


def host_runner(
    runtime: Runner, own: Mapping[CommandKind, HostRunner], ship: Callable[[list[object]], None]
) -> Runner:
    """`own`'s kinds run here, their records shipped before their ack is taken; the rest go to `runtime`."""

    def run(command: HostCommand) -> tuple[CommandOutcome, str]:
        runner = own.get(command.kind)
        if runner is None:
            return runtime(command)
        outcome, detail, records = runner(command)
        if records:
            ship(records)
        return outcome, detail

    return run


def runtime_runner(slot: RuntimeSlot, host: str) -> Runner:
    """Run a controller's command through the host's training runtime (`slot.service`, set by
    fleetguard.runtime.extension while it runs), as the runtime's own actions are run."""

    def run(command: HostCommand) -> tuple[CommandOutcome, str]:
        if command.kind not in _ACTIONS:
            return CommandOutcome.REFUSED, f"{command.kind.value} is not run by this agent"
        service = slot.service
        if service is None:
            return CommandOutcome.REFUSED, "the training runtime is not running on this host"
        if command.kind is not CommandKind.CORDON and not command.job_id:
            return CommandOutcome.REFUSED, f"{command.kind.value} needs a job id"
        request = ActionRequest.for_command(
            _ACTIONS[command.kind], command.job_id, command.command_id, command.reason, host
        )
        records = service.run_actions([request])
        if not records:
            return CommandOutcome.REFUSED, "no action was taken"
        last = records[-1]
        return _OUTCOMES.get(str(last.outcome), CommandOutcome.FAILED), str(last.detail)

    return run


@dataclass
class Shipping:
    spool: Spool
    buffer: SpoolBuffer
    shipper: Shipper | NatsShipper
    channel: CommandChannel
    metrics: ShippingMetrics

    @property
    def store(self) -> None:
        """No store on this host: the controller keeps the rows."""
        return None

    def apply_retention(self, days: float, now: float) -> None:
        """The controller's store has its own retention; the spool is bounded by spool_max_bytes."""

    def start(self) -> None:
        self.channel.start()
        self.shipper.start()

    def summary(self) -> dict[str, object]:
        return {
            "unsent_batches": self.spool.pending(),
            "dropped_batches": self.spool.stats.dropped,
            "committed_batches": self.shipper.stats.committed,
            "boot_id": self.buffer.boot_id,
        }

    def close(self) -> None:
        """After the agent's final flush: try briefly to send what is spooled (the rest stays spooled for
        the next start), then stop."""
        self.shipper.stop(drain_seconds=SHUTDOWN_DRAIN_SECONDS)
        self.channel.stop()
        self.spool.close()


def read_token(path_text: str) -> str:
    key = "agent.controller_token_file"
    if not path_text:
        raise ShippingError(f"{key}: required with agent.controller_url")
    try:
        token = read_secret_text(key, path_text, 4096)
    except SecretFileError as exc:
        raise ShippingError(str(exc)) from exc
    if len(token) > 512 or not token.isprintable():
        raise ShippingError(f"{key} {path_text}: does not hold a token")
    return token


def open_shipping(
    config: Config, runtime: RuntimeSlot, own: Mapping[CommandKind, HostRunner] | None = None
) -> Shipping:
    """`own`: the command kinds this host runs itself (fleetguard.selfcheck.command), beside the runtime's."""
    agent = config.agent
    nats = agent.transport == "nats"
    token = "" if nats else read_token(agent.controller_token_file)
    try:
        spool = Spool(Path(agent.spool_dir), agent.spool_max_bytes)
    except OSError as exc:
        raise ShippingError(f"agent.spool_dir {agent.spool_dir}: {exc.strerror or exc}") from exc
    buffers: list[SpoolBuffer] = []  # made below, once the channel it takes acks from exists
    channel = CommandChannel(
        Path(agent.spool_dir) / "commands.jsonl",
        host_runner(runtime_runner(runtime, config.host), own or {}, lambda rows: buffers[0].add(rows)),
    )
    shipper: Shipper | NatsShipper
    try:
        if nats:
            shipper = open_nats_shipper(config, spool, channel)
        else:
            shipper = Shipper(spool, agent.controller_url, token, channel=channel, clock=time.monotonic)
    except ValueError as exc:
        raise ShippingError(f"agent.controller_url: {exc}") from exc
    buffer = SpoolBuffer(
        spool,
        config.host,
        agent.flush_interval_seconds,
        channel=channel,
        on_appended=shipper.wake,
        wire=shipper.wire,  # what the controller says it reads: its HTTP answers, or its NATS advertisement
    )
    buffers.append(buffer)
    return Shipping(spool, buffer, shipper, channel, ShippingMetrics(spool, buffer, shipper))


class ShippingMetrics(PromCollector):
    """The spool and the shipper on the agent's /metrics."""

    def __init__(self, spool: Spool, buffer: SpoolBuffer, shipper: Shipper | NatsShipper) -> None:
        self.spool, self.buffer, self.shipper = spool, buffer, shipper

    def collect(self) -> Iterator[Metric]:
        s, sh = self.spool.stats, self.shipper.stats
        yield GaugeMetricFamily(
            "fleetguard_spool_bytes", "Bytes in the shipping spool", value=self.spool.size_bytes()
        )
        yield GaugeMetricFamily(
            "fleetguard_spool_batches",
            "Batches spooled and not yet committed by the controller",
            value=self.spool.pending(),
        )
        yield CounterMetricFamily(
            "fleetguard_spool_dropped_batches",
            "Unsent batches dropped, oldest first, because the spool was full (spool_max_bytes)",
            value=s.dropped,
        )
        yield CounterMetricFamily(
            "fleetguard_spool_corrupt_tails",
            "Records cut short by a crash mid-write, cut off at start",
            value=s.corrupt_tails,
        )
        yield CounterMetricFamily(
            "fleetguard_spool_records_corrupt",
            "Damaged spool records skipped (each run of damaged bytes at start, or a record at send)",
            value=s.corrupt_records,
        )
        yield CounterMetricFamily(
            "fleetguard_shipper_batches_committed", "Batches the controller committed", value=sh.committed
        )
        yield GaugeMetricFamily(
            "fleetguard_shipper_wire_version",
            "The wire version new batches are encoded in: 2 while the controller says it reads it",
            value=self.shipper.wire.version,
        )
        yield CounterMetricFamily(
            "fleetguard_shipper_errors", "Sends that got no answer (controller unreachable)", value=sh.errors
        )
        refused = CounterMetricFamily(
            "fleetguard_shipper_refused", "Sends the controller refused, by HTTP status", labels=["status"]
        )
        for status, n in sorted(sh.refused.items()):
            refused.add_metric([str(status)], n)
        yield refused
        yield CounterMetricFamily(
            "fleetguard_shipper_dropped_refused",
            "Batches the controller refused for their content (400/413): dropped",
            value=sh.dropped_refused,
        )
        yield CounterMetricFamily(
            "fleetguard_shipper_bad_commands",
            "Commands from the controller that could not be read (skipped, not run)",
            value=sh.bad_commands,
        )
        yield CounterMetricFamily(
            "fleetguard_shipper_compacted_rows",
            "NIC rows not shipped because nothing moved since the last shipped one",
            value=self.buffer.compactor.skipped,
        )
