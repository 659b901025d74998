"""The agent's end of the command channel: commands from ingest replies are run once, acked in a batch.

Executed once: a command's id is written (fsynced) to `commands.jsonl` in the spool directory before it runs,
and its outcome after; an id found there is never run again. A command found started but not finished after
a crash is acked `interrupted`, not re-run. A command delivered again (its ack was lost, or not yet
committed) is answered from the file with its recorded outcome.

Bounded: the file is rewritten (to a temporary file, fsynced, renamed over it) once it holds more than
2 x MAX_REMEMBERED lines, keeping one line per remembered id; the oldest finished ids are forgotten first,
long after their acks were committed (the controller stops delivering a command once its ack is).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path

from fleetguard.shipping.commands import CommandAck, CommandOutcome, HostCommand

log = logging.getLogger(__name__)

Runner = Callable[[HostCommand], tuple[CommandOutcome, str]]
MAX_REMEMBERED = 10_000
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC  # the agent runs as root: no planted link is written through


class CommandChannel:
    def __init__(self, journal: Path, runner: Runner) -> None:
        self.journal = journal
        self.runner = runner
        self._lock = threading.Lock()
        self._outcomes: dict[str, CommandAck | None] = {}  # id -> outcome (None: running)
        self._acks: list[CommandAck] = []
        self._work: queue.Queue[HostCommand | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._file_lock = threading.Lock()
        self._lines = 0  # in the journal file
        self.executed = 0
        self.compactions = 0
        self._load()

    def _load(self) -> None:
        try:
            lines = self.journal.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return
        self._lines = len(lines)
        for line in lines[-2 * MAX_REMEMBERED :]:
            try:
                doc = json.loads(line)
                command_id = str(doc["id"])
                if doc["state"] == "started":
                    self._outcomes.setdefault(command_id, None)
                else:
                    self._outcomes[command_id] = CommandAck(
                        command_id, CommandOutcome(doc["outcome"]), doc["detail"]
                    )
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line
        for command_id, outcome in list(self._outcomes.items()):
            if outcome is None:
                ack = CommandAck(command_id, CommandOutcome.INTERRUPTED, "the agent stopped while it ran")
                self._outcomes[command_id] = ack
                self._write(
                    {
                        "id": command_id,
                        "state": "finished",
                        "outcome": ack.outcome.value,
                        "detail": ack.detail,
                    }
                )
                self._acks.append(ack)

    def _write(self, doc: dict[str, object]) -> None:
        with self._file_lock:
            fd = os.open(self.journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND | _NOFOLLOW, 0o600)
            try:
                os.write(fd, (json.dumps(doc) + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            self._lines += 1
            if self._lines > 2 * MAX_REMEMBERED:
                self._compact()

    def _compact(self) -> None:
        """Rewrite the journal with one line per remembered id, the most recent MAX_REMEMBERED finished ones
        and every running one (never forgotten: it would be run again). Atomic: a crash leaves the old file
        or the new one."""
        with self._lock:
            entries = list(self._outcomes.items())
        finished = [(i, a) for i, a in entries if a is not None][-MAX_REMEMBERED:]
        keep = {i for i, _ in finished} | {i for i, a in entries if a is None}
        lines = []
        for command_id, ack in entries:
            if command_id not in keep:
                continue
            if ack is None:
                lines.append({"id": command_id, "state": "started"})
            else:
                doc = {"id": command_id, "state": "finished", "outcome": ack.outcome.value}
                lines.append({**doc, "detail": ack.detail})
        temporary = self.journal.with_name(self.journal.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW, 0o600)
        try:
            os.write(fd, "".join(json.dumps(doc) + "\n" for doc in lines).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, self.journal)
        dir_fd = os.open(self.journal.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)  # the rename is durable
        finally:
            os.close(dir_fd)
        with self._lock:
            for command_id in [i for i, _ in entries if i not in keep]:
                self._outcomes.pop(command_id, None)
        self._lines = len(lines)
        self.compactions += 1

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fleetguard-commands", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._work.put(None)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def deliver(self, commands: list[HostCommand]) -> None:
        """Commands from a reply (any number of times each): run the new ones, re-ack the known ones."""
        for command in commands:
            with self._lock:
                known = command.command_id in self._outcomes
                outcome = self._outcomes.get(command.command_id)
                if not known:
                    self._outcomes[command.command_id] = None
                elif outcome is not None and outcome not in self._acks:
                    self._acks.append(outcome)
            if not known:
                try:
                    self._write({"id": command.command_id, "state": "started", "kind": command.kind.value})
                except OSError as exc:
                    # Not recorded, so not run (it could run twice after a crash); forgotten, so the next
                    # delivery tries again instead of the command waiting for ever as "running".
                    with self._lock:
                        self._outcomes.pop(command.command_id, None)
                    log.error("command %s not run: no journal (%s)", command.command_id, exc)
                    continue
                self._work.put(command)

    def take_acks(self) -> list[CommandAck]:
        with self._lock:
            acks, self._acks = self._acks, []
            return acks

    def return_acks(self, acks: list[CommandAck]) -> None:
        with self._lock:
            self._acks = [*acks, *self._acks]

    def _run(self) -> None:
        while True:
            command = self._work.get()
            if command is None:
                return
            try:
                outcome, detail = self.runner(command)
            except Exception as exc:
                log.exception("command %s (%s) failed", command.command_id, command.kind)
                outcome, detail = CommandOutcome.FAILED, f"{type(exc).__name__}: {exc}"
            ack = CommandAck(command.command_id, outcome, detail[:1000])
            self._write(
                {"id": ack.command_id, "state": "finished", "outcome": outcome.value, "detail": ack.detail}
            )
            with self._lock:
                self._outcomes[command.command_id] = ack
                self._acks.append(ack)
                self.executed += 1
                if len(self._outcomes) > MAX_REMEMBERED:
                    for old in list(self._outcomes)[: len(self._outcomes) - MAX_REMEMBERED]:
                        del self._outcomes[old]
