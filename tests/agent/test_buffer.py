"""The write buffer: what a failed store write means, decided by the error's type; the size limit; callbacks
that wait for rows to be stored. Real DuckDB stores; failures are real duckdb exception types."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from fleetguard.agent.buffer import WriteBuffer
from fleetguard.records.telemetry import GpuSample, NicCounterSample
from fleetguard.store import Store


def samples(n: int, start: int = 0) -> list[GpuSample]:
    return [GpuSample(ts=1.0 + i, host="h", gpu_index=i, uuid=f"GPU-{i}") for i in range(start, start + n)]


def bad_sample() -> GpuSample:
    return GpuSample(ts=1.0, host="h", gpu_index="bad", uuid="x")  # type: ignore[arg-type]


def raising(error: type[Exception], message: str) -> Callable[[object], int]:
    def append(records: object) -> int:
        raise error(message)

    return append


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (duckdb.IOException, 'IO Error: Could not write file "buffer.duckdb.wal": Input/output error'),
        (duckdb.IOException, 'IO Error: Could not write file "buffer.duckdb.wal": Disk quota exceeded'),
        (duckdb.IOException, 'IO Error: Could not write file "buffer.duckdb.wal": File too large'),
        (duckdb.OutOfMemoryException, "Out of Memory Error: could not allocate block of size 256.0 KiB"),
    ],
    ids=["EIO", "EDQUOT", "EFBIG", "out-of-memory"],
)
def test_rows_stay_buffered_when_the_store_itself_fails(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: type[Exception], message: str
) -> None:
    rejected = tmp_path / "rejected.jsonl"
    buffer = WriteBuffer(store, rejected)
    buffer.add(samples(4))
    monkeypatch.setattr(store, "append", raising(error, message))
    assert buffer.flush() == 0
    assert len(buffer) == 4 and buffer.rejected_rows == 0 and not rejected.exists()


def test_when_the_store_fails_midway_through_a_row_by_row_retry_the_unwritten_rows_stay_buffered(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_append = store.append
    calls = 0

    def append(records: list[object]) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise duckdb.ConversionException("Conversion Error: Could not convert string 'bad' to INT64")
        if calls == 2:
            return real_append(records)
        raise duckdb.IOException("IO Error: Could not write file: Input/output error")

    buffer = WriteBuffer(store)
    buffer.add(samples(3))
    monkeypatch.setattr(store, "append", append)
    assert buffer.flush() == 1
    assert len(buffer) == 2 and buffer.rejected_rows == 0


def test_a_set_aside_row_carries_the_stores_own_reason_for_refusing_it(store: Store, tmp_path: Path) -> None:
    rejected = tmp_path / "rejected.jsonl"
    buffer = WriteBuffer(store, rejected)
    buffer.add([*samples(2), bad_sample()])
    assert buffer.flush() == 2
    assert "ConversionException" in rejected.read_text() and "'bad'" in rejected.read_text()


def test_a_poison_row_that_cannot_be_set_aside_is_logged_whole_and_blocks_no_row_behind_it(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    buffer = WriteBuffer(store, tmp_path / "no-such-dir" / "rejected.jsonl")
    buffer.add([bad_sample(), *samples(2)])
    with caplog.at_level(logging.ERROR):
        assert buffer.flush() == 2  # the flush does not raise, and the rows after the poison one land
    assert len(buffer) == 0 and buffer.rejected_rows == 1
    assert "'bad'" in caplog.text  # the record itself is in the log
    buffer.add(samples(1, start=5))
    assert buffer.flush() == 1


def test_a_full_buffer_drops_the_oldest_rows_and_counts_them(store: Store) -> None:
    buffer = WriteBuffer(store, max_rows=3)
    buffer.add(samples(5))
    assert len(buffer) == 3 and buffer.dropped_rows == 2
    buffer.flush()
    assert store.connection.execute("SELECT gpu_index FROM gpu_samples ORDER BY 1").fetchall() == [
        (2,),
        (3,),
        (4,),
    ]


def test_dropping_rows_is_logged_once_while_the_buffer_stays_full(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    buffer = WriteBuffer(store, max_rows=3)
    with caplog.at_level(logging.ERROR):
        for start in range(0, 20, 4):
            buffer.add(samples(4, start))
    assert sum("dropping the oldest rows" in r.getMessage() for r in caplog.records) == 1


def test_a_callback_queued_behind_rows_runs_once_they_are_stored(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    buffer = WriteBuffer(store)
    buffer.add(samples(2))
    buffer.after_stored(lambda: calls.append("stored"))
    buffer.add(samples(2, 2))
    with monkeypatch.context() as m:
        m.setattr(store, "append", raising(duckdb.IOException, "IO Error: Input/output error"))
        buffer.flush()
    assert calls == []
    buffer.flush()
    buffer.flush()
    assert calls == ["stored"]


def test_two_threads_adding_and_flushing_at_once_store_every_row(store: Store, tmp_path: Path) -> None:
    rejected = tmp_path / "rejected.jsonl"
    buffer = WriteBuffer(store, rejected)
    rounds, gpus = 100, 8

    def sample_and_flush(host: str) -> None:
        for i in range(rounds):
            buffer.add(GpuSample(ts=1.0 + i, host=host, gpu_index=g, uuid=f"GPU-{g}") for g in range(gpus))
            buffer.flush()

    threads = [threading.Thread(target=sample_and_flush, args=(host,)) for host in ("agent", "scoring")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    buffer.flush()
    assert store.counts()["gpu_samples"] == 2 * rounds * gpus
    assert buffer.rejected_rows == 0 and buffer.write_errors == 0 and not rejected.exists()


def counting_appends(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Patch `store.append` to record the size of every call; returns that list."""
    real_append = store.append
    calls: list[int] = []

    def append(records: list[object]) -> int:
        calls.append(len(records))
        return real_append(records)

    monkeypatch.setattr(store, "append", append)
    return calls


