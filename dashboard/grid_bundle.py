"""AG Grid's 1.3 MB bundle loaded only by a tab that draws a grid, not by every page's first render.

Dash puts a script tag for every component library it knows into every page. This rewrites AG Grid's into an
inert tag that names the bundle; `assets/lazy_grid.js` stands in for the library until a grid is drawn, then
loads the bundle and draws the real grid in its place. Pages whose tables are all DataTables (most of them:
`dashboard.components.table`) never fetch or compile it.
"""

from __future__ import annotations

import re
from typing import Final

# The tag Dash writes for the bundle (fingerprinted: .../dash_ag_grid/dash_ag_grid.v35_3_0m1795767602.min.js).
_BUNDLE_TAG: Final = re.compile(
    r'<script src="([^"]*/_dash-component-suites/dash_ag_grid/dash_ag_grid[^"/]*\.js)"></script>'
)
BUNDLE_ELEMENT_ID: Final = "fg-grid-bundle"  # read by assets/lazy_grid.js


def defer_grid_bundle(scripts: str) -> str:
    """`scripts` (the page's script tags) with AG Grid's bundle named but not loaded; unchanged when the tag
    is not there (a Dash whose tag reads otherwise then loads the bundle eagerly, as before)."""
    return _BUNDLE_TAG.sub(
        lambda m: f'<script type="text/plain" id="{BUNDLE_ELEMENT_ID}" data-src="{m.group(1)}"></script>',
        scripts,
        count=1,
    )
