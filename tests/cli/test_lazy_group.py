"""The CLI's lazily loaded subcommands: listed with their help without being imported, and a clear one-line
error when the packages one needs are not installed (the host agent's base install lacks the predictor's)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from fleetguard.cli import LazyGroup

MODULE = '''
import click
import fg_package_that_is_not_installed  # noqa: F401

@click.option("--window", help="An option's help, not the command's.")
@click.command("heavy")
def heavy_command(window: str) -> None:
    """Train something heavy. More detail that the listing leaves out."""
'''


@pytest.fixture
def group(tmp_path: Path) -> Iterator[click.Group]:
    (tmp_path / "fg_lazy_heavy.py").write_text(MODULE)
    sys.path.insert(0, str(tmp_path))

    @click.group(cls=LazyGroup, lazy={"heavy": "fg_lazy_heavy:heavy_command"})
    def cli() -> None:
        """A group."""

    yield cli
    sys.path.remove(str(tmp_path))
    sys.modules.pop("fg_lazy_heavy", None)


def test_help_lists_a_lazy_command_with_its_docstring_without_importing_it(group: click.Group) -> None:
    result = CliRunner().invoke(group, ["--help"])
    assert result.exit_code == 0, result.output
    assert "heavy  Train something heavy" in result.output
    assert "fg_lazy_heavy" not in sys.modules


def test_a_lazy_command_whose_packages_are_missing_is_one_clear_line(group: click.Group) -> None:
    result = CliRunner().invoke(group, ["heavy", "--window", "3d"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1
    assert lines == [
        "Error: `fleetguard heavy` needs fg_package_that_is_not_installed, which this install lacks: "
        "pip install 'fleetguard[predictor]' adds the offline tools' packages"
    ]
