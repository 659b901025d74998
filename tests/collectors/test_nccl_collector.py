"""NcclLogCollector: follows training logs (paths or globs) and turns NCCL errors into nccl_error Events."""

from __future__ import annotations

import shutil
from pathlib import Path

from collectors.nccl import NcclLogCollector, nccl_event
from collectors.protocol import Collector
from fleetguard.records.telemetry import Event, EventKind

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nccl"
NOW = 1_800_000_000.0
WARN = (
    "gpu-node-07:3468:3905 [4] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_modify_qp failed with error 110 x\n"
)


def training_log(tmp_path: Path) -> Path:
    path = tmp_path / "train_rank4.log"
    shutil.copy(FIXTURES / "train_rank4.log", path)
    return path


def test_is_a_collector(tmp_path: Path) -> None:
    assert isinstance(NcclLogCollector("h", [str(tmp_path / "x.log")]), Collector)


def test_every_error_in_a_training_log_becomes_one_event(tmp_path: Path) -> None:
    collector = NcclLogCollector("gpu-node-07", [str(training_log(tmp_path))])
    events = collector.collect(NOW).events
    assert [(e.host, e.code, e.device, e.pid) for e in events] == [
        ("gpu-node-07", 12, "mlx5_1", 3468),
        ("gpu-node-07", None, "mlx5_1:1", 3468),
        ("gpu-node-07", 110, "cuda:4", 3468),
        ("gpu-node-08", 4, "cuda:1", 9821),
        ("gpu-node-07", None, "cuda:4", 3468),
        ("gpu-node-07", None, "rank4", None),
        ("gpu-node-07", 2, "rank4", None),
        ("gpu-node-07", 6, "rank5", None),
    ]
    assert {(e.kind, e.source, e.ts) for e in events} == {(EventKind.NCCL_ERROR, "nccl_log", NOW)}
    assert collector.problems() == {}


def test_completion_error_event_fields() -> None:
    event = nccl_event(
        "gpu-node-07:3468:3905 [4] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
        "10.0.0.7<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
        host="gpu-node-07.cluster.local",
        now=NOW,
    )
    assert event == Event(
        ts=NOW,
        host="gpu-node-07.cluster.local",
        kind=EventKind.NCCL_ERROR,
        source="nccl_log",
        message=(
            "NET/IB : Got completion from peer 10.0.0.7<54862> with status=12 opcode=0 len=0 "
            "vendor err 129 (Recv)"
        ),
        code=12,
        device="cuda:4",
        pid=3468,
    )


def test_line_without_device_or_rank_is_attributed_to_the_log_file() -> None:
    event = nccl_event(
        "RuntimeError: NCCL error: unhandled system error", host="h", now=NOW, file_name="job.log"
    )
    assert event is not None
    assert (event.device, event.code) == ("job.log", 2)


def test_only_lines_appended_since_the_last_collect_are_read(tmp_path: Path) -> None:
    path = training_log(tmp_path)
    collector = NcclLogCollector("gpu-node-07", [str(path)])
    collector.collect(NOW)
    with path.open("a") as f:
        f.write(WARN)
    assert [e.code for e in collector.collect(NOW + 1).events] == [110]
    assert collector.collect(NOW + 2).events == []


def test_glob_picks_up_logs_of_jobs_that_start_later(tmp_path: Path) -> None:
    collector = NcclLogCollector("gpu-node-07", [str(tmp_path / "*.log")])
    assert collector.collect(NOW).events == []
    (tmp_path / "job-1.log").write_text(WARN)
    (tmp_path / "job-2.log").write_text(WARN)
    (tmp_path / "notes.txt").write_text(WARN)
    events = collector.collect(NOW).events
    assert sorted(e.count for e in events) == [1, 1]
    assert collector.files == [str(tmp_path / "job-1.log"), str(tmp_path / "job-2.log")]


def test_a_storm_in_one_read_is_folded(tmp_path: Path) -> None:
    path = tmp_path / "job.log"
    path.write_text(WARN * 500)
    events = NcclLogCollector("gpu-node-07", [str(path)]).collect(NOW).events
    assert [e.count for e in events] == [1, 499]


def test_from_start_false_reads_only_new_lines(tmp_path: Path) -> None:
    path = training_log(tmp_path)
    collector = NcclLogCollector("gpu-node-07", [str(path)], from_start=False)
    assert collector.collect(NOW).events == []
    with path.open("a") as f:
        f.write(WARN)
    assert len(collector.collect(NOW).events) == 1


def test_a_deleted_log_is_forgotten_without_error(tmp_path: Path) -> None:
    path = training_log(tmp_path)
    collector = NcclLogCollector("gpu-node-07", [str(path)])
    collector.collect(NOW)
    path.unlink()
    assert collector.collect(NOW).events == []
    assert collector.files == []
    assert collector.problems() == {}


def test_a_single_path_string_is_accepted(tmp_path: Path) -> None:
    path = training_log(tmp_path)
    collector = NcclLogCollector("gpu-node-07", str(path))
    assert len(collector.collect(NOW).events) == 8


def test_a_flood_is_read_in_slices_with_the_backlog_carried(tmp_path: Path) -> None:
    """Today the whole appended log was parsed in one collect: a 2M-line flood held one round for minutes."""
    log = tmp_path / "train.log"
    log.write_text(WARN * 20_000)  # ~2 MB
    collector = NcclLogCollector(
        "gpu-node-07", [str(log)], fold_window_seconds=None, max_bytes_per_collect=256 * 1024
    )
    slices = []
    while True:
        slices.append(len(collector.collect(NOW).events))
        if not collector.has_backlog:
            break
    assert len(slices) > 1 and max(slices) <= 256 * 1024 // len(WARN) + 1
    assert sum(slices) == 20_000
