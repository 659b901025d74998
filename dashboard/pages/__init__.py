"""One module per page; each defines a `PAGE` (dashboard.pages.live.PageSpec) that app.py registers."""
