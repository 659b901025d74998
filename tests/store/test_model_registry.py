"""The model registry (store migration 15) on a real DuckDB file: every model kept with its state, one
active at most, promotions and rollbacks audited in the log, rollback walking back through what served."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetguard.store import Store
from fleetguard.store import model_registry as reg
from fleetguard.store.migrations import CURRENT_VERSION


def _model(
    model_id: str, created: float, state: reg.ModelState = reg.ModelState.CANDIDATE
) -> reg.ModelRecord:
    return reg.ModelRecord(model_id, created, created - 100.0, created - 10.0, state, {"verdict": "promote"})


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(tmp_path / "registry.duckdb")


def test_a_new_store_has_the_registry_tables(store: Store) -> None:
    with store:
        assert CURRENT_VERSION >= 15
        assert reg.list_models(store.connection) == [] and reg.active_model(store.connection) is None


def test_promote_retires_the_serving_model_and_logs_who(store: Store) -> None:
    with store:
        con = store.connection
        reg.add_model(con, _model("m1", 1000.0), "gate")
        reg.add_model(con, _model("m2", 2000.0), "gate")
        reg.promote(con, "m1", "gate", 1001.0)
        reg.promote(con, "m2", "alice", 2001.0)
        states = {m.model_id: m.state for m in reg.list_models(con)}
        assert states == {"m1": reg.ModelState.RETIRED, "m2": reg.ModelState.ACTIVE}
        active = reg.active_model(con)
        assert active is not None and active.promoted_by == "alice" and active.promoted_ts == 2001.0
        actions = [(e.model_id, e.action, e.actor) for e in reg.history(con)]
        assert ("m2", reg.LogAction.PROMOTED, "alice") in actions
        assert ("m1", reg.LogAction.RETIRED, "alice") in actions


def test_rollback_walks_back_through_the_models_that_served(store: Store) -> None:
    with store:
        con = store.connection
        for i, t in enumerate((1000.0, 2000.0, 3000.0), start=1):
            reg.add_model(con, _model(f"m{i}", t), "gate")
            reg.promote(con, f"m{i}", "gate", t + 1)
        reg.add_model(con, _model("rejected", 3500.0, reg.ModelState.REJECTED), "gate")
        retired, restored = reg.rollback(con, "bob", 4000.0)
        assert retired.model_id == "m3" and restored is not None and restored.model_id == "m2"
        _, restored = reg.rollback(con, "bob", 4001.0)
        assert restored is not None and restored.model_id == "m1"
        _, restored = reg.rollback(con, "bob", 4002.0)
        assert restored is None and reg.active_model(con) is None  # the model in model_dir serves
        with pytest.raises(reg.RegistryError, match="already serves"):
            reg.rollback(con, "bob", 4003.0)


def test_the_registry_refuses_unknown_active_or_unsafe_ids(store: Store) -> None:
    with store:
        con = store.connection
        reg.add_model(con, _model("m1", 1000.0), "gate")
        with pytest.raises(reg.RegistryError, match="no model"):
            reg.promote(con, "m9", "x", 1.0)
        reg.promote(con, "m1", "x", 1001.0)
        with pytest.raises(reg.RegistryError, match="already active"):
            reg.promote(con, "m1", "x", 1002.0)
        for bad in ("../m1", "m1/x", "", ".hidden", "a" * 200):
            with pytest.raises(reg.RegistryError, match="not a model id"):
                reg.check_model_id(bad)
        with pytest.raises(reg.RegistryError, match="already registered"):
            reg.add_model(con, _model("m1", 5.0), "gate")


def test_a_model_without_its_files_cannot_be_promoted(store: Store) -> None:
    with store:
        con = store.connection
        reg.add_model(con, _model("old", 1000.0, reg.ModelState.RETIRED), "gate")
        reg.mark_files_removed(con, "old", 2000.0, "gate")
        with pytest.raises(reg.RegistryError, match="files were removed"):
            reg.promote(con, "old", "x", 3000.0)


def test_served_before_lists_what_served_before_a_model_newest_first(store: Store) -> None:
    with store:
        con = store.connection
        for i, t in enumerate((1000.0, 2000.0, 3000.0, 4000.0), start=1):
            reg.add_model(con, _model(f"m{i}", t), "gate")
            reg.promote(con, f"m{i}", "gate", t + 1)
        reg.add_model(con, _model("rejected", 3500.0, reg.ModelState.REJECTED), "gate")
        reg.add_model(con, _model("candidate", 4500.0), "gate")
        assert [m.model_id for m in reg.served_before(con, "m4", 2)] == ["m3", "m2"]
        assert [m.model_id for m in reg.served_before(con, "m4", 9)] == ["m3", "m2", "m1"]
        assert reg.served_before(con, "m4", 0) == [] and reg.served_before(con, "m1", 3) == []
        reg.mark_files_removed(con, "m2", 5000.0, "retrain gate")
        assert [m.model_id for m in reg.served_before(con, "m4", 2)] == ["m3", "m1"]
        # after a rollback to m3, m4 (promoted later) did not serve before it
        reg.rollback(con, "bob", 6000.0)
        assert [m.model_id for m in reg.served_before(con, "m3", 3)] == ["m1"]
        assert reg.served_before(con, "unknown", 3) == []
