"""The shipped XID catalog loads as typed entries; a malformed catalog is a clear error naming entry and
field."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.xid_catalog import (
    XID_ACTIONS,
    XID_CLASSES,
    XidCatalogError,
    XidEntry,
    default_catalog_path,
    load_xid_catalog,
    xid_catalog_by_number,
)

ENTRY = 'xid = 48\nname = "double-bit ECC error"\nclass = "hardware"\naction = "drain"\nfatal = true\n'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "xid.toml"
    path.write_text(text)
    return path


def test_default_catalog_is_found_in_the_source_tree() -> None:
    assert default_catalog_path() == Path(__file__).resolve().parents[2] / "data" / "xid_catalog.toml"


def test_installed_package_falls_back_to_the_shipped_data_inside_fleetguard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import collectors.xid_catalog as module

    monkeypatch.setattr(module, "__file__", str(tmp_path / "site-packages" / "collectors" / "xid_catalog.py"))
    path = default_catalog_path()
    assert path.parts[-3:] == ("fleetguard", "_shipped_data", "xid_catalog.toml")


def test_shipped_catalog_has_every_xid_of_the_reference_table() -> None:
    numbers = {e.xid for e in load_xid_catalog()}
    assert numbers == {13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140, 154}


def test_shipped_catalog_entry_is_typed() -> None:
    entry = xid_catalog_by_number()[79]
    assert entry == XidEntry(
        xid=79,
        name="GPU has fallen off the bus",
        error_class="hardware",
        action="reboot_node",
        fatal=True,
        note="Reboot the node and drain it.",
    )


def test_shipped_catalog_marks_application_errors_not_fatal() -> None:
    catalog = xid_catalog_by_number()
    assert not catalog[13].fatal and not catalog[31].fatal and not catalog[94].fatal
    assert catalog[48].fatal and catalog[95].fatal


def test_shipped_catalog_uses_only_known_classes_and_actions() -> None:
    for entry in load_xid_catalog():
        assert entry.error_class in XID_CLASSES
        assert entry.action in XID_ACTIONS


def test_entries_come_back_sorted_by_xid(tmp_path: Path) -> None:
    second = ENTRY.replace("xid = 48", "xid = 13")
    entries = load_xid_catalog(write(tmp_path, f"[[xid]]\n{ENTRY}\n[[xid]]\n{second}"))
    assert [e.xid for e in entries] == [13, 48]


def test_note_is_optional(tmp_path: Path) -> None:
    (entry,) = load_xid_catalog(write(tmp_path, f"[[xid]]\n{ENTRY}"))
    assert entry.note == ""


def test_missing_file_is_a_catalog_error(tmp_path: Path) -> None:
    with pytest.raises(XidCatalogError, match="does not exist"):
        load_xid_catalog(tmp_path / "none.toml")


def test_invalid_toml_is_a_catalog_error(tmp_path: Path) -> None:
    with pytest.raises(XidCatalogError, match="not valid TOML"):
        load_xid_catalog(write(tmp_path, "[[xid]\n"))


def test_missing_field_names_the_entry_and_field(tmp_path: Path) -> None:
    with pytest.raises(XidCatalogError, match=r"#1: missing field 'fatal'"):
        load_xid_catalog(write(tmp_path, "[[xid]]\n" + ENTRY.replace("fatal = true\n", "")))


def test_boolean_xid_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(XidCatalogError, match="xid must be int"):
        load_xid_catalog(write(tmp_path, "[[xid]]\n" + ENTRY.replace("xid = 48", "xid = true")))


def test_unknown_class_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(XidCatalogError, match="class 'cosmic'"):
        load_xid_catalog(write(tmp_path, "[[xid]]\n" + ENTRY.replace('"hardware"', '"cosmic"')))


def test_unknown_action_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(XidCatalogError, match="action 'pray'"):
        load_xid_catalog(write(tmp_path, "[[xid]]\n" + ENTRY.replace('"drain"', '"pray"')))


def test_unknown_field_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(XidCatalogError, match="unknown field"):
        load_xid_catalog(write(tmp_path, "[[xid]]\n" + ENTRY + "severity = 3\n"))


def test_duplicate_xid_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(XidCatalogError, match="XID 48 appears twice"):
        load_xid_catalog(write(tmp_path, f"[[xid]]\n{ENTRY}\n[[xid]]\n{ENTRY}"))


def test_a_file_without_xid_tables_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(XidCatalogError, match=r"expected \[\[xid\]\]"):
        load_xid_catalog(write(tmp_path, "title = 'x'\n"))
