"""Dash's @babel/polyfill (99 kB, run by every new tab before anything else) replaced by the one part of it
the dashboard's scripts use: the regenerator runtime (7 kB).

The polyfill fills in ES2015+ built-ins for old browsers (a no-op in any browser Dash 4 supports: every
built-in is already there) and defines the global `regeneratorRuntime`, which Dash's renderer, dcc and
DataTable call because they were compiled with Babel's generator transform. Chromium's profile gave the
polyfill ~69 ms of every first render (BENCHMARKS.md, "First render, where it goes"). The runtime is taken
from the polyfill Dash ships, unchanged (the module that ends by assigning `regeneratorRuntime`), when the
app starts; when it cannot be found there (another Dash), the page keeps the whole polyfill, as before.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Final

import dash
import flask

# The polyfill Dash serves locally (dash/deps/polyfill@7.12.1.min.js).
POLYFILL_DIR: Final = Path(dash.__file__).parent / "deps"
# Where the runtime's module ends, in the polyfill's browserify bundle, and where each module starts.
_RUNTIME_END: Final = 'try{regeneratorRuntime=e}catch(t){Function("r","regeneratorRuntime = r")(e)}'
_MODULE_START: Final = "[function(t,n,r){"
# Dash's tag for the polyfill, fingerprinted or versioned (dashboard.static_cache): any of its spellings.
_POLYFILL_TAG: Final = re.compile(
    r'<script src="[^"]*/_dash-component-suites/dash/deps/[^"]*polyfill@[^"/]*\.js"></script>'
)
YEAR_SECONDS: Final = 365 * 24 * 3600


def regenerator_runtime(polyfill: str) -> str | None:
    """The polyfill's regenerator-runtime module as a script that defines `regeneratorRuntime` and nothing
    else (the module called with a fresh `module` object), or None when the polyfill has no such module."""
    end = polyfill.find(_RUNTIME_END)
    if end < 0:
        return None
    end += len(_RUNTIME_END)
    start = polyfill.rfind(_MODULE_START, 0, end)
    if start < 0 or polyfill[end : end + 1] != "}":
        return None
    module = polyfill[start + 1 : end + 1]  # function(t,n,r){...}
    header = "/* regenerator-runtime (MIT), from Dash's @babel/polyfill */\n"
    return f"{header}({module})(null,{{exports:{{}}}},{{}});\n"


def shipped_polyfill() -> str | None:
    found = sorted(POLYFILL_DIR.glob("polyfill@*.min.js"))
    return found[-1].read_text(encoding="utf-8") if len(found) == 1 else None


def serve_runtime_shim(server: flask.Flask, prefix: str = "/") -> str | None:
    """Serve the runtime at a path naming its content (kept a year) and return that path's script tag, or
    None (serving nothing) when the shipped polyfill has no runtime to take."""
    polyfill = shipped_polyfill()
    script = regenerator_runtime(polyfill) if polyfill is not None else None
    if script is None:
        return None
    body = script.encode()
    path = f"{prefix.rstrip('/')}/_fleetguard/regenerator-runtime.{hashlib.sha256(body).hexdigest()[:16]}.js"

    def runtime() -> flask.Response | None:
        if flask.request.path != path:
            return None
        response = flask.Response(body, mimetype="application/javascript")
        response.cache_control.public = True
        response.cache_control.max_age = YEAR_SECONDS
        return response

    server.before_request(runtime)
    return f'<script src="{path}"></script>'


def replace_polyfill(scripts: str, shim_tag: str | None) -> str:
    """`scripts` (a page's script tags) with the polyfill's tag replaced by the shim's; unchanged without a
    shim or without the tag."""
    if shim_tag is None:
        return scripts
    return _POLYFILL_TAG.sub(lambda _m: shim_tag, scripts, count=1)
