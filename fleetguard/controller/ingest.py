"""The single writer: checked batches wait in a bounded queue; one thread commits them in groups.

A group is one DuckDB transaction: every table's rows (one INSERT per table), the ledger rows naming the
batches, the rows of hosts heard for the first time and the acknowledged commands. So a batch is either
stored whole and recorded in the ledger, or neither; a batch already in the ledger is answered "duplicate"
and not stored again. Grouping is what lets one writer keep up with thousands of agents: the cost of a
commit is shared by every batch in it.

A known host's state (last seen, counts) lives in memory, where the read API, /metrics and the silence
check read it, and is written to `fleet_hosts` about once a second (`flush_hosts`), not in every commit: the
upsert was a fifth of a commit's fixed cost. The ledger, written with each batch, is the durable record of
when a host was last heard: `hosts.load_hosts` takes the newer of the two at start, so a crash between
flushes loses no host's last sign of life.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import queue
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import duckdb
import numpy as np

from fleetguard.clock import Clock
from fleetguard.controller import ledger as ledger_sql
from fleetguard.controller.columns import concat, insert_sql
from fleetguard.controller.command_queue import CommandBook, insert_command, record_acks, record_deliveries
from fleetguard.controller.hosts import HOST_COLUMNS, HOST_TYPES, TIME_COLUMNS, HostState, load_hosts
from fleetguard.controller.journal import Journal, JournalEntry, JournalError, JournalFull
from fleetguard.controller.ledger import Ledger
from fleetguard.controller.niceness import lower_this_thread
from fleetguard.controller.stats import ControllerStats
from fleetguard.controller.validate import BatchRefused, IngestBatch, Refusal, parse_batch
from fleetguard.shipping.commands import CommandKind, HostCommand
from fleetguard.store import Store
from fleetguard.store.schema import TABLES, quote_ident

log = logging.getLogger(__name__)

MAX_GROUP_BATCHES = 512
WRITER_LANES = 2
# A lane starts a commit at most this often (sooner once it holds MAX_GROUP_BATCHES). A commit costs DuckDB
# 10-20 ms of CPU however few rows it holds (a statement per table, the ledger, the WAL:
# bench/controller_load.py), so a lane that commits whatever is queued the moment it is free spends its cores
# on small groups as load grows. Gathering for this long bounds that cost per second, not per batch; a batch
# on a quiet lane is committed at once.
GROUP_WINDOW_SECONDS = 0.1
# With the journal nobody waits on a commit (a batch is answered once journaled), so a lane gathers for
# longer: at 2,048 hosts, groups of ~100 batches rather than ~24, a quarter of the commits and their cost.
# Rows reach the store (and the next diagnosis round) this much later at most.
JOURNALED_GROUP_WINDOW_SECONDS = 0.5
LEDGER_COMPACT_SECONDS = 60.0
# How often the task thread looks for a due task (tasks are due every second or more).
TASK_POLL_SECONDS = 0.1
# How often known hosts' state is written to fleet_hosts (the dashboard reads it there; everything else
# reads the writer's memory). A host is judged silent after several of its 5 s intervals, so a second is
# prompt enough.
HOSTS_FLUSH_SECONDS = 1.0
# A journaled group the store cannot take (disk full, I/O) is tried again after this, doubling to the cap.
STORE_RETRY_SECONDS = 0.5
STORE_RETRY_CAP_SECONDS = 10.0
# At start, how long the replay of the journal waits for a full lane to take a batch before giving up.
REPLAY_WAIT_SECONDS = 120.0
# A host whose journaled batches the store refused (each set aside, never dropped) this many times has its
# next batches refused before the journal (503 `held`, kept in its spool): one host, a compromised agent or a
# bug the edge checks miss, cannot fill the journal's bound with refusals and have every host answered 503.
MAX_SET_ASIDE_PER_HOST = 16
# How long a held host is told to wait before it sends again (HTTP Retry-After), plus up to 10 s of jitter: it
# waits for an operator, and each try costs the controller a full check of the batch. (NATS hosts are never
# held: see `accept`'s `hold`.)
HELD_RETRY_SECONDS = 60
# How long a waiter that gave up still waits for an answer whose commands the commit chose first
# (`wait_answer`): only the commit hooks (rollups, the fleet runtime's feed: milliseconds) come between.
CHOSEN_ANSWER_WAIT_SECONDS = 10.0
# With a journal, how many more batches than `max_queue` a lane may hold, past it as their journaled bodies
# only (_Lane). ~7 KB each rather than ~45-140 KB checked: 4 x 1,024 of them ride out a 5 s store stall
# at 4,096 hosts in ~30 MB.
SPILL_FACTOR = 4
# The largest journaled body a lane keeps as a shell. A shell holds its whole body, and a body may be
# max_body_bytes (8 MiB): SPILL_FACTOR x 1,024 of them would be 32 GiB. A larger batch past the lane's
# capacity is answered 503, as every batch past it was before the spill; with this bound the shells of all
# lanes hold at most SPILL_FACTOR x max_queue_batches x 64 KiB (256 MiB at the default 1,024; a wire-2
# batch of 8 GPUs is ~7 KB).
SPILL_BODY_BYTES = 64 << 10

# The store itself failing (disk, memory, I/O): every batch of the group is answered 503 and re-sent later.
_STORE_FAILURES: tuple[type[Exception], ...] = (
    duckdb.OperationalError,
    duckdb.FatalException,
    duckdb.InternalError,
    duckdb.IOException,
    duckdb.PermissionException,
    OSError,
)


@dataclass
class IngestResult:
    duplicate: bool
    commands: list[HostCommand]


@dataclass
class Pending:
    batch: IngestBatch
    received: float  # monotonic
    done: threading.Event = field(default_factory=threading.Event)
    result: IngestResult | None = None
    error: BatchRefused | None = None
    # With a journal: the batch's entry there (answered already; released once committed).
    journal_id: int | None = None
    entry: JournalEntry | None = None
    # False: queued past the lane's parsed capacity, the batch's key and counts only (its tables dropped);
    # the lane checks its journaled body again when it takes it (`_Lane.put`).
    parsed: bool = True
    # Whether the host is answered (HTTP, in process), so its commands go out with the answer; False for a
    # batch read from NATS, whose host is sent its commands by the command publisher instead, and for one
    # whose waiter gave up before its commit chose them (`IngestWriter.abandon`: nobody reads that answer).
    replies: bool = True
    # The commit chose the commands of this batch's answer and noted them as sent (under the writer's
    # _state): from then on the answer is on its way and can no longer be abandoned.
    chosen: bool = False

    def finish(self, result: IngestResult | None = None, error: BatchRefused | None = None) -> None:
        self.result, self.error = result, error
        self.done.set()


Task = Callable[[duckdb.DuckDBPyConnection, float], object]


@dataclass
class _Periodic:
    name: str
    every_seconds: float
    run: Task
    next_at: float = 0.0


class IngestWriter:
    """Owns every write to the store: batches on its lanes' threads, periodic tasks (the diagnosis round,
    the hosts' state, the ledger's compaction) on a thread of their own."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        stats: ControllerStats,
        *,
        max_queue: int = 4096,
        lanes: int = WRITER_LANES,
        journal: Journal | None = None,
    ) -> None:
        self.store = store
        # With a journal, a batch is answered once it is there (`accept`); the lanes commit it after.
        self.journal = journal
        self._held_keys: set[tuple[str, str, int]] = set()  # journaled, not yet committed (under _state)
        # Copies of each command sent since the last commit (in answers, or published over NATS), recorded in
        # host_commands by the next commit (under _state). Every key was a pending command when sent, and
        # each commit empties the map: bounded by the book's pending commands.
        self._sent: dict[str, int] = {}
        self._appending: set[tuple[str, str, int]] = set()  # being appended to the journal (under _state)
        self.journal_set_aside = 0
        self.clock = clock
        self.stats = stats
        # Lanes: each a queue, a thread and a DuckDB connection of its own; a host always goes to the same
        # lane (its batches stay in order, and no two lanes touch one host's rows). DuckDB commits the lanes'
        # appends side by side: one lane's fsync or Python work no longer holds up every other batch.
        self._lanes = [_Lane(max(1, max_queue // lanes)) for _ in range(lanes)]
        self._threads: list[threading.Thread] = []
        self._tasks_thread: threading.Thread | None = None
        self._last_commit = [float("-inf")] * lanes  # monotonic start of each lane's last group
        self._group_window = GROUP_WINDOW_SECONDS if journal is None else JOURNALED_GROUP_WINDOW_SECONDS
        # Ledger, hosts, commands and counters are shared by the lanes.
        self._state = threading.Lock()
        con = store.connection
        self.ledger = Ledger.load(con)
        self.hosts: dict[str, HostState] = load_hosts(con)
        self.commands = CommandBook.load(con)
        self._tasks: list[_Periodic] = []
        # Called on the writer thread with each batch once it is committed (rollups note what it touched).
        self.on_committed: list[Callable[[IngestBatch], None]] = []
        # Called by `stop` before it waits for the task thread: a task's work under way is asked to finish
        # (a paced diagnosis round stops resting; it would hold the stop, and the store's lock, for seconds).
        self.on_stopping: list[Callable[[], None]] = []
        self._calls_waiting = 0  # callers of `call` not yet answered (under _calls_lock)
        self._calls_lock = threading.Lock()
        self._stop = threading.Event()
        self.every(LEDGER_COMPACT_SECONDS, "ledger compaction", self._compact_ledger)
        # Host state read by other threads (read API, /metrics) is copied under this lock.
        self.hosts_lock = threading.Lock()
        self._unflushed_hosts: set[str] = set()  # changed since fleet_hosts was last written (hosts_lock)
        self.every(HOSTS_FLUSH_SECONDS, "hosts' state", self.flush_hosts)

    def every(self, seconds: float, name: str, task: Task) -> None:
        """Run `task(connection, now)` on the writer's task thread about every `seconds`, inside a transaction
        on the store's connection. The tasks run one at a time, in turn with nothing but each other: beside
        the lanes, not on one (a diagnosis round of 0.2-0.5 s on a lane held every batch of that lane for
        as long: the ingest p99). Slow work that need not write in turn with the rounds goes to
        controller.maintenance."""
        self._tasks.append(_Periodic(name, seconds, task, self.clock.monotonic() + seconds))

    @property
    def queue_depth(self) -> int:
        return sum(q.qsize() for q in self._lanes)

    def host_states(self) -> list[HostState]:
        with self.hosts_lock:
            return [HostState(**vars(h)) for h in self.hosts.values()]

    # ---- from the HTTP workers ------------------------------------------------------------------------

    def submit(self, batch: IngestBatch, *, replies: bool = True) -> Pending:
        """Queue a checked batch for its lane; `replies`: its host is answered (see `Pending.replies`)."""
        pending = Pending(batch, time.monotonic(), replies=replies)
        lane = self._lane_of(batch.host)
        try:
            lane.put_nowait(pending)
        except queue.Full:
            raise BatchRefused(Refusal.OVERLOADED, "the controller is behind; retry later") from None
        return pending

    def wait_answer(self, pending: Pending, timeout: float) -> bool:
        """Wait up to `timeout` for a submitted batch's commit; whether its answer (result or refusal) came.
        A waiter that gives up first abandons it (`abandon`): the commit then chooses and counts no command
        for an answer nobody reads. Unless the commit chose them already: that answer is on its way (the
        commit hooks run between the choice and `done`), so it is waited for and given rather than a 503."""
        if pending.done.wait(timeout):
            return True
        if self.abandon(pending):
            return False
        # Past this, given up all the same: its copies were counted, as for an answer lost on the wire.
        return pending.done.wait(CHOSEN_ANSWER_WAIT_SECONDS)

    def abandon(self, pending: Pending) -> bool:
        """Give up waiting for a submitted batch: True if its commit had not chosen its answer's commands
        yet, and now chooses none (`Pending.replies` off: no copy is counted as delivered to nobody; the
        batch itself is still committed, and a resend is answered "duplicate" with the commands). False if
        it had, or the batch is settled already: then the caller waits for `done` and gives that answer."""
        with self._state:  # the lock under which the commit chooses (`_choose`): one or the other is first
            if pending.chosen or pending.done.is_set():
                return False
            pending.replies = False
            return True

    def accept(
        self,
        items: list[tuple[IngestBatch, JournalEntry]],
        *,
        replies: bool = True,
        awaited: Callable[[int], bool] | None = None,
        hold: bool = True,
    ) -> list[IngestResult | BatchRefused]:
        """With a journal: each batch answered once its entry is on disk (one fdatasync for them all), then
        queued for its lane; a batch already committed or journaled is a duplicate, not journaled again. A
        full lane or journal refuses (503: the agent keeps it in its spool and sends it later), and so does a
        copy of a batch another call is still appending: answered "duplicate" it would be dropped by its
        agent, and that append may yet fail (then neither copy is kept). `awaited(i)`: whether item i's
        answer is still waited for, asked under _state as its commands are chosen; one nobody waits for
        carries none, and none is counted as delivered (None: every answer is awaited)."""
        journal = self.journal
        assert journal is not None

        def carries(i: int) -> bool:  # under _state, at the moment item i's commands are chosen
            return replies and (awaited is None or awaited(i))

        received = time.monotonic()  # the latency histogram counts from here, the journal's append included
        answers: list[IngestResult | BatchRefused | None] = [None] * len(items)
        fresh: list[int] = []
        copies: list[tuple[int, int]] = []  # (index, index of the same batch earlier in this call)
        # Journal only what the lanes can take: once on disk a batch is queued whatever the lane holds (the
        # bound is passed by at most the batches being appended), never answered "retry" after the fact.
        planned: dict[int, int] = {}
        first: dict[tuple[str, str, int], int] = {}
        lanes = [self._lane_of(batch.host) for batch, _ in items]  # before the lock: the lanes wait on it
        # `hold` False (NATS): a held host's message would wait in the stream, nak'ed again and again, and
        # count in the pool consumer's messages awaiting an ack until, hours on, the whole pool stalled. The
        # agent let it go once JetStream stored it, so it is taken; a refusal sets it aside as before.
        hosts = {batch.host for batch, _ in items} if hold else set()
        held = self._held_hosts(journal, hosts)  # may read the directory
        with self._state:
            for i, (batch, entry) in enumerate(items):
                key = batch.key
                lane = lanes[i]
                spills = planned.get(id(lane), 0) >= lane.room()  # past its checked capacity: a shell
                if key in self.ledger or key in self._held_keys:
                    self.stats.duplicates += 1
                    answers[i] = IngestResult(duplicate=True, commands=self._send(batch.host, carries(i)))
                elif batch.host in held:
                    answers[i] = BatchRefused(
                        Refusal.HELD,
                        f"{journal.set_aside_of(batch.host)} batches of this host were refused by the store "
                        "and set aside in the controller's journal; its batches wait until an operator has "
                        "looked at them",
                    )
                elif key in first:  # settled with its first copy: one append, taken or refused whole
                    copies.append((i, first[key]))
                elif key in self._appending:
                    answers[i] = BatchRefused(Refusal.OVERLOADED, "this batch is being written; retry later")
                elif planned.get(id(lane), 0) >= lane.room(spill=True) or (
                    spills and len(entry.body) > SPILL_BODY_BYTES
                ):
                    answers[i] = BatchRefused(Refusal.OVERLOADED, "the controller is behind; retry later")
                else:
                    planned[id(lane)] = planned.get(id(lane), 0) + 1
                    self._appending.add(key)
                    first[key] = i
                    fresh.append(i)
        try:
            # none fresh (all copies or refused): no append, so no wait behind a sync under way
            ids = journal.append_many([items[i][1] for i in fresh]) if fresh else []
        except JournalError as exc:
            with self._state:
                self._appending.difference_update(items[i][0].key for i in fresh)
            full = isinstance(exc, JournalFull)
            refusal = BatchRefused(
                Refusal.OVERLOADED if full else Refusal.STORE_FAILED,
                "the controller is behind; retry later"
                if full
                else "the controller's journal cannot be written",
            )
            if not full:
                log.error("%s; batches are refused with 503", exc)
            for i in fresh:
                answers[i] = refusal
            for i, _ in copies:
                answers[i] = refusal
            return [a for a in answers if a is not None]
        # One hold of the state lock per call after the append: each is a wait behind a lane's commit.
        try:
            with self._state:  # held before queued: a lane that commits it at once finds it to discard
                for i in fresh:
                    batch = items[i][0]
                    self._appending.discard(batch.key)
                    self._held_keys.add(batch.key)
                for i in fresh:
                    answers[i] = IngestResult(
                        duplicate=False, commands=self._send(items[i][0].host, carries(i))
                    )
                for i, _ in copies:  # once each, under the lock: the stats and commands are the lanes' too
                    self.stats.duplicates += 1
                    answers[i] = IngestResult(
                        duplicate=True, commands=self._send(items[i][0].host, carries(i))
                    )
        finally:
            # On disk, so queued whatever failed above (the caller then answers 503; the agent's resend is
            # a duplicate): never left "being written", which would answer every resend 503 until a restart.
            for i, entry_id in zip(fresh, ids, strict=True):
                batch, entry = items[i]
                lanes[i].put(Pending(batch, received, journal_id=entry_id, entry=entry))
        return [a for a in answers if a is not None]

    def held_hosts(self) -> list[str]:
        """The hosts whose batches are held for those of theirs set aside (sorted; none without a
        journal): what `fleetguard status` and the read API name."""
        if self.journal is None:
            return []
        # Recounted first (as a batch's check does): a host an operator freed is not named until it sends.
        return sorted(self._held_hosts(self.journal, set(self.journal.set_aside_by_host)))

    @staticmethod
    def _held_hosts(journal: Journal, hosts: set[str]) -> set[str]:
        """Those of `hosts` held back for the batches of theirs set aside (MAX_SET_ASIDE_PER_HOST). When
        one is, the directory is counted again first (at most every journal.RECOUNT_SECONDS): the files an
        operator has removed free their host without a restart."""
        if not journal.set_aside_by_host:  # nearly always: no entry set aside at all
            return set()
        if not any(journal.set_aside_of(h) >= MAX_SET_ASIDE_PER_HOST for h in hosts):
            return set()
        journal.recount_set_aside()
        return {h for h in hosts if journal.set_aside_of(h) >= MAX_SET_ASIDE_PER_HOST}

    def wait_committed(self, timeout: float) -> bool:
        """Until every batch answered from the journal so far is committed (and its commit hooks have run);
        whether that came within `timeout`. Without a journal an answer already means committed."""
        deadline = time.monotonic() + timeout
        with self._state:
            if not self._held_keys:
                return True
        for lane in self._lanes:  # a lane gathering for its window commits what it has now (a call ends it)
            lane.put_call(_wake)
        while True:
            with self._state:
                if not self._held_keys:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)

    def replay_journal(self, parse: Callable[[JournalEntry], IngestBatch]) -> int:
        """Queue what the journal held at start (a previous run answered these and was stopped before it
        committed them); one the checks now refuse is set aside, not dropped. The lanes must be running."""
        journal = self.journal
        if journal is None:
            return 0
        replayed = 0
        # A segment at a time, each entry queued as its lane has room: memory holds what the lanes hold.
        for entry_id, entry in journal.iter_replay():
            replayed += 1
            try:
                batch = parse(entry)
            except BatchRefused as exc:
                journal.set_aside(entry_id, entry, f"refused on replay: {exc.message}")
                self.journal_set_aside += 1
                continue
            with self._state:
                self._held_keys.add(batch.key)
            lane = self._lane_of(batch.host)
            waited_until = time.monotonic() + REPLAY_WAIT_SECONDS
            while lane.room() <= 0:  # before the first request: wait for the lane to commit some
                if time.monotonic() > waited_until:  # the store takes nothing: start fails, journal kept
                    raise JournalError(
                        f"the store took none of the journal's batches for {REPLAY_WAIT_SECONDS:.0f} s"
                    )
                time.sleep(0.01)
            lane.put_nowait(Pending(batch, time.monotonic(), journal_id=entry_id, entry=entry))
        if replayed:
            log.warning("%d batches replayed from the ingest journal", replayed)
        return replayed

    def _lane_of(self, host: str) -> _Lane:
        return self._lanes[zlib.crc32(host.encode()) % len(self._lanes)]

    def call(self, fn: Callable[[], None], timeout: float = 30.0) -> None:
        """Run `fn` on the writer thread (for writes that are not batches: queuing a command)."""
        done = threading.Event()
        errors: list[BaseException] = []

        def wrapped() -> None:
            try:
                fn()
            except BaseException as exc:
                errors.append(exc)
            finally:
                done.set()

        if self._stop.is_set():
            raise BatchRefused(Refusal.OVERLOADED, "the controller is stopping")
        with self._calls_lock:
            self._calls_waiting += 1
        try:
            self._lanes[0].put_call(wrapped)
            # Waited in slices: a writer that stops meanwhile (shutdown) never runs `fn`, and a caller on
            # another thread (the repair loop) must not hold the shutdown up for the whole timeout.
            deadline = time.monotonic() + timeout
            while not done.wait(0.2):
                if self._stop.is_set() and not any(t.is_alive() for t in self._threads):
                    raise BatchRefused(Refusal.OVERLOADED, "the controller stopped before this was written")
                if time.monotonic() >= deadline:
                    raise BatchRefused(Refusal.OVERLOADED, "the controller is behind; retry later")
        finally:
            with self._calls_lock:
                self._calls_waiting -= 1
        if errors:
            raise errors[0]

    def calls_waiting(self) -> bool:
        """Whether a `call` waits: its work (a command queued, a repair's end) takes the store's lock, which a
        diagnosis round holds throughout, lane 0's batches waiting behind it (the round's pacer asks this)."""
        return self._calls_waiting > 0

    def queue_command(self, host: str, kind: CommandKind, job_id: str | None, reason: str) -> HostCommand:
        """Queue a command for `host` (stored, then carried by its ingest replies); CommandRefused if the
        host has too many unacknowledged ones, BatchRefused(OVERLOADED) if the writer is behind."""
        queued: list[HostCommand] = []

        def enqueue() -> None:
            with self._state:
                command = self.commands.prepare(host, kind, job_id, reason)
            with self.store.transaction() as con:
                insert_command(con, host, command, self.clock.time())
            with self._state:
                self.commands.queued(host, command)
                self.stats.commands_queued += 1
            queued.append(command)

        self.call(enqueue)
        return queued[0]

    def sent_commands(self, command_ids: Iterable[str]) -> None:
        """Commands sent other than in an answer (published over NATS): their copies are recorded by the
        next commit, as those sent in answers are."""
        with self._state:
            for command_id in command_ids:
                self._note_sent(command_id)

    def _send(self, host: str, replies: bool) -> list[HostCommand]:
        """The commands an answer to `host` carries (none where the host is not answered), noted as sent.
        Under _state."""
        if not replies:
            return []
        commands = self.commands.for_host(host)
        self.stats.commands_delivered += len(commands)
        for command in commands:
            self._note_sent(command.command_id)
        return commands

    def _choose(self, p: Pending) -> list[HostCommand]:
        """The commands of the answer a commit gives `p`, noted as sent. Under _state, so a waiter that gives
        up (`abandon`) does so either before this (none chosen, none counted) or after (the answer is
        given). A journaled batch was answered, with its host's commands, when it was accepted: nobody
        waits for this answer, and its commands were counted then."""
        if p.journal_id is not None:
            return []
        p.chosen = True
        return self._send(p.batch.host, p.replies)

    def _note_sent(self, command_id: str) -> None:
        self._sent[command_id] = self._sent.get(command_id, 0) + 1

    def pending_commands(self) -> dict[str, list[HostCommand]]:
        """A copy of the unacknowledged commands per host (for delivery off the ingest path: NATS hosts)."""
        with self._state:
            return {host: list(commands) for host, commands in self.commands.pending.items()}

    # ---- the writer thread ----------------------------------------------------------------------------

    def start(self) -> None:
        for index in range(len(self._lanes)):
            cursor = self.store.cursor()  # made here, on the thread that owns the store
            thread = threading.Thread(
                target=self._run, args=(index, cursor), name=f"fleetguard-ingest-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        self._tasks_thread = threading.Thread(
            target=self._run_tasks, name="fleetguard-writer-tasks", daemon=True
        )
        self._tasks_thread.start()

    def stop(self) -> None:
        """Commit what is queued, write the hosts' state and the copies of commands sent since the last
        commit (the last answers' commands: no later commit records them), then stop."""
        self._stop.set()
        for hurry in self.on_stopping:
            hurry()
        if self._tasks_thread is not None:
            self._tasks_thread.join(timeout=60)  # a round under way finishes; none starts
        for lane in self._lanes:
            # A lane waiting for its next batch wakes now rather than at the end of its 0.2 s wait (Ctrl-C
            # is waited on). Behind whatever is queued, so that is committed first; a full lane is not
            # waiting.
            lane.put_call(_wake)
        for thread in self._threads:
            thread.join(timeout=60)
        # A lane (or a task) still writing: the host state is not final (load_hosts recovers from the ledger).
        if any(t.is_alive() for t in [*self._threads, *filter(None, [self._tasks_thread])]):
            return
        with self._state:
            sent, self._sent = self._sent, {}
        try:
            with self.store.transaction() as con:
                now = self.clock.time()
                self.flush_hosts(con, now)
                record_deliveries(con, sent, now)
        except Exception:
            log.exception("the hosts' state and commands' deliveries could not be written at shutdown")

    def flush_hosts(self, con: duckdb.DuckDBPyConnection, _now: float) -> None:
        """Write the state of the hosts heard since the last flush to fleet_hosts (inside a transaction).
        An UPDATE of rows the lanes inserted earlier: a lane only ever inserts new hosts, so the two never
        write the same row (a host inserted after this transaction began is flushed at its next batch)."""
        with self.hosts_lock:
            states = [self.hosts[h] for h in self._unflushed_hosts]  # replaced on change, never mutated
            self._unflushed_hosts = set()
        if not states:
            return
        try:
            con.register("__flush_hosts", _host_rows(states))
            try:
                con.execute(_UPDATE_HOSTS)
            finally:
                with contextlib.suppress(duckdb.Error):
                    con.unregister("__flush_hosts")
        except BaseException:
            with self.hosts_lock:
                self._unflushed_hosts.update(s.host for s in states)
            raise

    def _run(self, index: int, cursor: duckdb.DuckDBPyConnection) -> None:
        try:
            while True:
                group = self._take_group(index, cursor)
                if group:
                    self.commit_group(group, cursor)
                elif self._stop.is_set():
                    return
        finally:
            cursor.close()

    def _run_tasks(self) -> None:
        """The periodic tasks' own thread: due ones run in turn; polled, since the clock may be a test's.
        At a lower CPU priority than the handlers and lanes (controller/niceness.py)."""
        lower_this_thread()
        while not self._stop.wait(TASK_POLL_SECONDS):
            self._run_due_tasks()

    def _take_group(self, index: int, cursor: duckdb.DuckDBPyConnection) -> list[Pending]:
        lane = self._lanes[index]
        try:
            first = lane.get(timeout=0.2)
        except queue.Empty:
            return []
        items = [first]
        # Until the window since this lane's last commit has passed: later batches join this group. A call
        # ends the gathering: somebody waits for it (a command queued, `wait_committed`), and the batches
        # before it are committed before it runs.
        gather_until = self._last_commit[index] + self._group_window
        while len(items) < MAX_GROUP_BATCHES and isinstance(items[-1], Pending):
            left = gather_until - time.monotonic()
            try:
                items.append(
                    lane.get(timeout=left) if left > 0 and not self._stop.is_set() else lane.get_nowait()
                )
            except queue.Empty:
                break
        self._last_commit[index] = time.monotonic()
        group: list[Pending] = []
        for item in items:
            if isinstance(item, Pending):
                if item.parsed or self._parse_spilled(item):
                    group.append(item)
            else:
                if group:  # keep the order: batches before the call are committed before it runs
                    self.commit_group(group, cursor)
                    group = []
                item()
        self.stats.queue_depth = self.queue_depth
        return group

    def _parse_spilled(self, p: Pending) -> bool:
        """A spilled batch's journaled body checked again, as replay checks it (the same body and clock: the
        same batch). Should the checks refuse it now, it is set aside as a replay would set it aside."""
        assert p.entry is not None and p.journal_id is not None and self.journal is not None
        try:
            p.batch = parse_entry(p.entry)
        except Exception as exc:  # after its 200: kept aside, and the lane goes on
            # Not only a refusal: this runs on the lane's thread after the batch was answered, so an error
            # here (MemoryError while a stall fills memory) would end the lane and leave its hosts'
            # batches uncommitted until a restart. The body stays on disk beside the journal either way.
            if isinstance(exc, BatchRefused):
                reason = f"refused when taken from the queue: {exc.message}"
            else:
                log.exception("a spilled batch of %s could not be checked again; set aside", p.entry.host)
                reason = f"could not be checked when taken from the queue: {type(exc).__name__}: {exc}"
            self.journal.set_aside(p.journal_id, p.entry, reason)
            self.journal_set_aside += 1
            with self._state:
                self._held_keys.discard(p.batch.key)
            return False
        p.parsed = True
        return True

    def _run_due_tasks(self) -> None:
        now_mono = self.clock.monotonic()
        for task in self._tasks:
            if now_mono < task.next_at:
                continue
            task.next_at = now_mono + task.every_seconds
            try:
                with self.store.transaction() as con:
                    task.run(con, self.clock.time())
            except Exception:
                log.exception("controller task %s failed", task.name)

    def _compact_ledger(self, con: duckdb.DuckDBPyConnection, _now: float) -> None:
        ledger_sql.compact(con)

    # ---- one group -------------------------------------------------------------------------------------

    def commit_group(self, group: list[Pending], cursor: duckdb.DuckDBPyConnection | None = None) -> None:
        """Commit a group in one transaction, on `cursor` (a lane's connection) or the store's own. Journaled
        batches (answered already) that the store cannot take now are tried again, with a growing pause,
        until it can or the writer stops (then the journal gives them to the next start)."""
        attempt = 0
        while group := self._commit_group_once(group, cursor):
            pause = min(STORE_RETRY_CAP_SECONDS, STORE_RETRY_SECONDS * 2**attempt)
            if self._stop.wait(pause):
                return
            attempt += 1

    def _commit_group_once(
        self, group: list[Pending], cursor: duckdb.DuckDBPyConnection | None
    ) -> list[Pending]:
        """One try at `commit_group`; the journaled batches left to try again."""
        fresh: list[Pending] = []
        duplicates: list[Pending] = []
        seen: set[tuple[str, str, int]] = set()
        with self._state:
            for p in group:
                key = p.batch.key
                (duplicates if key in self.ledger or key in seen else fresh).append(p)
                seen.add(key)
        now = self.clock.time()
        t0 = time.monotonic()
        try:
            staged = self._write(fresh, now, cursor)
        except _STORE_FAILURES as exc:
            kept = [p for p in group if p.journal_id is not None]
            log.error(
                "the store cannot be written (%s: %s); %s",
                type(exc).__name__,
                exc,
                "journaled batches are kept and tried again" if kept else "batches are refused with 503",
            )
            for p in group:
                if p.journal_id is None:
                    self._refuse(
                        p, BatchRefused(Refusal.STORE_FAILED, "the controller's store cannot be written")
                    )
            return kept
        except Exception as exc:
            # A value the checks let through and DuckDB refuses: find the batch, commit the others.
            log.warning("a group of %d batches was refused (%s); committing them one by one", len(fresh), exc)
            return self._commit_one_by_one(fresh, duplicates, now, cursor)
        self._committed(fresh, duplicates, staged, time.monotonic() - t0)
        return []

    def _commit_one_by_one(
        self,
        fresh: list[Pending],
        duplicates: list[Pending],
        now: float,
        cursor: duckdb.DuckDBPyConnection | None,
    ) -> list[Pending]:
        """Each of `fresh` on its own; the journaled ones the store could not take now, to try again (answered
        already: refused, one would wait in the journal for the next start and pin its segment till then)."""
        ok: list[Pending] = []
        kept: list[Pending] = []
        staged: list[HostState] = []
        for p in fresh:
            try:
                staged = self._write([p], now, cursor)
            except _STORE_FAILURES:
                if p.journal_id is not None:
                    kept.append(p)
                    continue
                self._refuse(
                    p, BatchRefused(Refusal.STORE_FAILED, "the controller's store cannot be written")
                )
            except Exception as exc:
                self._refuse(p, BatchRefused(Refusal.INVALID_VALUE, f"the store refused the batch: {exc}"))
            else:
                ok.append(p)
                self._apply_hosts(staged)
        self._committed(ok, duplicates, [], 0.0)
        return kept

    def _refuse(self, p: Pending, error: BatchRefused) -> None:
        self.stats.refuse(error.reason.value)
        if self.journal is not None and p.journal_id is not None and p.entry is not None:
            # Answered already, and refused by the store for its content (one it cannot write now is tried
            # again, never refused): kept aside, never dropped.
            with self._state:
                self._held_keys.discard(p.batch.key)
            try:
                self.journal.set_aside(p.journal_id, p.entry, error.message)
                self.journal_set_aside += 1
            except OSError as exc:
                log.error("a refused journaled batch from %s stays in the journal: %s", p.batch.host, exc)
        p.finish(error=error)

    def _write(
        self, fresh: list[Pending], now: float, cursor: duckdb.DuckDBPyConnection | None = None
    ) -> list[HostState]:
        """Commit the batches; return the hosts' new state (applied by the caller once committed)."""
        batches = [p.batch for p in fresh]
        # A host's batches all go to one lane, so no other thread stages its state: the lock is for the
        # command queue only (the handlers wait on it).
        staged = self._stage_hosts(batches, now)
        with self._state:
            sent, self._sent = self._sent, {}
        try:
            self._commit(batches, staged, sent, now, cursor)
        except BaseException:
            with self._state:  # recorded by the commit that next succeeds
                for command_id, copies in sent.items():
                    self._sent[command_id] = self._sent.get(command_id, 0) + copies
            raise
        return staged

    def _commit(
        self,
        batches: list[IngestBatch],
        staged: list[HostState],
        sent: dict[str, int],
        now: float,
        cursor: duckdb.DuckDBPyConnection | None,
    ) -> None:
        with self._transaction(cursor) as con:
            views: list[str] = []
            try:
                for name, table in TABLES.items():
                    parts = [b.tables[name] for b in batches if name in b.tables]
                    if parts:
                        view = f"__ingest_{name}"
                        arrays = concat(table, parts)
                        con.register(view, arrays)
                        views.append(view)
                        con.execute(insert_sql(table, view, arrays))
                if batches:
                    # As parameters: a few dozen values need no registered view (~1 ms a commit).
                    con.execute(_INSERT_LEDGER, _ledger_params(batches, now))
                new_hosts = [s for s in staged if s.host not in self.hosts]
                if new_hosts:  # known hosts' state is written by flush_hosts
                    con.register("__ingest_hosts", _host_rows(new_hosts))
                    views.append("__ingest_hosts")
                    con.execute(_UPSERT_HOSTS)
                for b in batches:
                    if b.acks:
                        record_acks(con, b.host, b.acks, now)
                record_deliveries(con, sent, now)
            finally:
                for view in views:
                    with contextlib.suppress(duckdb.Error):
                        con.unregister(view)

    @contextlib.contextmanager
    def _transaction(self, cursor: duckdb.DuckDBPyConnection | None) -> Iterator[duckdb.DuckDBPyConnection]:
        if cursor is None:
            with self.store.transaction() as con:
                yield con
            return
        cursor.execute("BEGIN TRANSACTION")
        try:
            yield cursor
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                cursor.execute("ROLLBACK")
            raise
        try:
            cursor.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                cursor.execute("ROLLBACK")
            raise

    def _stage_hosts(self, batches: list[IngestBatch], now: float) -> list[HostState]:
        newest: dict[str, IngestBatch] = {}
        counts: dict[str, tuple[int, int]] = {}
        for b in batches:
            if b.host not in newest or b.sent_ts >= newest[b.host].sent_ts:
                newest[b.host] = b
            n, rows = counts.get(b.host, (0, 0))
            counts[b.host] = (n + 1, rows + b.rows)
        states: list[HostState] = []
        for host, b in newest.items():
            old = self.hosts.get(host)
            n, rows = counts[host]
            states.append(
                HostState(
                    host=host,
                    boot_id=b.boot_id,
                    first_seen=old.first_seen if old else now,
                    last_seen=now,
                    last_sent=max(b.sent_ts, old.last_sent)
                    if old and old.boot_id == b.boot_id
                    else b.sent_ts,
                    last_seq=max(b.seq, old.last_seq) if old and old.boot_id == b.boot_id else b.seq,
                    interval_seconds=b.interval_seconds,
                    batches=(old.batches if old else 0) + n,
                    rows=(old.rows if old else 0) + rows,
                    gpus=_gpus(b) if "gpu_samples" in b.tables else (old.gpus if old else 0),
                    agent_version=b.agent_version,
                )
            )
        return states

    def _apply_hosts(self, staged: list[HostState]) -> None:
        with self.hosts_lock:
            for s in staged:
                self.hosts[s.host] = s
                self._unflushed_hosts.add(s.host)

    def _committed(
        self, fresh: list[Pending], duplicates: list[Pending], staged: list[HostState], seconds: float
    ) -> None:
        stats = self.stats
        self._apply_hosts(staged)
        rows: dict[str, int] = {}  # counted before the lock: the handlers wait on it
        for p in fresh:
            for name, columns in p.batch.tables.items():
                rows[name] = rows.get(name, 0) + len(next(iter(columns.values())))
        with self._state:
            for p in fresh:
                b = p.batch
                self.ledger.add(b.host, b.boot_id, b.seq)
                if b.acks:
                    tally = self.commands.acked(b.host, {a.command_id for a in b.acks})
                    stats.commands_acked += tally.acked
                    stats.commands_acked_again += tally.repeated
                    stats.commands_ack_unknown += tally.unknown
            for name, n in rows.items():
                stats.rows_committed[name] = stats.rows_committed.get(name, 0) + n
            if fresh:
                stats.batches_committed += len(fresh)
                stats.observe_commit(seconds)  # stats.lock is a leaf: taken under ours, never the reverse
            stats.duplicates += len(duplicates)
            answers = [
                (p, duplicate, self._choose(p))
                for p, duplicate in [*((p, False) for p in fresh), *((p, True) for p in duplicates)]
            ]
        for p in fresh:
            for hook in self.on_committed:
                hook(p.batch)
        if self.journal is not None:  # after the hooks: `wait_committed` means "as a commit leaves it"
            done_ids = [p.journal_id for p in (*fresh, *duplicates) if p.journal_id is not None]
            if done_ids:
                self.journal.release(done_ids)
                with self._state:
                    self._held_keys.difference_update(p.batch.key for p in (*fresh, *duplicates))
        done = time.monotonic()
        for p, duplicate, commands in answers:
            stats.observe_latency(done - p.received)
            p.finish(IngestResult(duplicate=duplicate, commands=commands))


def _wake() -> None:
    """Put on a lane by `stop`: ends the writer thread's wait for a batch."""


class _Lane:
    """A lane's queue: put and get in C (queue.SimpleQueue), so no Python-level lock is taken by every
    handler thread. queue.Queue's was: a lock every handler takes is handed from thread to thread, each
    handoff a switch of the interpreter lock, and while a diagnosis round held the interpreter those handoffs
    were most of the ingest p99. Bounded by a look at its size (handlers putting at the same moment may pass
    the bound by as many).

    With a journal a lane holds up to SPILL_FACTOR times more: past `capacity` a batch is queued as its key
    and journaled body only (a tenth of its checked form), and checked again when the lane takes it. So a
    store stall (a checkpoint holds every commit for ~3 s at 4,096 hosts) is ridden out with the memory of
    `capacity` checked batches, not answered 503."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._queue: queue.SimpleQueue[Pending | Callable[[], None]] = queue.SimpleQueue()

    def room(self, spill: bool = False) -> int:
        return self.capacity * (1 + SPILL_FACTOR if spill else 1) - self._queue.qsize()

    def qsize(self) -> int:
        return self._queue.qsize()

    def put_nowait(self, pending: Pending) -> None:
        """queue.Full when the lane holds its capacity."""
        if self._queue.qsize() >= self.capacity:
            raise queue.Full
        self._queue.put(pending)

    def put(self, pending: Pending) -> None:
        """A batch answered from the journal already: queued whatever the lane holds (never refused after
        its answer; `accept` looked at the room before it appended); past `capacity`, spilled."""
        # A body past SPILL_BODY_BYTES is queued checked even here: `accept` refused it past the capacity,
        # so it is one of the few that raced another appender past the bound, and a shell holds its body.
        entry = pending.entry
        if self._queue.qsize() >= self.capacity and entry is not None and len(entry.body) <= SPILL_BODY_BYTES:
            pending.batch = dataclasses.replace(pending.batch, tables={})
            pending.parsed = False
        self._queue.put(pending)

    def put_call(self, call: Callable[[], None]) -> None:
        """A call for the lane's thread (a write that is not a batch, or stop's wake-up): never refused."""
        self._queue.put(call)

    def get(self, timeout: float) -> Pending | Callable[[], None]:
        return self._queue.get(timeout=timeout)

    def get_nowait(self) -> Pending | Callable[[], None]:
        return self._queue.get_nowait()


def parse_entry(entry: JournalEntry) -> IngestBatch:
    """A journaled body checked again as it was when it came (times against when it was received)."""
    return parse_batch(entry.body, entry.host, compressed=entry.compressed, now=entry.received)


_INSERT_LEDGER = (
    "INSERT INTO ingest_ledger SELECT unnest($1::VARCHAR[]), unnest($2::VARCHAR[]), unnest($3::BIGINT[]), "
    "unnest($3::BIGINT[]), make_timestamp(CAST(round($4::DOUBLE * 1000000) AS BIGINT)), unnest($5::BIGINT[])"
)


def _ledger_params(batches: list[IngestBatch], now: float) -> list[object]:
    return [
        [b.host for b in batches],
        [b.boot_id for b in batches],
        [b.seq for b in batches],
        now,
        [b.rows for b in batches],
    ]


def _gpus(batch: IngestBatch) -> int:
    return len(set(batch.tables["gpu_samples"].get("uuid", ())))


def _host_rows(states: list[HostState]) -> dict[str, object]:
    return {c: np.array([getattr(s, c) for s in states], dtype=object) for c in HOST_COLUMNS}


def _host_value(column: str, sql_type: str, source: str) -> str:
    """`column` of `source` (a view of Python objects: _host_rows) as fleet_hosts stores it."""
    value = f"{source}.{quote_ident(column)}"
    if column in TIME_COLUMNS:
        return f"make_timestamp(CAST(round(CAST({value} AS DOUBLE) * 1000000) AS BIGINT))"
    return f"CAST({value} AS {sql_type})"


_UPSERT_HOSTS = (
    "INSERT OR REPLACE INTO fleet_hosts SELECT "
    + ", ".join(_host_value(c, t, "n") for c, t in zip(HOST_COLUMNS, HOST_TYPES, strict=True))
    + " FROM __ingest_hosts AS n"
)

_UPDATE_HOSTS = (
    "UPDATE fleet_hosts SET "
    + ", ".join(
        f"{quote_ident(c)} = {_host_value(c, t, 'u')}"
        for c, t in zip(HOST_COLUMNS, HOST_TYPES, strict=True)
        if c != "host"
    )
    + " FROM __flush_hosts AS u WHERE fleet_hosts.host = CAST(u.host AS VARCHAR)"
)
