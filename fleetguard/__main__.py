"""`python -m fleetguard` is the same as the `fleetguard` console script."""

from fleetguard.cli import main

main()
