"""POST /v1/export and GET /v1/export/<id>/<table> on a real controller: a snapshot of every table in the
process's own directory, fetched file by file; off loopback only with the operator token, boot ids only for
operators; a made-up id or table name is a 404, never a path."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fleetguard.store.export import fetch_snapshot, layout_from_snapshot
from tests.controller.helpers import Controller, batch, start_test_controller
from tests.controller.test_read_auth import a_non_loopback_address


@pytest.fixture
def everywhere(tmp_path: Path) -> Iterator[Controller]:
    c = start_test_controller(tmp_path, extra={"controller.listen": "0.0.0.0:0"})
    yield c
    c.running.stop()


def test_a_snapshot_of_every_table_is_fetched_and_laid_out(controller: Controller, tmp_path: Path) -> None:
    assert controller.ship(batch("node-a", 1)).status == 200
    made = controller.post("/v1/export", b"{}", None, encoding="identity")
    assert made.status == 201
    tables = made.doc["tables"]
    assert {"gpu_samples", "incidents", "incident_actions", "fleet_hosts", "alert_outbox"} <= set(tables)
    assert tables["gpu_samples"] == 2 and tables["fleet_hosts"] == 1
    export_id = made.doc["export_id"]
    assert made.doc["files"]["fleet_hosts"] == ["data_0.parquet"]
    body = controller.get(f"/v1/export/{export_id}/fleet_hosts/data_0.parquet").doc
    hosts = pq.read_table(io.BytesIO(body))
    assert hosts.num_rows == 1 and "boot_id" not in hosts.column_names  # no operator token: no boot ids

    snapshot = tmp_path / "snap"
    fetched = fetch_snapshot(controller.url, controller.tokens["operator"], snapshot)
    assert fetched == {name: n for name, n in fetched.items() if n > 0}
    assert "boot_id" in pq.read_table(snapshot / "fleet_hosts" / "data_0.parquet").column_names  # operator's
    out = tmp_path / "out"
    written = layout_from_snapshot(snapshot, out, fetched)
    assert written["gpu_samples"] == 2
    assert list((out / "gpu_samples").glob("dt=*/host=node-a/*.parquet"))
    assert (out / "fleet_hosts" / "fleet_hosts.parquet").exists()


@pytest.mark.parametrize(
    "path",
    [
        "/v1/export/0123456789abcdef0123456789abcdef/gpu_samples/data_0.parquet",  # an id never made
        "/v1/export/../../etc/passwd",
        "/v1/export/{id}/gpu_samples/..%2F..%2F..%2Fetc%2Fpasswd",
        "/v1/export/{id}/..%2Fgpu_samples/data_0.parquet",
        "/v1/export/{id}/not_a_table/data_0.parquet",
        "/v1/export/{id}/gpu_samples/data_9.parquet",
        "/v1/export/{id}/gpu_samples",
    ],
)
def test_made_up_ids_and_tables_are_404(controller: Controller, path: str) -> None:
    assert controller.ship(batch("node-a", 1)).status == 200
    made = controller.post("/v1/export", b"{}", None, encoding="identity")
    reply = controller.get(path.format(id=made.doc["export_id"]))
    assert reply.status == 404, reply.doc


def test_off_loopback_an_export_needs_the_operator_token(everywhere: Controller) -> None:
    host = a_non_loopback_address() or "127.0.0.1"
    base = f"http://{host}:{everywhere.running.port}"
    import urllib.error
    import urllib.request

    def post(token: str | None) -> int:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(base + "/v1/export", data=b"{}", method="POST", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                return int(reply.status)
        except urllib.error.HTTPError as exc:
            exc.close()
            return exc.code

    assert post(None) == 401
    assert post(everywhere.tokens["node-a"]) == 403
    assert post(everywhere.tokens["operator"]) == 201


def test_the_snapshot_is_removed_when_the_controller_stops(tmp_path: Path) -> None:
    c = start_test_controller(tmp_path)
    try:
        assert c.post("/v1/export", b"{}", None, encoding="identity").status == 201
        assert list(tmp_path.glob(".fleetguard-export-*"))
        again = c.post("/v1/export", b"{}", None, encoding="identity")  # replaces the one kept
        assert again.status == 201 and len(list(tmp_path.glob(".fleetguard-export-*"))) == 1
    finally:
        c.running.stop()
    assert not list(tmp_path.glob(".fleetguard-export-*"))
