"""Every script a page runs at a versioned URL that a browser keeps for a year, lazily loaded chunks included.

Dash gives its component bundles a fingerprint in the file name (`bundle.v7_4_1m1795796272.js`) and a
year's `max-age`, but the chunks those bundles load on first use (DataTable's `async-table.js`, 470 kB;
dcc's graph and markdown chunks) are asked for at their plain names, next to the bundle, and Dash answers
them with an ETag only: every new tab revalidated each one before running it, and a revalidated script was
compiled again (BENCHMARKS.md, issue 22 item 4, 2026-11-27 afternoon). Here each bundle's tag names it
under a directory that carries its fingerprint (`dash_table/~v7_4_1m1795796272/bundle.js`); webpack loads
the chunks from the bundle's own directory, so they carry the fingerprint too, and all of them are served
as Dash serves a fingerprinted file. A new version of a package has a new fingerprint, hence new URLs: a
year's caching never serves an upgraded dashboard an old chunk.
"""

from __future__ import annotations

import re
from typing import Final

import dash
import flask
from dash.exceptions import DependencyException

SUITES: Final = "_dash-component-suites/"
# Dash's fingerprint (dash.fingerprint.cache_regex): "v" + the version with "_" for separators + "m" + hex.
_FINGERPRINT: Final = r"v[\w-]+m[0-9a-fA-F]+"
# A component-suite URL in a script tag: package, the directories in it, a file name with its fingerprint
# as the second dot-separated part (Dash's build_fingerprint).
_TAG_URL: Final = re.compile(
    r'(?P<attr>\b(?:data-)?src=")(?P<base>[^"]*/' + re.escape(SUITES) + r'[^"/]+/(?:[^"/]+/)*)'
    r"(?P<stem>[^\"/.]+)\.(?P<fp>" + _FINGERPRINT + r')\.(?P<rest>[^"/]+)"'
)
_VERSIONED: Final = re.compile(
    r"(?P<package>[^/]+)/(?P<dirs>(?:[^/]+/)*)~(?P<fp>"
    + _FINGERPRINT
    + r")/(?P<stem>[^/.]+)\.(?P<rest>[^/]+)"
)


def versioned_tags(scripts: str) -> str:
    """`scripts` (a page's script tags) with each fingerprinted component-suite file named under a
    directory carrying its fingerprint instead; other tags unchanged."""
    return _TAG_URL.sub(
        lambda m: f'{m["attr"]}{m["base"]}~{m["fp"]}/{m["stem"]}.{m["rest"]}"',
        scripts,
    )


def fingerprinted_path(versioned: str) -> tuple[str, str] | None:
    """(package, the path as Dash fingerprints it) for a path under the suites in the versioned form
    (`dash/dash_table/~v7_4_1m1/async-table.js` -> ("dash", "dash_table/async-table.v7_4_1m1.js")); None
    for any other path."""
    m = _VERSIONED.fullmatch(versioned)
    if m is None:
        return None
    return m["package"], f"{m['dirs']}{m['stem']}.{m['fp']}.{m['rest']}"


def serve_versioned(app: dash.Dash) -> None:
    """Answer the versioned URLs as Dash answers a fingerprinted file (its checks on what may be served,
    and a year's max-age)."""
    suites = app.config.requests_pathname_prefix.rstrip("/") + "/" + SUITES

    def versioned() -> flask.Response | None:
        path = flask.request.path
        if not path.startswith(suites) or "/~" not in path:
            return None
        found = fingerprinted_path(path.removeprefix(suites))
        if found is None:
            return None
        package, fingerprinted = found
        try:
            # The Flask backend's view (the base class declares only its route's setup).
            response: flask.Response = app.backend.serve_component_suites(  # type: ignore[attr-defined]
                app, package, fingerprinted
            )
        except DependencyException:  # not a file of a registered library: nothing of ours is there
            return flask.Response("not found\n", status=404, mimetype="text/plain")
        return response

    app.server.before_request(versioned)
