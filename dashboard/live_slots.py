"""The parts of a page that a live refresh changes in place: a table's rows, a figure, a card's text.

A page is drawn by one `render` function. The refresh renders it again and compares it with what the
browser holds: if only slot values differ (the page's shape is the same), only those values are sent and
each table or plot is updated where it stands (a table's rows replaced, a served table asking again for the
page it shows, a figure's traces patched), so the
browser keeps the operator's sort, filter, page and zoom and redraws nothing else. Any other difference (a
table appears, a title changes) sends the whole body again. The browser holds the shape's and each slot's
digest, not the values, so telling the two cases apart costs a few hundred bytes per refresh.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import plotly.io.json as plotly_json
from dash.development.base_component import Component


class SlotKind(enum.StrEnum):
    BLOCKS = "blocks"  # the round a table served in pages shows (`components.served_table`)
    TABLE = "table"  # a DataTable
    FIGURE = "figure"
    TEXT = "text"


# The component property each kind of slot holds its value in.
PROPERTY: Final[dict[SlotKind, str]] = {
    SlotKind.BLOCKS: "data",
    SlotKind.TABLE: "data",
    SlotKind.FIGURE: "figure",
    SlotKind.TEXT: "children",
}
_KIND_KEY: Final = "slot"
_PAGE_KEY: Final = "page"
_NAME_KEY: Final = "name"


def slot_id(kind: SlotKind, name: str = "") -> dict[str, str]:
    """The id of a component holding a slot; `mark` fills in the page and, if empty, a name by position."""
    return {_KIND_KEY: kind.value, _PAGE_KEY: "", _NAME_KEY: name}


def pattern(kind: SlotKind, page_id: str, name: object) -> dict[str, object]:
    """The pattern-matching id of every slot of `kind` on a page (`name` is dash.ALL in a callback)."""
    return {_KIND_KEY: kind.value, _PAGE_KEY: page_id, _NAME_KEY: name}


@dataclass(frozen=True)
class Slot:
    kind: SlotKind
    name: str
    value: Any
    digest: str  # of the value; for a figure, of its data (the traces) only
    layout_digest: str = ""  # a figure's layout: when unchanged, only the traces are sent


@dataclass(frozen=True)
class LiveBody:
    shape: str  # digest of the page with every slot's value left out
    slots: dict[tuple[SlotKind, str], Slot]

    def digests(self) -> dict[str, str]:
        """What the browser keeps between refreshes, keyed "kind/name"."""
        return {f"{k.value}/{n}": s.digest + s.layout_digest for (k, n), s in self.slots.items()}


def _digest(value: Any) -> str:
    return hashlib.blake2b(plotly_json.to_json_plotly(value).encode(), digest_size=10).hexdigest()


def _components(tree: Any) -> Iterator[Component]:
    """Every component of the tree, parents first; the inside of a slot is its value, not walked."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, list | tuple):
            stack.extend(reversed(node))
        elif isinstance(node, Component):
            yield node
            ident = getattr(node, "id", None)
            if not (isinstance(ident, dict) and _KIND_KEY in ident):
                stack.append(getattr(node, "children", None))


def mark(tree: Any, page_id: str) -> LiveBody:
    """Give every slot of `tree` its page and name (in place) and digest the tree's shape and each slot."""
    slots: dict[tuple[SlotKind, str], Slot] = {}
    held: list[tuple[Component, str, Any]] = []
    counts: dict[SlotKind, int] = {}
    for component in _components(tree):
        ident = getattr(component, "id", None)
        if not (isinstance(ident, dict) and _KIND_KEY in ident):
            continue
        kind = SlotKind(ident[_KIND_KEY])
        counts[kind] = counts.get(kind, 0) + 1
        name = str(ident.get(_NAME_KEY) or f"{kind.value}-{counts[kind]}")
        component.id = {_KIND_KEY: kind.value, _PAGE_KEY: page_id, _NAME_KEY: name}  # type: ignore[attr-defined]
        prop = PROPERTY[kind]
        value = getattr(component, prop, None)
        slots[(kind, name)] = _slot(kind, name, value)
        held.append((component, prop, value))
        setattr(component, prop, None)  # left out of the shape
    try:
        shape = _digest(tree)
    finally:
        for component, prop, value in held:
            setattr(component, prop, value)
    return LiveBody(shape, slots)


def _slot(kind: SlotKind, name: str, value: Any) -> Slot:
    if kind == SlotKind.FIGURE and isinstance(value, dict):
        return Slot(kind, name, value, _digest(value.get("data")), _digest(value.get("layout")))
    return Slot(kind, name, value, _digest(value))
