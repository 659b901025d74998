"""NCCL and PyTorch-distributed log lines: prefix fields, and which faults they report."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from collectors.nccl_parse import (
    COLLECTIVE_TIMEOUT,
    IB_ASYNC_EVENT,
    IB_COMPLETION_ERROR,
    IBV_CALL_FAILED,
    NCCL_REMOTE_ERROR,
    NCCL_SYSTEM_ERROR,
    REMOTE_ERROR,
    SOCKET_ERROR,
    SYSTEM_ERROR,
    NcclFault,
    NcclLine,
    classify_nccl_line,
    classify_nccl_message,
    parse_nccl_line,
)

COMPLETION = (
    "gpu-node-07:3468:3905 [4] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
    "10.0.0.7<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.17 "
    "remoteGids::ffff:10.0.0.7 hca mlx5_1"
)


def test_nccl_prefix_fields() -> None:
    line = parse_nccl_line(COMPLETION)
    assert (line.host, line.pid, line.tid, line.cuda_device, line.location, line.level) == (
        "gpu-node-07",
        3468,
        3905,
        4,
        "transport/net_ib.cc:1696",
        "WARN",
    )
    assert line.message.startswith("NET/IB : Got completion from peer 10.0.0.7<54862>")


def test_prefix_without_source_location() -> None:
    line = parse_nccl_line("h:1:2 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.17<0>")
    assert line == NcclLine(
        message="Bootstrap : Using ib0:10.0.0.17<0>", level="INFO", host="h", pid=1, tid=2, cuda_device=0
    )


def test_prefix_after_mpirun_tag_and_nccl_timestamp() -> None:
    line = parse_nccl_line(
        "[1,12]<stdout>:[2025-11-09 07:39:30] h100-28:238:1313 [0] transport/net_ib.cc:139 NCCL WARN x",
        tz=UTC,
    )
    assert (line.host, line.pid, line.message) == ("h100-28", 238, "x")
    assert line.ts == datetime(2025, 11, 9, 7, 39, 30, tzinfo=UTC).timestamp()


def test_pytorch_rank_prefix_is_read() -> None:
    line = parse_nccl_line("[rank5]: torch.distributed.DistBackendError: NCCL error in: x")
    assert (line.rank, line.level, line.host) == (5, None, None)


def test_completion_error_with_status_and_hca() -> None:
    assert classify_nccl_line(parse_nccl_line(COMPLETION)) == NcclFault(
        IB_COMPLETION_ERROR, code=12, hca="mlx5_1", peer="10.0.0.7<54862>"
    )


def test_completion_error_in_the_older_wording() -> None:
    fault = classify_nccl_message(
        "NET/IB : Got completion from peer fe80::966d:ae03:8b:df50%ib0<44413> with error 4, opcode 32613, "
        "len 32613, vendor err 81 (Send)"
    )
    assert fault == NcclFault(IB_COMPLETION_ERROR, code=4, peer="fe80::966d:ae03:8b:df50%ib0<44413>")


def test_completion_error_from_the_ib_plugin() -> None:
    fault = classify_nccl_message(
        "NET/IBP:Got completion from peer 7.6.13.83<36315> with status=12 opcode=32698 len=32696 "
        "vendor err 129"
    )
    assert fault is not None
    assert (fault.category, fault.code) == (IB_COMPLETION_ERROR, 12)


def test_async_fatal_event_names_device_and_port() -> None:
    fault = classify_nccl_message(
        "NET/IB : mlx5_1:1 async fatal event on QP (0x7309dc3bb338): invalid request local work queue error"
    )
    assert fault == NcclFault(IB_ASYNC_EVENT, hca="mlx5_1:1")


def test_async_event_in_the_older_wording_without_device() -> None:
    assert classify_nccl_message("NET/IB : Got async event : port error") == NcclFault(IB_ASYNC_EVENT)


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("Call to ibv_modify_qp failed with error 110 Connection timed out", 110),
        ("Call to ibv_get_async_event failed", None),
        ("NET/IB : Call to ibv_reg_mr failed with 12 Cannot allocate memory", 12),
    ],
)
def test_ibv_call_failures(message: str, code: int | None) -> None:
    assert classify_nccl_message(message) == NcclFault(IBV_CALL_FAILED, code=code)


@pytest.mark.parametrize(
    "message",
    [
        "Net : Call to recv from 10.200.84.247<58355> failed : Broken pipe",
        "Net : Connection closed by remote peer a100-st-p4d24xlarge-22<47861>",
    ],
)
def test_socket_failures(message: str) -> None:
    assert classify_nccl_message(message) == NcclFault(SOCKET_ERROR)


def test_pytorch_unhandled_system_error() -> None:
    line = parse_nccl_line(
        "[rank4]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), "
        "NCCL version 2.21.5"
    )
    assert classify_nccl_line(line) == NcclFault(SYSTEM_ERROR, code=NCCL_SYSTEM_ERROR)


def test_pytorch_remote_error_counts_as_remote_even_when_it_quotes_the_ib_error() -> None:
    line = parse_nccl_line(
        "what(): NCCL error: remote process exited or there was a network error, NCCL version 2.14.3 "
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
        "prematurely. "
        "Last error: NET/IB : Got completion from peer 11.214.147.122<39138> with error 12, opcode 0, len 0"
    )
    assert classify_nccl_line(line) == NcclFault(REMOTE_ERROR, code=NCCL_REMOTE_ERROR)


def test_pytorch_watchdog_timeout() -> None:
    line = parse_nccl_line(
        "[rank4]:[E1122 08:01:02.123456789 ProcessGroupNCCL.cpp:616] [Rank 4] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=18231, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, "
        "Timeout(ms)=600000) ran for 600047 milliseconds before timing out."
    )
    assert classify_nccl_line(line) == NcclFault(COLLECTIVE_TIMEOUT)


@pytest.mark.parametrize(
    "text",
    [
        "gpu-node-07:3468:3905 [4] NCCL INFO transport/net.cc:1302 -> 6",
        "gpu-node-07:3468:3468 [4] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB",
        "step 1200 | loss 2.3141",
        "[rank5]: NET/IB : Got completion from peer 10.0.0.7<54862> with status=12 opcode=0",
        "[rank5]: ncclRemoteError: A call failed possibly due to a network error.",
        "gpu-node-07:1:2 [0] NCCL WARN NCCL_SOCKET_IFNAME set by environment to ib0",
    ],
)
def test_lines_that_report_no_fault(text: str) -> None:
    assert classify_nccl_line(parse_nccl_line(text)) is None
