"""`predict`'s table for people: a header row naming its columns, then one row per device in rank order."""

from __future__ import annotations

import pytest

from fleetguard.predict.explain_output import print_rows


def test_the_predict_table_has_a_header_row_and_one_row_per_device(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = [
        {
            "rank": 1,
            "device_id": "GPU-aaaa",
            "ts": 0.0,
            "risk": 0.42,
            "drivers": [{"feature": "ecc", "value": 3.0}],
        },
        {"rank": 2, "device_id": "GPU-bbbb", "ts": 0.0, "risk": 0.07, "drivers": []},
    ]
    print_rows(rows)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["#", "DEVICE", "RISK", "DRIVERS", "(feature=value)"]
    assert [line.split()[:3] for line in lines[1:]] == [
        ["1", "GPU-aaaa", "0.4200"],
        ["2", "GPU-bbbb", "0.0700"],
    ]
    assert lines[1].split()[3] == "ecc=3"
