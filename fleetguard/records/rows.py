"""Records rebuilt from stored rows: a text column typed by a `StrEnum` becomes its member again.

The store keeps an enum as its text (the same strings as before the enums existed). Read back, the text is
turned into the member here, once, so a reader compares members. A value this version does not know (a kind
a newer agent raised, one an old store kept) has no member: the row is answered as None for the reader to
count and pass over, never an exception in a daemon loop.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, ClassVar, Protocol, TypeVar


class DataclassRecord(Protocol):
    """Any record dataclass (what `dataclasses.fields` takes)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


R = TypeVar("R", bound=DataclassRecord)


@functools.cache
def enum_fields(record: type[DataclassRecord]) -> tuple[tuple[str, type[StrEnum]], ...]:
    """The fields of a record dataclass typed by a StrEnum (or one `| None`), with their enum."""
    hints = typing.get_type_hints(record)
    out = []
    for f in dataclasses.fields(record):
        hint = hints[f.name]
        if isinstance(hint, types.UnionType):
            members = [a for a in typing.get_args(hint) if a is not type(None)]
            hint = members[0] if len(members) == 1 else None
        if isinstance(hint, type) and issubclass(hint, StrEnum):
            out.append((f.name, hint))
    return tuple(out)


def record_from_row(record: type[R], values: Mapping[str, Any]) -> R | None:
    """`record(**values)` with each enum-typed field's text turned into its member; None when a value is
    not one of its enum's (a field left out takes its default, as the dataclass says)."""
    typed = dict(values)
    for name, enum in enum_fields(record):
        text = typed.get(name)
        if text is None or isinstance(text, enum):
            continue
        try:
            typed[name] = enum(text)
        except ValueError:
            return None
    build: typing.Callable[..., R] = record
    return build(**typed)


def number(value: object) -> float:
    """A stored DOUBLE or TIMESTAMP-as-epoch value as a float (a BIGINT's int is one too)."""
    if isinstance(value, int | float):
        return float(value)
    raise TypeError(f"expected a number, got {type(value).__name__}")


def integer(value: object) -> int:
    """A stored integer column's value as an int."""
    if isinstance(value, int):
        return int(value)
    raise TypeError(f"expected an integer, got {type(value).__name__}")


def number_or_none(value: object) -> float | None:
    return None if value is None else number(value)
