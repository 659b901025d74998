"""The agent's wait for readable streams works with descriptors past select()'s 1024 limit."""

from __future__ import annotations

import os
import resource

import pytest

from fleetguard.agent.agent import poll_readable


def test_a_descriptor_numbered_past_1024_is_waited_on_and_found_readable() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2100:
        pytest.skip("the hard open-file limit leaves no room past 2048")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2100), hard))
    read_end, write_end = os.pipe()
    high = os.dup2(read_end, 2048)
    try:
        assert poll_readable([high], 0.0) == []  # nothing written yet
        os.write(write_end, b"x")
        assert poll_readable([high], 1.0) == [high]
    finally:
        for fd in (high, read_end, write_end):
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_pipe_whose_writer_left_is_reported_so_the_reader_sees_end_of_file() -> None:
    read_end, write_end = os.pipe()
    os.close(write_end)
    try:
        assert poll_readable([read_end], 1.0) == [read_end]
    finally:
        os.close(read_end)
