"""plotly.js's cartesian bundle (1.5 MB) served where Dash asks for the full one (4.8 MB).

dcc.Graph loads plotly.js on first use from one fixed URL (`_dash-component-suites/plotly/package_data/
plotly.min.js`, set by Dash's renderer when it serves locally). A new tab fetches it from the cache but still
parses and runs all of it before the first figure is drawn: ~0.3 s of a first render on this machine for the
full bundle, most of it code for trace types the dashboard never draws (3-D, maps, tables). The cartesian
partial bundle, vendored unchanged from npm (`make vendor-plotly`), holds every trace type the dashboard
draws; `tests/dashboard/test_plotly_bundle.py` checks every page's figures against `TRACE_TYPES`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Final

import flask

VERSION: Final = "4.1.1"
BUNDLE: Final = Path(__file__).parent / "vendor" / f"plotly-cartesian-{VERSION}.min.js"
# The trace modules the bundle registers (its README, and `moduleType:"trace",name:...` in the file).
TRACE_TYPES: Final = frozenset(
    {
        "bar",
        "box",
        "contour",
        "heatmap",
        "histogram",
        "histogram2d",
        "histogram2dcontour",
        "image",
        "pie",
        "scatter",
        "scatterternary",
        "violin",
    }
)
# Where Dash's renderer points dcc.Graph's loader (dash-renderer: `_dashPlotlyJSURL`), under the app's prefix.
FULL_BUNDLE_PATH: Final = "_dash-component-suites/plotly/package_data/plotly.min.js"
# Where the head script points that loader instead (`url_script`): a path that names the bundle's content,
# so a browser keeps it for a year and runs its cached compile (dashboard.static_cache says why).
VERSIONED_PATH: Final = (
    "_dash-component-suites/plotly/package_data/"
    f"~{VERSION}-{hashlib.sha256(BUNDLE.read_bytes()).hexdigest()[:16]}/plotly.min.js"
)
YEAR_SECONDS: Final = 365 * 24 * 3600


def serve_partial_bundle(server: flask.Flask, prefix: str = "/") -> None:
    """Answer the request for the full plotly.js with the cartesian bundle: at the versioned path for a
    year, at Dash's own path with an ETag (revalidated: an upgraded fleetguard serves its own at once)."""
    plain = prefix.rstrip("/") + "/" + FULL_BUNDLE_PATH
    versioned = prefix.rstrip("/") + "/" + VERSIONED_PATH

    def partial_bundle() -> flask.Response | None:
        if flask.request.path not in (plain, versioned):
            return None
        response = flask.send_file(BUNDLE, mimetype="application/javascript", conditional=True, etag=True)
        response.cache_control.public = True
        if flask.request.path == versioned:
            response.cache_control.no_cache = None
            response.cache_control.max_age = YEAR_SECONDS
        else:
            response.cache_control.max_age = 0
        return response

    server.before_request(partial_bundle)


def url_script(prefix: str = "/") -> str:
    """A head script pointing dcc.Graph's loader at the versioned path. Dash's renderer sets the loader's
    URL (`window._dashPlotlyJSURL`) when it mounts; the property keeps ours and ignores that write."""
    url = json.dumps(prefix.rstrip("/") + "/" + VERSIONED_PATH)
    return (
        "<script>Object.defineProperty(window, '_dashPlotlyJSURL', "
        f"{{configurable: true, get: function () {{ return {url}; }}, set: function () {{}}}});</script>"
    )
