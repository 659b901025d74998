"""A seeded fleet history with faults, for `policy replay` tests, demos and the diagnosis benchmarks:
GPU samples, XIDs (application noise, hardware faults, storms), IB counter deltas. Deterministic per seed.
GPU samples come from scripted devices (collectors.scripted_device) through the one sample builder
(collectors.gpu_sampling), as the live and simulated collectors' do."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator

from collectors.gpu_device import FastReading, GpuIdentity
from collectors.gpu_sampling import fast_sample
from collectors.scripted_device import ScriptedGpuDevice
from fleetguard.records.telemetry import Event, EventKind, GpuSample, NicCounterSample

DAY = 86400.0


def history(
    hosts: int,
    days: int,
    *,
    start: float = 1_700_000_000.0,
    gpus_per_host: int = 8,
    sample_seconds: float = 1800.0,
    seed: int = 0,
) -> Iterator[list[GpuSample | Event | NicCounterSample]]:
    """One list of records per simulated day."""
    rng = random.Random(seed)
    uuids = [[str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(gpus_per_host)] for _ in range(hosts)]
    for day in range(days):
        t0 = start + day * DAY
        records: list[GpuSample | Event | NicCounterSample] = []
        for h in range(hosts):
            host = f"node{h:04d}"
            records.extend(_samples(rng, host, uuids[h], t0, sample_seconds))
            records.extend(_xids(rng, host, gpus_per_host, t0))
            records.extend(_counters(rng, host, t0))
            records.extend(_quiet_counters(host, t0, sample_seconds))
        records.sort(key=lambda r: r.ts)
        yield records


def _pci(gpu: int) -> str:
    return f"0000:{0x18 + 0x10 * gpu:02x}:00.0"


def _samples(rng: random.Random, host: str, uuids: list[str], t0: float, every: float) -> Iterator[GpuSample]:
    # A GPU running hot (a failing fan, a blocked inlet) throttles for a few hours on some days.
    hot = rng.random() < 0.02
    hot_from = t0 + rng.random() * DAY * 0.75
    hot_until = hot_from + 3600.0 * rng.uniform(2, 6)
    for i, gpu_uuid in enumerate(uuids):
        device = ScriptedGpuDevice(GpuIdentity(index=i, uuid=gpu_uuid, pci_bus_id=_pci(i)))
        t = t0
        while t < t0 + DAY:
            throttled = hot and i == 0 and hot_from <= t < hot_until
            device.set_fast(
                FastReading(
                    temperature_celsius=92.0 if throttled else 60.0 + rng.random() * 10,
                    clocks_event_reasons=0x40 if throttled else 0x4,
                    remapped_rows_pending=False,
                )
            )
            yield fast_sample(device, host, t)
            t += every


def _xids(rng: random.Random, host: str, gpus: int, t0: float) -> Iterator[Event]:
    def event(code: int, ts: float, gpu: int, count: int = 1) -> Event:
        return Event(
            ts=ts,
            host=host,
            kind=EventKind.XID,
            source="kmsg",
            message=f"NVRM: Xid (PCI:{_pci(gpu)[:-2]}): {code}, pid=4242, name=python3",
            code=code,
            pci_bus_id=_pci(gpu),
            count=count,
        )

    for _ in range(rng.randrange(3)):  # application noise: a user bug is not a GPU fault
        yield event(rng.choice((13, 31, 43)), t0 + rng.random() * DAY, rng.randrange(gpus))
    if rng.random() < 0.03:  # a hardware fault
        yield event(rng.choice((48, 74, 79, 95, 119)), t0 + rng.random() * DAY, rng.randrange(gpus))
    if rng.random() < 0.01:  # a storm: one fault printing hundreds of lines
        ts, gpu = t0 + rng.random() * (DAY - 600), rng.randrange(gpus)
        for k in range(400):
            yield event(95, ts + k * 1.5, gpu)


def _counters(rng: random.Random, host: str, t0: float) -> Iterator[NicCounterSample]:
    if rng.random() < 0.05:  # a port with a dirty cable: symbol errors for an hour
        ts = t0 + rng.random() * (DAY - 3600)
        for k in range(60):
            delta = rng.randrange(300, 1500)
            yield NicCounterSample(
                ts=ts + 60 * k,
                host=host,
                device="mlx5_0",
                port=1,
                counter="symbol_error",
                group="counters",
                value=1000 * k + delta,
                delta=delta,
                rate_per_second=delta / 60.0,
            )
    if rng.random() < 0.01:
        yield NicCounterSample(
            ts=t0 + rng.random() * DAY,
            host=host,
            device="mlx5_1",
            port=1,
            counter="link_downed",
            group="counters",
            value=1,
            delta=1,
            rate_per_second=1 / 60.0,
        )


def _quiet_counters(host: str, t0: float, every: float) -> Iterator[NicCounterSample]:
    """The readings of healthy ports between faults (the agent reads every counter every round)."""
    t = t0
    while t < t0 + DAY:
        for device, counter in (("mlx5_0", "symbol_error"), ("mlx5_1", "link_downed")):
            yield NicCounterSample(
                ts=t,
                host=host,
                device=device,
                port=1,
                counter=counter,
                group="counters",
                value=0,
                delta=0,
                rate_per_second=0.0,
            )
        t += every
