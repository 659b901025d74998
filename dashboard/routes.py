"""Which page a browser path names, and with what parameters: the dashboard's own router, pure.

The dashboard routes itself rather than through Dash's pages (`use_pages`): those draw every page in a
callback the browser sends once the app's layout is in, a second round trip (and the page's queries) after
the scripts have run. Routing here lets the page's body be served with the layout itself
(`dashboard.router`), fetched while the scripts still load.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from dashboard.pages.live import PageSpec

MAX_PATH_CHARS: Final = 2048  # a browser path, query included; longer is no page of ours


@dataclass(frozen=True)
class Route:
    spec: PageSpec
    given: dict[str, str]  # path variables still percent-encoded, query values decoded (`clean_params`)


def _segments(path: str) -> list[str]:
    return [s for s in path.split("/") if s]


def _match_template(template: str, segments: list[str]) -> dict[str, str] | None:
    parts = _segments(template)
    if len(parts) != len(segments):
        return None
    found: dict[str, str] = {}
    for part, segment in zip(parts, segments, strict=True):
        if part.startswith("<") and part.endswith(">"):
            found[part[1:-1]] = segment
        elif part != segment:
            return None
    return found


def route(specs: Sequence[PageSpec], pathname: str, search: str = "") -> Route | None:
    """The page at `pathname` (as the browser has it: its segments still percent-encoded) with the query
    `search` ("?a=b" or ""); None when no page is there. Pages are tried in order, each by its template
    first, then by its plain path, as Dash's pages were."""
    if len(pathname) + len(search) > MAX_PATH_CHARS:
        return None
    segments = _segments(pathname)
    query = urllib.parse.parse_qs(search.removeprefix("?"), keep_blank_values=True)
    for spec in specs:
        given = _match_template(spec.path_template, segments) if spec.path_template else None
        if given is None and segments == _segments(spec.path):
            given = {}
        if given is not None:
            given |= {k: query[k][0] for k in spec.query if query.get(k)}
            return Route(spec, given)
    return None
