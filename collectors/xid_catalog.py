"""The XID catalog (data/xid_catalog.toml) as typed entries: what each XID means, the usual first action."""

from __future__ import annotations

import importlib.resources
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

T = TypeVar("T")

CATALOG_FILE: Final = "xid_catalog.toml"
XID_CLASSES: Final = frozenset(
    {"application", "hardware", "firmware", "driver", "side_effect", "informational", "early_warning"}
)
XID_ACTIONS: Final = frozenset(
    {"none", "watch", "restart_app", "reset_gpu", "reboot_node", "drain", "inspect"}
)


class XidCatalogError(Exception):
    """The catalog file is missing or malformed; the message names the file, the entry and the field."""


@dataclass(frozen=True, slots=True)
class XidEntry:
    xid: int
    name: str
    error_class: str  # "class" in the TOML: application, hardware, ...
    action: str
    fatal: bool
    note: str = ""


def default_catalog_path() -> Path:
    """data/xid_catalog.toml of a source checkout, else the copy shipped inside the installed package."""
    in_repo = Path(__file__).resolve().parents[1] / "data" / CATALOG_FILE
    if in_repo.is_file():
        return in_repo
    shipped = importlib.resources.files("fleetguard") / "_shipped_data" / CATALOG_FILE
    return Path(str(shipped))


def load_xid_catalog(path: Path | str | None = None) -> list[XidEntry]:
    """Entries sorted by XID. XidCatalogError for a missing file, bad TOML, or a bad or duplicated entry."""
    source = Path(path) if path is not None else default_catalog_path()
    try:
        document = tomllib.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise XidCatalogError(f"XID catalog {source} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise XidCatalogError(f"cannot read XID catalog {source}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise XidCatalogError(f"XID catalog {source} is not valid TOML: {exc}") from exc
    raw = document.get("xid")
    if not isinstance(raw, list):
        raise XidCatalogError(f"XID catalog {source}: expected [[xid]] tables")
    entries: list[XidEntry] = []
    seen: set[int] = set()
    for index, item in enumerate(raw):
        entry = _entry(item, f"{source}: [[xid]] #{index + 1}")
        if entry.xid in seen:
            raise XidCatalogError(f"{source}: XID {entry.xid} appears twice")
        seen.add(entry.xid)
        entries.append(entry)
    return sorted(entries, key=lambda e: e.xid)


def xid_catalog_by_number(path: Path | str | None = None) -> dict[int, XidEntry]:
    return {entry.xid: entry for entry in load_xid_catalog(path)}


def _entry(item: Any, where: str) -> XidEntry:
    if not isinstance(item, dict):
        raise XidCatalogError(f"{where}: expected a table")
    unknown = set(item) - {"xid", "name", "class", "action", "fatal", "note"}
    if unknown:
        raise XidCatalogError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    xid = _field(item, "xid", int, where)
    if xid < 0:
        raise XidCatalogError(f"{where}: xid must be >= 0")
    error_class = _field(item, "class", str, where)
    if error_class not in XID_CLASSES:
        raise XidCatalogError(
            f"{where}: class {error_class!r} is not one of {', '.join(sorted(XID_CLASSES))}"
        )
    action = _field(item, "action", str, where)
    if action not in XID_ACTIONS:
        raise XidCatalogError(f"{where}: action {action!r} is not one of {', '.join(sorted(XID_ACTIONS))}")
    note = item.get("note", "")
    if not isinstance(note, str):
        raise XidCatalogError(f"{where}: note must be a string")
    return XidEntry(
        xid=xid,
        name=_field(item, "name", str, where),
        error_class=error_class,
        action=action,
        fatal=_field(item, "fatal", bool, where),
        note=note,
    )


def _field(item: dict[str, Any], name: str, kind: type[T], where: str) -> T:
    if name not in item:
        raise XidCatalogError(f"{where}: missing field {name!r}")
    value = item[name]
    # bool is an int in Python; an XID of `true` is a typo, not 1.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise XidCatalogError(f"{where}: {name} must be {kind.__name__}, got {value!r}")
    return value