def counter(value: int, delta: int | None) -> NicCounterSample:
    return NicCounterSample(1.0, "h", "mlx5_0", 1, "port_xmit_data", "counters", value, delta)


def test_a_value_past_its_column_is_set_aside_without_retrying_row_by_row(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An RDMA counter jumping 0 -> 2**64-1 has a delta past BIGINT: today the batch was refused and retried
    one row at a time (~10 ms a row). The store names the row instead; the rest lands in one more write."""
    rejected = tmp_path / "rejected.jsonl"
    buffer = WriteBuffer(store, rejected)
    rows: list[object] = [*samples(500), counter(2**64 - 1, 2**64 - 1), *samples(499, start=500)]
    buffer.add(rows)
    calls = counting_appends(store, monkeypatch)
    assert buffer.flush() == 999
    assert calls == [1000, 999]
    assert buffer.rejected_rows == 1 and len(buffer) == 0
    assert "delta=18446744073709551615 is outside BIGINT" in rejected.read_text()


def test_a_refused_batch_is_searched_by_halves_not_row_by_row(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    buffer = WriteBuffer(store, tmp_path / "rejected.jsonl")
    rows: list[object] = [*samples(700), bad_sample(), *samples(323, start=700)]
    buffer.add(rows)
    calls = counting_appends(store, monkeypatch)
    assert buffer.flush() == 1023
    assert buffer.rejected_rows == 1
    assert len(calls) <= 1 + 2 * 10 + 1  # the first try, two writes per halving of 1024 rows, the row
    assert store.counts()["gpu_samples"] == 1023


def test_the_search_for_refused_rows_stops_at_its_time_budget_and_goes_on_next_flush(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [0.0]

    def monotonic() -> float:
        return now[0]

    buffer = WriteBuffer(store, tmp_path / "rejected.jsonl", isolate_budget_seconds=2.5, monotonic=monotonic)
    buffer.add([bad_sample() for _ in range(16)])
    buffer.add(samples(16))
    calls = counting_appends(store, monkeypatch)
    real = store.append

    def slow_append(records: list[object]) -> int:
        now[0] += 1.0  # every write takes a second
        return real(records)

    monkeypatch.setattr(store, "append", slow_append)
    flushes = 0
    while len(buffer) and flushes < 50:
        before = len(calls)
        buffer.flush()
        flushes += 1
        # Reaching one refused row takes a write per halving (log2 32 = 5) after the first try; past the
        # budget no further part is started. Row by row, the first flush alone took 33 writes.
        assert len(calls) - before <= 1 + 5 + 3
    assert len(buffer) == 0
    assert buffer.rejected_rows == 16 and store.counts()["gpu_samples"] == 16
    assert flushes > 1


def test_a_link_planted_at_the_rejected_file_is_not_written_through(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # the file sits beside the store (store.path + ".rejected.jsonl"), maybe in a directory a user can write
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    rejected = tmp_path / "rejected.jsonl"
    rejected.symlink_to(victim)
    buffer = WriteBuffer(store, rejected)
    buffer.add([bad_sample(), *samples(2)])
    with caplog.at_level(logging.ERROR):
        assert buffer.flush() == 2
    assert victim.read_text() == "precious\n"
    assert buffer.rejected_rows == 1 and "'bad'" in caplog.text  # logged whole instead
