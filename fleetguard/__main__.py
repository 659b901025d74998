"""The `fleetguard` console script, and `python -m fleetguard`: Ctrl-C is held from the first instant
(fleetguard/stop_signals.py) so that a daemon stopped while it starts stops cleanly, then the command line
runs."""

from __future__ import annotations


def main() -> None:
    from fleetguard import stop_signals

    stop_signals.hold()  # before the command line's own imports: a Ctrl-C during them is no traceback
    from fleetguard.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
