"""Whose ranks are whose in a job seen from several hosts: each host's claims, and what they corroborate.

A host's token proves which host it is, not which ranks it runs: any host can ship records under any job key.
So a rank's owner is decided from every host's claims together, never by who spoke first:
- a host that reports every rank of its world runs the whole job (a single-host job): it is that host's,
  whatever another host claims;
- otherwise a rank claimed by exactly one host is that host's, and a rank two hosts claim is contested (no
  one's: its records decide nothing);
- a job is corroborated as multi-host only when no rank is contested, every host reports the same world
  size and at least two hosts own ranks. Only then may one host's records decide an action on another.
Pure functions over plain data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass
class HostClaim:
    """What one host has reported of a job: the world size its ranks said, and which ranks."""

    world_size: int
    ranks: set[int] = field(default_factory=set)

    def covers_world(self) -> bool:
        return len(self.ranks) >= self.world_size and all(r in self.ranks for r in range(self.world_size))


@dataclass(frozen=True)
class Membership:
    owners: Mapping[int, str]  # rank -> the host whose records about it count
    world_size: int
    contested: frozenset[int] = frozenset()  # ranks more than one host claims (and no host covers the world)
    sole_host: str | None = None  # the host that reports the whole world: the job is its own
    worlds_agree: bool = True

    @property
    def hosts(self) -> frozenset[str]:
        return frozenset(self.owners.values())

    @property
    def corroborated_multi_host(self) -> bool:
        """The job runs on several hosts and they agree on it: one host's records may bear on another's."""
        return self.sole_host is None and self.worlds_agree and not self.contested and len(self.hosts) >= 2

    def why_not_corroborated(self) -> str:
        """One line for an operator: why the controller will not act across hosts for this job."""
        if self.sole_host is not None:
            return f"the job runs on {self.sole_host} alone: its agent acts on it"
        if self.contested:
            ranks = ", ".join(str(r) for r in sorted(self.contested)[:8])
            return f"ranks {ranks} are claimed by more than one host: membership is not corroborated"
        if not self.worlds_agree:
            return "the job's hosts report different world sizes: membership is not corroborated"
        if len(self.hosts) < 2:
            return "only one host reports the job: its agent acts on it"
        return ""


def decide_membership(claims: Mapping[str, HostClaim]) -> Membership:
    """Each rank's owner from every host's claims (see the module docstring)."""
    whole = sorted(h for h, c in claims.items() if c.covers_world())
    if len(whole) == 1:
        host = whole[0]
        world = claims[host].world_size
        return Membership({r: host for r in range(world)}, world, sole_host=host)
    claimants: dict[int, list[str]] = {}
    for host, claim in claims.items():
        for rank in claim.ranks:
            claimants.setdefault(rank, []).append(host)
    worlds = {c.world_size for c in claims.values()}
    world = max(worlds, default=1)
    if whole:  # two hosts each claim the whole world: every rank is contested
        return Membership({}, world, contested=frozenset(claimants), worlds_agree=len(worlds) == 1)
    owners = {r: hosts[0] for r, hosts in claimants.items() if len(hosts) == 1}
    contested = frozenset(r for r, hosts in claimants.items() if len(hosts) > 1)
    return Membership(owners, world, contested=contested, worlds_agree=len(worlds) == 1)
