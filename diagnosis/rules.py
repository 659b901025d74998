"""All rules together: records in, observations out, with the little state rules need between rounds
(the previous sample of each GPU, which PCI address is which GPU).

Samples may also come as plain rows (`Rows`, what a columnar reader fetches): a row no rule can call a fault,
of a component with nothing pending or open, only updates that state and never becomes a record or an
observation. At 1 Hz nearly every GPU sample and port state of a fleet is such a row, and building each as a
record with its "still fine" observations was most of a round's cost."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, compress, groupby
from operator import itemgetter
from typing import Any, NamedTuple, Protocol, TypeVar

from diagnosis.model import ComponentKind, Deferred, Observation, RepairAction, Severity
from diagnosis.policy import Policy
from diagnosis.rules_events import event_observation, finding_observation
from diagnosis.rules_gpu import LastCounters, gpu_observations, may_fault, says_healthy
from diagnosis.rules_nic import counter_observation, port_down, port_id, port_observations
from fleetguard.records.findings import Finding
from fleetguard.records.telemetry import Event, GpuSample, NicCounterSample, NicSample

MAX_GPUS = 1_000_000  # bound on the per-GPU state a hostile or broken feed can make us keep
PACE_ROWS = 2048  # sample rows between the pause points a round's pacer is offered (Rules.pace)
_PORT_ROW_FIELDS = frozenset({"ts", "host", "device", "port", "state", "phys_state"})

Component = tuple[str, ComponentKind, str]
_R = TypeVar("_R", GpuSample, NicSample)


class Reading(NamedTuple):
    """A component was read at `ts` and said nothing a rule looks at (a port's counters that did not move):
    a reader may pass this instead of the records themselves (a tuple: a reader makes one per port and
    round)."""

    host: str
    component: str  # "port:<device>/<port>", as `IncidentKey.component`
    ts: float


@dataclass(frozen=True, slots=True)
class Rows:
    """Records of one kind as plain rows, oldest first; `names` are the record's fields in the rows' column
    order. The rules treat them exactly as the records they stand for."""

    names: tuple[str, ...] = ()
    rows: Sequence[tuple[Any, ...]] = ()


# What the rules keep of a GPU's previous sample: ts and the four counters, as in GPU_ROW_ORDER.
Counters = tuple[float, int | None, int | None, int | None, int | None]


class SteadyGpu(NamedTuple):
    """A GPU whose every row this round said the same (the same counters, index and PCI address) and
    nothing a rule calls a fault, on a host whose every GPU did so and which sent no event or finding this
    round: a reader may pass this instead of its rows (`GpuRowSource`)."""

    host: str
    uuid: str
    gpu_index: int
    pci_bus_id: str | None
    # The newest row's time and the counters every row held: [4:9] is the GPU's `Counters`.
    ts: float
    ecc_corrected_volatile: int | None
    ecc_uncorrected_volatile: int | None
    nvlink_crc_flit_errors: int | None
    pcie_replay_errors: int | None
    says_healthy: bool  # some row says "healthy" of something (`rules_gpu.says_healthy`)


class GpuRowSource(Protocol):
    """A round's GPU rows as a reader splits them: the steady GPUs summed up, the other GPUs' rows fetched
    only when the rules ask (with those of the steady hosts the rules want row by row after all)."""

    @property
    def steady(self) -> Sequence[SteadyGpu]: ...

    def rows(self, hosts: Collection[str]) -> Rows:
        """Every row of the round's GPUs that are not steady, and of the steady GPUs of `hosts`, in the
        order `Signals.gpu_rows` would hold them (names as GPU_ROW_ORDER first)."""
        ...


@dataclass(frozen=True, slots=True)
class Signals:
    """What one round brings: any mix of records, in any order (`gpu_rows` after `gpu_samples`,
    `nic_rows` after `nic_samples`, when both come). `gpu_source`, when a reader gives it, holds the GPU
    rows in place of `gpu_rows`."""

    events: Iterable[Event] = ()
    findings: Iterable[Finding] = ()
    gpu_samples: Iterable[GpuSample] = ()
    nic_samples: Iterable[NicSample] = ()
    nic_counters: Iterable[NicCounterSample] = ()
    readings: Iterable[Reading] = ()
    gpu_rows: Rows = Rows()
    nic_rows: Rows = Rows()
    gpu_source: GpuRowSource | None = None


# The order of GPU rows whose quiet ones the rules pass over fastest: the counters first, as one slice.
GPU_ROW_ORDER = (
    "ts",
    "ecc_corrected_volatile",
    "ecc_uncorrected_volatile",
    "nvlink_crc_flit_errors",
    "pcie_replay_errors",
    "host",
    "uuid",
    "gpu_index",
    "pci_bus_id",
)
_Build = Callable[[tuple[Any, ...]], list[Observation | Deferred]]
Found = Observation | Deferred
# A sample row as the rules first look at it: the row, its component, whether a rule may call it a fault,
# whether it says "healthy" of anything, and the previous counters of its GPU (None for a port).
_Look = tuple[tuple[Any, ...], Component, bool, bool, Counters | None]


def _no_pause() -> None:
    """The pause point of rules nobody paces."""


def _paced(rows: Sequence[tuple[Any, ...]], pace: Callable[[], None]) -> Iterator[Sequence[tuple[Any, ...]]]:
    """`rows` in runs of PACE_ROWS, `pace` called before each (no call, and no step, per row)."""
    for start in range(0, len(rows), PACE_ROWS):
        pace()
        yield rows[start : start + PACE_ROWS] if len(rows) > PACE_ROWS else rows


class _GpuNames(NamedTuple):
    """A GPU's keys into the rules' maps, for the PCI address and index it was last read at."""

    pci_bus_id: str | None
    gpu_index: int
    read_key: tuple[str, str]  # into read_at
    by_pci: tuple[str, str] | None  # into uuids
    by_index: tuple[str, str]  # into uuids

    @classmethod
    def of(cls, host: str, uuid: str, gpu_index: int, pci_bus_id: str | None) -> _GpuNames:
        pci = (host, pci_bus_id.lower().removesuffix(".0")) if pci_bus_id else None
        return cls(pci_bus_id, gpu_index, (host, f"gpu:{uuid}"), pci, (host, f"index:{gpu_index}"))


# A steady GPU as the rules take it: the summary, its key, its kept counters, its names (None: not known
# under the summary's index and address).
_SteadyLook = tuple[SteadyGpu, tuple[str, str], Counters | None, _GpuNames | None]
# What of a steady GPU a host's memo compares: all of `SteadyGpu` but the host and the time.
_SIGNATURE = itemgetter(1, 2, 3, 5, 6, 7, 8, 9)


class _HostMemo(NamedTuple):
    """A steady host as the last round left it in the per-GPU state: while nothing else has touched that
    state (no row or sample of the host since; an emptied map drops every memo, `Rules._emptied`), a round
    whose summary of the host says the same (`signature`) moves only each GPU's time (`Rules._keep_steady`):
    its names, addresses and counters are those kept already."""

    signature: tuple[tuple[Any, ...], ...]
    keys: tuple[tuple[str, str], ...]  # each GPU's key into `previous`, in the summary's order
    read_keys: tuple[tuple[str, str], ...]  # into `read_at`


# A steady host as the rules take it: its looks (`_steady_looks`), or its memo when the summary says what
# the memo does.
_SteadyTake = tuple[str, list[SteadyGpu], list[_SteadyLook] | _HostMemo]


@dataclass(slots=True)
class _QuietRows:
    """Rows left out of a round's observations, with their components; for each, where its healthy
    observations would go in the round's list and what builds them, should its component need them."""

    components: list[Component] = field(default_factory=list)
    rows: list[tuple[int, tuple[Any, ...], _Build]] = field(default_factory=list)  # beside `components`


@dataclass(slots=True)
class Rules:
    policy: Policy
    previous: dict[tuple[str, str], Counters] = field(default_factory=dict)
    uuids: dict[tuple[str, str], str] = field(default_factory=dict)  # (host, pci or "index:N") -> uuid
    # When each GPU / port was last read at all: a fault read from samples is healthy only once a later
    # reading says so, not merely because no reading came (a lost GPU, a sparse history).
    read_at: dict[tuple[str, str], float] = field(default_factory=dict)  # (host, "gpu:uuid"|"port:dev/p")
    heard: set[str] = field(default_factory=set)  # hosts of healthy observations left out (`observations`)
    # Each GPU's keys into the maps above, made once rather than once per sample.
    names: dict[tuple[str, str], _GpuNames] = field(default_factory=dict)
    # Called every PACE_ROWS sample rows: where the caller may let other threads run (fleetguard.pacing).
    pace: Callable[[], None] = field(default=_no_pause, repr=False, compare=False)
    # Steady hosts as the last round left them (`_HostMemo`), all dropped when a per-GPU map is emptied;
    # `epoch` counts those times (a host whose take saw one makes no memo: `_keep_steady`).
    memos: dict[str, _HostMemo] = field(default_factory=dict, repr=False, compare=False)
    epoch: int = field(default=0, repr=False, compare=False)

    def observations(self, signals: Signals, busy: Collection[Component] | None = None) -> list[Observation]:
        """Every observation of the round, sorted by time (bursts and thresholds depend on the order).

        With `busy` (the components with something pending or open), a healthy observation is left out
        when neither that set nor this round's faults name its component: it would change nothing but the
        hosts heard from, which go to `heard` instead. Building the ~3 per sample that say "still fine" was
        most of a round's cost."""
        defer = busy is not None
        out: list[Observation | Deferred] = []
        quiet = _QuietRows()
        # Samples first: they teach which PCI address is which GPU before its events are keyed.
        sampled: set[str] = set()
        for sample in signals.gpu_samples:
            sampled.add(sample.host)
            out.extend(self._gpu(sample, defer))
        gpu_rows = signals.gpu_rows
        if signals.gpu_source is not None:
            gpu_rows = self._steady_rows(signals.gpu_source, busy, sampled)
        self._gpu_rows(gpu_rows, busy, out, quiet)
        for event in signals.events:
            obs = event_observation(event, self.policy, self.uuids)
            if obs is not None:
                out.append(obs)
        for finding in signals.findings:
            obs = finding_observation(finding, self.policy)
            if obs is not None:
                out.append(obs)
        for port in signals.nic_samples:
            out.extend(port_observations(port, defer))
        self._port_rows(signals.nic_rows, busy, out, quiet)
        for counter in signals.nic_counters:
            self._read((counter.host, f"port:{counter.device}/{counter.port}"), counter.ts)
            obs = counter_observation(counter, self.policy.counters)
            if obs is not None:
                out.append(obs)
        self._read_many(((host, component), ts) for host, component, ts in signals.readings)
        built = self._build_deferred(out, busy, quiet) if busy is not None else out
        built.sort(key=lambda o: o.ts)
        return built  # type: ignore[return-value]  # no Deferred is left in it

    def _steady_rows(
        self, source: GpuRowSource, busy: Collection[Component] | None, sampled: Collection[str] = ()
    ) -> Rows:
        """The steady GPUs of `source` taken into the per-GPU state at once, as their rows one by one would
        leave it (equal counters never rise; the newest row is the one kept, its time the one read); the
        rows the rules still need: those of the other GPUs, and of the steady hosts `_steady_looks` sends
        back. Steady GPUs go first: their state is theirs alone (a steady host's every GPU is steady)."""
        steady = source.steady
        if busy is None or not steady:
            return source.rows({g.host for g in steady})
        taken, by_rows = self._take_steady(steady, busy, sampled)
        rows = source.rows(by_rows)
        if not self._room_for(len(steady) + len(rows.rows)):
            # A map at its cap is emptied mid-round, and what it keeps depends on the order the rows come
            # in: only the rows themselves give that order.
            return source.rows({g.host for g in steady})
        self._keep_steady(taken)
        return rows

    def _room_for(self, rows: int) -> bool:
        """Whether `rows` GPU rows, each of a GPU new to the rules and at new keys, would leave every
        per-GPU map short of where it is emptied (`_remember`, `_read_many`)."""
        return (
            len(self.previous) + rows <= MAX_GPUS
            and len(self.names) + rows <= MAX_GPUS
            and len(self.uuids) + 2 * rows <= 2 * MAX_GPUS
            and len(self.read_at) + rows <= 2 * MAX_GPUS
        )

    def _take_steady(
        self, steady: Sequence[SteadyGpu], busy: Collection[Component], sampled: Collection[str] = ()
    ) -> tuple[list[_SteadyTake], set[str]]:
        """Each steady host's memo, when its summary says what the memo does and no GPU of it is busy, else
        its looks (`_steady_looks`; nothing changed yet); and the hosts whose rows the rules need after all,
        among them every host `sampled` this round (a sample record may have faulted one of its GPUs, whose
        quiet rows are then built, as an event's fault would). The pacer is offered a pause every PACE_ROWS
        GPUs, between hosts."""
        gpu = ComponentKind.GPU
        busy_hosts = {host for host, kind, _ in busy if kind is gpu}
        memos = self.memos
        taken: list[_SteadyTake] = []
        by_rows: set[str] = set()
        since_pause = 0
        for host, run in groupby(steady, key=itemgetter(0)):
            gpus = list(run)
            since_pause += len(gpus)
            if since_pause >= PACE_ROWS:
                self.pace()
                since_pause = 0
            if host in sampled:
                by_rows.add(host)
                continue
            hot = host in busy_hosts
            memo = None if hot else memos.get(host)
            if memo is not None and memo.signature == tuple(map(_SIGNATURE, gpus)):
                taken.append((host, gpus, memo))
                continue
            looks = self._steady_looks(host, gpus, busy if hot else ())
            if looks is None:
                by_rows.add(host)
            else:
                taken.append((host, gpus, looks))
        return taken, by_rows

    def _keep_steady(self, taken: list[_SteadyTake]) -> None:
        """The per-GPU state and `heard` as the steady hosts' rows leave them, and each host's memo. The
        pacer is offered a pause every PACE_ROWS GPUs, between hosts."""
        kept, uuids, read_at = self.previous, self.uuids, self.read_at
        since_pause = 0
        for host, gpus, looks in taken:
            since_pause += len(gpus)
            if since_pause >= PACE_ROWS:
                self.pace()
                since_pause = 0
            if isinstance(looks, _HostMemo):
                # Names, addresses and counters are those kept (no memo outlives an emptied map, and its
                # signature says so): of `_remember` and `_read_many`, only the times move.
                for g, key, read_key in zip(gpus, looks.keys, looks.read_keys, strict=True):
                    ts = g.ts
                    if ts >= kept[key][0]:
                        kept[key] = g[4:9]
                    if ts > read_at[read_key]:
                        read_at[read_key] = ts
                if any(g.says_healthy for g in gpus):
                    self.heard.add(host)
                continue
            epoch = self.epoch
            says = False
            for g, key, previous, names in looks:
                says = says or g.says_healthy
                counters: Counters = g[4:9]
                if names is None or previous is None:
                    read: list[tuple[tuple[str, str], float]] = []
                    self._remember(host, g.uuid, g.gpu_index, g.pci_bus_id, counters, read)
                    self._read_many(read)
                    continue
                # `_remember` and `_read_many` of a GPU already known under these names, as `_gpu_looks`.
                ts = g.ts
                if ts >= previous[0]:
                    kept[key] = counters
                if names.by_pci is not None:
                    uuids[names.by_pci] = g.uuid
                uuids[names.by_index] = g.uuid
                if len(uuids) > 2 * MAX_GPUS:
                    uuids.clear()
                    self._emptied()
                before = read_at.get(names.read_key)
                if before is None:
                    if len(read_at) >= 2 * MAX_GPUS:
                        read_at.clear()
                        self._emptied()
                    read_at[names.read_key] = ts
                elif ts > before:
                    read_at[names.read_key] = ts
            if says:
                self.heard.add(host)
            # No map emptied while the host was taken (`_room_for` keeps a round that could from here): the
            # state holds all of it.
            if self.epoch == epoch:
                self._memo(host, gpus)

    def _emptied(self) -> None:
        """A per-GPU map was emptied: every memo made before stands for state now gone, and is dropped (kept,
        stale memos would also pile up past the bound on the state itself)."""
        self.epoch += 1
        self.memos.clear()

    def _memo(self, host: str, gpus: list[SteadyGpu]) -> None:
        memos, known = self.memos, self.names
        if host not in memos and len(memos) >= MAX_GPUS:
            memos.clear()
        keys = tuple((host, g.uuid) for g in gpus)
        read_keys = tuple(known[key].read_key for key in keys)
        memos[host] = _HostMemo(tuple(map(_SIGNATURE, gpus)), keys, read_keys)

    def _forget(self, hosts: Iterable[str]) -> None:
        """The memos of hosts whose rows or samples the rules took one by one: that may have moved state a
        memo stands for (an address, which GPU an index names)."""
        if self.memos:
            for host in hosts:
                self.memos.pop(host, None)

    def _steady_looks(
        self, host: str, gpus: list[SteadyGpu], busy: Collection[Component]
    ) -> list[_SteadyLook] | None:
        """Each GPU of a steady host with its key, kept counters and names (None: not known under the
        summary's index and address); None when the summary cannot say what the rows would: a GPU busy
        (its healthy observations are built), a GPU whose counters are not those kept from its previous
        sample (its first row may have risen), or two GPUs at one PCI address or index (which GPU such a
        key names would then depend on the rows' order)."""
        kept, known = self.previous, self.names
        places: set[tuple[str, str]] = set()
        looks = []
        for g in gpus:
            key = (host, g.uuid)
            previous = kept.get(key)
            if previous is not None and previous[1:] != g[5:9]:  # the four counters
                return None
            if busy and (host, ComponentKind.GPU, g.uuid) in busy:
                return None
            names = known.get(key)
            if names is None or names.pci_bus_id != g.pci_bus_id or names.gpu_index != g.gpu_index:
                names = None
                place_names = _GpuNames.of(host, g.uuid, g.gpu_index, g.pci_bus_id)
            else:
                place_names = names
            by_pci, by_index = place_names.by_pci, place_names.by_index
            if by_index in places or (by_pci is not None and by_pci in places):
                return None
            places.add(by_index)
            if by_pci is not None:
                places.add(by_pci)
            looks.append((g, key, previous, names))
        return looks

    def _build_deferred(
        self, out: list[Observation | Deferred], busy: Collection[Component], quiet: _QuietRows
    ) -> list[Observation | Deferred]:
        """The deferred healthy observations of busy components built in their places; the rest dropped."""
        hot = set(busy)
        hot.update(
            (o.key.host, o.key.component_kind, o.key.component_id)
            for o in out
            if isinstance(o, Observation) and not o.healthy
        )
        out = self._place(out, quiet, hot.difference(busy))
        built: list[Observation | Deferred] = []
        for o in out:
            if isinstance(o, Observation):
                built.append(o)
            elif (o.key.host, o.key.component_kind, o.key.component_id) in hot:
                built.append(
                    Observation(
                        o.ts, o.key, Severity.INFO, RepairAction.NONE, o.rule, o.message, healthy=True
                    )
                )
            else:
                self.heard.add(o.key.host)
        return built

    def _place(
        self, out: list[Observation | Deferred], quiet: _QuietRows, faulted: set[Component]
    ) -> list[Observation | Deferred]:
        """`out` with the healthy observations of the quiet rows whose component faulted this round put
        where the rows stood (a quiet row is never of a busy component); the other quiet rows only say
        their host was heard from. Only the rows of hosts with a fault are looked at one by one: the rest
        go through iterators over their hosts (no Python code, and no tuple hashed, per quiet row)."""
        components = quiet.components
        hosts = list(map(itemgetter(0), components))
        faulted_hosts = {host for host, _, _ in faulted}
        # The rows of the hosts with a fault (a few per fault): the only ones that can be built.
        near = list(compress(range(len(hosts)), map(faulted_hosts.__contains__, hosts)))
        if not near:
            self.heard.update(hosts)
            return out
        # A host all of whose quiet rows are built is heard from through them, not here.
        self.heard.update(set(hosts).difference(faulted_hosts))
        hits = [i for i in near if components[i] in faulted]
        self.heard.update(hosts[i] for i in near if components[i] not in faulted)
        placed: list[Observation | Deferred] = []
        start = 0
        for i in hits:  # positions never decrease: rows were taken in order
            position, row, build = quiet.rows[i]
            placed.extend(out[start:position])
            placed.extend(build(row))
            start = position
        placed.extend(out[start:])
        return placed

    def _gpu_rows(
        self,
        rows: Rows,
        busy: Collection[Component] | None,
        out: list[Observation | Deferred],
        quiet: _QuietRows,
    ) -> None:
        names = rows.names
        if self.memos and rows.rows:
            self._forget(set(map(itemgetter(names.index("host")), rows.rows)))
        if busy is None or names[: len(GPU_ROW_ORDER)] != GPU_ROW_ORDER:
            for row in rows.rows:
                out.extend(self._gpu(_stored(GpuSample, names, row), busy is not None))
            return
        act = partial(self._gpu_now, names)
        _route(self._gpu_looks(rows), busy, out, quiet, act, partial(self._gpu_healthy, names))

    def _gpu_looks(self, rows: Rows) -> Iterator[_Look]:
        """Each GPU row taken into the per-GPU state, with what `_route` needs to place it.

        The state update of a GPU read again at the same PCI address and index (nearly every row) is done
        here without a call: one call per row was a fifth of a round."""
        names = rows.names
        # GPU_ROW_ORDER: ts, the four counters, host, uuid, gpu_index, pci_bus_id, then what only faults read.
        failure, pending_at, reasons_at, temperature_at = (
            names.index(n)
            for n in (
                "remapped_rows_failure",
                "remapped_rows_pending",
                "clocks_event_reasons",
                "temperature_celsius",
            )
        )
        rules = self.policy.gpu
        gpu = ComponentKind.GPU
        kept, known, uuids, read_at = self.previous, self.names, self.uuids, self.read_at
        for run in _paced(rows.rows, self.pace):
            for row in run:
                counters: Counters = row[:5]
                ts, host, uuid = row[0], row[5], row[6]
                key = (host, uuid)
                previous = kept.get(key)
                gpu_names = known.get(key)
                if previous is None or gpu_names is None or gpu_names[0] != row[8] or gpu_names[1] != row[7]:
                    read: list[tuple[tuple[str, str], float]] = []
                    self._remember(host, uuid, row[7], row[8], counters, read)
                    self._read_many(read)
                else:  # `_remember` and `_read_many` of a GPU already known under these names
                    if ts >= previous[0]:
                        kept[key] = counters
                    if gpu_names.by_pci is not None:
                        uuids[gpu_names.by_pci] = uuid
                    uuids[gpu_names.by_index] = uuid
                    if len(uuids) > 2 * MAX_GPUS:
                        uuids.clear()
                        self._emptied()
                    read_key = gpu_names.read_key
                    before = read_at.get(read_key)
                    if before is None:
                        if len(read_at) >= 2 * MAX_GPUS:
                            read_at.clear()
                            self._emptied()
                        read_at[read_key] = ts
                    elif ts > before:
                        read_at[read_key] = ts
                # Counters equal to the previous ones (nearly always) cannot have risen: one tuple comparison.
                rose = (
                    previous is not None
                    and ts > previous[0]
                    and counters[1:] != previous[1:]
                    and _rose(previous, counters)
                )
                pending, reasons = row[pending_at], row[reasons_at]
                faults = may_fault(row[failure], pending, reasons, row[temperature_at], rules, rose)
                yield row, (host, gpu, uuid), faults, says_healthy(pending, reasons), previous

    def _gpu_now(
        self, names: tuple[str, ...], row: tuple[Any, ...], previous: Counters | None
    ) -> Iterable[Found]:
        """What a GPU row a rule acts on says, against the previous sample kept before it."""
        last = None if previous is None else LastCounters._make(previous)
        return gpu_observations(_stored(GpuSample, names, row), last, self.policy.gpu, True)

    def _gpu_healthy(self, names: tuple[str, ...], row: tuple[Any, ...]) -> list[Observation | Deferred]:
        """A quiet row's healthy observations (they never depend on the previous sample)."""
        sample = _stored(GpuSample, names, row)
        return list(gpu_observations(sample, None, self.policy.gpu, True))

    def _port_rows(
        self,
        rows: Rows,
        busy: Collection[Component] | None,
        out: list[Observation | Deferred],
        quiet: _QuietRows,
    ) -> None:
        names = rows.names
        if busy is None or not set(names) >= _PORT_ROW_FIELDS:
            for row in rows.rows:
                out.extend(port_observations(_stored(NicSample, names, row), busy is not None))
            return
        observe = partial(_port_observations, names)
        looks = _port_looks(names, chain.from_iterable(_paced(rows.rows, self.pace)))
        _route(looks, busy, out, quiet, lambda row, _: observe(row), observe)

    def _gpu(self, sample: GpuSample, defer: bool = False) -> Iterator[Observation | Deferred]:
        self._forget((sample.host,))
        read: list[tuple[tuple[str, str], float]] = []
        previous = self._remember(
            sample.host, sample.uuid, sample.gpu_index, sample.pci_bus_id, LastCounters.of(sample), read
        )
        self._read_many(read)
        last = None if previous is None else LastCounters._make(previous)
        yield from gpu_observations(sample, last, self.policy.gpu, defer)

    def _remember(
        self,
        host: str,
        uuid: str,
        gpu_index: int,
        pci_bus_id: str | None,
        counters: Counters,
        read: list[tuple[tuple[str, str], float]],
    ) -> Counters | None:
        """Take a sample into the per-GPU state; the previous sample's counters, as the rules compare.
        When the GPU was read goes to `read`, for `_read_many`."""
        key = (host, uuid)
        previous = self.previous.get(key)
        if previous is None and len(self.previous) >= MAX_GPUS:
            self.previous.clear()
            self._emptied()
        if previous is None or counters[0] >= previous[0]:
            # A late sample (older than the one kept) says nothing about what changed since: keeping it
            # would count the increase up to the newer one a second time.
            self.previous[key] = counters
        names = self.names.get(key)
        if names is None or names[0] != pci_bus_id or names[1] != gpu_index:
            if names is None and len(self.names) >= MAX_GPUS:
                self.names.clear()
                self._emptied()
            names = _GpuNames.of(host, uuid, gpu_index, pci_bus_id)
            self.names[key] = names
        read.append((names.read_key, counters[0]))
        if names.by_pci is not None:
            self.uuids[names.by_pci] = uuid
        self.uuids[names.by_index] = uuid
        if len(self.uuids) > 2 * MAX_GPUS:
            self.uuids.clear()
            self._emptied()
        return previous

    def _read_many(self, reads: Iterable[tuple[tuple[str, str], float]]) -> None:
        """`_read` of each, in order (one call for a round's thousands)."""
        read_at = self.read_at
        for component, ts in reads:
            before = read_at.get(component)
            if before is None and len(read_at) >= 2 * MAX_GPUS:
                read_at.clear()
                self._emptied()
            if ts > (float("-inf") if before is None else before):
                read_at[component] = ts

    def _read(self, component: tuple[str, str], ts: float) -> None:
        if component not in self.read_at and len(self.read_at) >= 2 * MAX_GPUS:
            self.read_at.clear()
            self._emptied()
        if ts > self.read_at.get(component, float("-inf")):
            self.read_at[component] = ts

    def restore(self, samples: Iterable[GpuSample], readings: Iterable[Reading]) -> None:
        """Take back, after a restart, each GPU's newest sample and when each component was last read."""
        for sample in samples:
            self.previous.pop((sample.host, sample.uuid), None)
            for _ in self._gpu(sample, defer=True):
                pass  # only the state: what the sample said was said before the restart
        self._read_many(((host, component), ts) for host, component, ts in readings)

    def read_since(self, host: str, component: str, since: float) -> float | None:
        """The time of the latest reading of `component` after `since`, or None when none came."""
        ts = self.read_at.get((host, component))
        return ts if ts is not None and ts > since else None


def _route(
    looks: Iterable[_Look],
    busy: Collection[Component],
    out: list[Found],
    quiet: _QuietRows,
    act: Callable[[tuple[Any, ...], Counters | None], Iterable[Found]],
    healthy: _Build,
) -> None:
    """The one loop shape of sample rows: a row that may fault, or of a busy component, is built now (`act`,
    in its place in `out`); a quiet row that says "healthy" of something waits in `quiet`, with where it
    stood and what builds it, for `_place` to build only if its component faults elsewhere this round."""
    quiet_component, quiet_row = quiet.components.append, quiet.rows.append  # once per row: no lookup
    for row, component, faults, says, previous in looks:
        if faults or component in busy:
            out.extend(act(row, previous))
        elif says:
            quiet_component(component)
            quiet_row((len(out), row, healthy))


def _port_looks(names: tuple[str, ...], rows: Iterable[tuple[Any, ...]]) -> Iterator[_Look]:
    """Each port row with a state, as `_route` takes it (a port holds no state between rounds)."""
    host_at, device_at, port_at, state_at = (names.index(n) for n in ("host", "device", "port", "state"))
    port_kind = ComponentKind.PORT
    for row in rows:
        state = row[state_at]
        if state is not None:
            component = (row[host_at], port_kind, port_id(row[device_at], row[port_at]))
            yield row, component, port_down(state), True, None


def _rose(previous: Counters, now: Counters) -> bool:
    """Whether any counter the rules rate is above its previous value (both read)."""
    for before, after in zip(previous[1:], now[1:], strict=True):
        if before is not None and after is not None and after > before:
            return True
    return False


def _port_observations(names: tuple[str, ...], row: tuple[Any, ...]) -> list[Observation | Deferred]:
    """What a port row says, as `port_observations` with its healthy one deferred."""
    return list(port_observations(_stored(NicSample, names, row), True))


def _stored(record: type[_R], names: tuple[str, ...], row: tuple[Any, ...]) -> _R:
    """A stored row as the record it was written from: read back, not measured (the one sampler,
    collectors.gpu_sampling, builds every new GpuSample)."""
    build: Callable[..., _R] = record
    return build(**dict(zip(names, row, strict=True)))
