"""Progress bars for long steps: tqdm on stderr, silent when stderr is not a terminal or when asked."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")


def bar(desc: str, quiet: bool) -> Callable[[Iterable[T]], Iterable[T]]:
    def wrap(items: Iterable[T]) -> Iterable[T]:
        if quiet or not sys.stderr.isatty():
            return items
        from tqdm import tqdm

        return tqdm(items, desc=desc, file=sys.stderr, leave=False)

    return wrap


def note(message: str, quiet: bool) -> None:
    """A one-line status on stderr (never on stdout, which may carry --json)."""
    if not quiet and sys.stderr.isatty():
        print(message, file=sys.stderr)
