"""Reads the policy: data/policy.toml (shipped), then a policy file or the [policy] tables of the config."""

from __future__ import annotations

import importlib.resources
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from collectors.xid_catalog import XidCatalogError, load_xid_catalog
from diagnosis.policy import Policy
from diagnosis.policy_load import PolicyError, build_policy, merge

POLICY_FILE = "policy.toml"


def default_policy_path() -> Path:
    in_repo = Path(__file__).resolve().parents[2] / "data" / POLICY_FILE
    if in_repo.is_file():
        return in_repo
    return Path(str(importlib.resources.files("fleetguard") / "_shipped_data" / POLICY_FILE))


def read_toml(path: Path | str) -> dict[str, Any]:
    source = Path(path)
    try:
        return tomllib.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise PolicyError(f"policy file {source} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"cannot read policy file {source}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"policy file {source} is not valid TOML: {exc}") from exc


def load_policy(path: Path | str | None = None, overrides: Mapping[str, Any] | None = None) -> Policy:
    """The shipped policy, overlaid with the file at `path` (whole or partial), then `overrides`."""
    document = read_toml(default_policy_path())
    if path:
        document = merge(document, read_toml(path))
    if overrides:
        document = merge(document, overrides)
    try:
        catalog = load_xid_catalog()
    except XidCatalogError as exc:
        raise PolicyError(str(exc)) from exc
    return build_policy(catalog, document)
