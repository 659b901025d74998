"""plotly.js's cartesian bundle (1.5 MB) served where Dash asks for the full one (4.8 MB).

dcc.Graph loads plotly.js on first use from one fixed URL (`_dash-component-suites/plotly/package_data/
plotly.min.js`, set by Dash's renderer when it serves locally). A new tab fetches it from the cache but still
parses and runs all of it before the first figure is drawn: ~0.3 s of a first render on this machine for the
full bundle, most of it code for trace types the dashboard never draws (3-D, maps, tables). The cartesian
partial bundle, vendored unchanged from npm (`make vendor-plotly`), holds every trace type the dashboard
draws; `tests/dashboard/test_plotly_bundle.py` checks every page's figures against `TRACE_TYPES`.
"""

from __future__ import annotations

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


def serve_partial_bundle(server: flask.Flask, prefix: str = "/") -> None:
    """Answer the request for the full plotly.js with the cartesian bundle (with an ETag: a new tab
    revalidates and reads the cached copy, as Dash does for its own files)."""
    wanted = prefix.rstrip("/") + "/" + FULL_BUNDLE_PATH

    def partial_bundle() -> flask.Response | None:
        if flask.request.path != wanted:
            return None
        response = flask.send_file(BUNDLE, mimetype="application/javascript", conditional=True, etag=True)
        response.cache_control.public = True
        response.cache_control.max_age = 0  # revalidate: an upgraded fleetguard serves its own bundle at once
        return response

    server.before_request(partial_bundle)
