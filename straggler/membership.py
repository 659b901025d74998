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


class JobClaims:
    """Every host's claims on one job, with the index that answers "whose is rank r" as claims arrive:
    the same answers as `decide_membership` over the claims (its reference), at O(1) per new claim instead of
    O(ranks), so a job of thousands of ranks starting up costs no more than its heartbeats."""

    def __init__(self, max_hosts: int) -> None:
        self.by_host: dict[str, HostClaim] = {}
        self._max_hosts = max_hosts
        self._claimants: dict[int, list[str]] = {}
        self._contested: set[int] = set()
        self._whole: set[str] = set()  # hosts that claim every rank of their world
        self._owned: dict[str, int] = {}  # host -> ranks only it claims
        self._worlds: dict[int, int] = {}  # world size -> hosts that report it

    def claim(self, host: str, rank: int, world_size: int) -> tuple[bool, bool]:
        """Note that `host` reports `rank` of a world of `world_size`: (held, reassigned). Not held: too many
        hosts, or a rank outside the world. Reassigned: a rank that counted for one host no longer does, or
        the job's world changed, so what was fed under the old owners must be dropped."""
        claim = self.by_host.get(host)
        if claim is None:
            if len(self.by_host) >= self._max_hosts or not 0 <= rank < world_size:
                return False, False
            claim = self.by_host[host] = HostClaim(world_size)
            self._count_world(world_size, 1)
        world = max(claim.world_size, world_size)
        if not 0 <= rank < world:
            return False, False
        if rank in claim.ranks and world == claim.world_size:
            return True, False
        whole_before, world_before = frozenset(self._whole), self.world_size
        lost_owner = False
        if world != claim.world_size:
            self._count_world(claim.world_size, -1)
            self._count_world(world, 1)
            claim.world_size = world
        if rank not in claim.ranks:
            claim.ranks.add(rank)
            claimants = self._claimants.setdefault(rank, [])
            claimants.append(host)
            if len(claimants) == 1:
                self._owned[host] = self._owned.get(host, 0) + 1
            elif len(claimants) == 2:
                self._contested.add(rank)
                self._owned[claimants[0]] -= 1
                lost_owner = True
        if len(claim.ranks) == claim.world_size:  # every rank is below the world: all of it is claimed
            self._whole.add(host)
        else:
            self._whole.discard(host)
        reassigned = self._whole != whole_before or self.world_size != world_before
        if not self._whole and not whole_before and lost_owner:
            reassigned = True
        return True, reassigned

    def _count_world(self, world: int, delta: int) -> None:
        left = self._worlds.get(world, 0) + delta
        if left:
            self._worlds[world] = left
        else:
            self._worlds.pop(world, None)

    def owner(self, rank: int) -> str | None:
        """The host whose records about `rank` count, or None."""
        if len(self._whole) == 1:
            sole = next(iter(self._whole))
            return sole if 0 <= rank < self.by_host[sole].world_size else None
        if self._whole:
            return None
        claimants = self._claimants.get(rank)
        return claimants[0] if claimants is not None and len(claimants) == 1 else None

    @property
    def world_size(self) -> int:
        if len(self._whole) == 1:
            return self.by_host[next(iter(self._whole))].world_size
        return max(self._worlds, default=1)

    @property
    def contested(self) -> frozenset[int]:
        if len(self._whole) == 1:
            return frozenset()
        if self._whole:
            return frozenset(self._claimants)
        return frozenset(self._contested)

    @property
    def hosts(self) -> frozenset[str]:
        """The hosts that own ranks (whose send times the job's clock waits for)."""
        if len(self._whole) == 1:
            return frozenset(self._whole)
        if self._whole:
            return frozenset()
        return frozenset(h for h, n in self._owned.items() if n > 0)

    def membership(self) -> Membership:
        """The whole picture (O(ranks)): for a decision, not for every record."""
        return decide_membership(self.by_host)
