"""Whose ranks are whose: every host's claims decide a rank's owner together, never who spoke first."""

from __future__ import annotations

import random

from straggler.membership import HostClaim, JobClaims, decide_membership


def test_a_host_reporting_the_whole_world_owns_the_job_whatever_another_host_claimed_first() -> None:
    claims = {"evil": HostClaim(4, {0}), "node-a": HostClaim(4, {0, 1, 2, 3})}
    membership = decide_membership(claims)
    assert membership.sole_host == "node-a"
    assert dict(membership.owners) == {0: "node-a", 1: "node-a", 2: "node-a", 3: "node-a"}
    assert not membership.corroborated_multi_host
    assert "node-a alone" in membership.why_not_corroborated()


def test_disjoint_claims_of_one_world_corroborate_a_multi_host_job() -> None:
    membership = decide_membership({"a": HostClaim(4, {0, 1}), "b": HostClaim(4, {2, 3})})
    assert membership.corroborated_multi_host
    assert dict(membership.owners) == {0: "a", 1: "a", 2: "b", 3: "b"}


def test_a_rank_two_hosts_claim_is_no_ones_and_the_job_is_not_corroborated() -> None:
    membership = decide_membership(
        {"a": HostClaim(4, {0, 1}), "b": HostClaim(4, {2, 3}), "evil": HostClaim(4, {1})}
    )
    assert membership.contested == {1}
    assert 1 not in membership.owners
    assert not membership.corroborated_multi_host
    assert "claimed by more than one host" in membership.why_not_corroborated()


def test_hosts_that_disagree_on_the_world_size_do_not_corroborate_each_other() -> None:
    membership = decide_membership({"a": HostClaim(8, {0, 1}), "b": HostClaim(4, {2, 3})})
    assert not membership.worlds_agree
    assert not membership.corroborated_multi_host


def test_two_hosts_each_claiming_the_whole_world_own_nothing() -> None:
    membership = decide_membership({"a": HostClaim(2, {0, 1}), "b": HostClaim(2, {0, 1})})
    assert membership.owners == {}
    assert membership.contested == {0, 1}
    assert not membership.corroborated_multi_host


def test_one_host_with_part_of_the_world_is_not_a_multi_host_job() -> None:
    membership = decide_membership({"a": HostClaim(4, {0, 1})})
    assert membership.sole_host is None and not membership.corroborated_multi_host


def test_claims_kept_incrementally_answer_as_the_reference_does_for_any_order() -> None:
    rng = random.Random(16)
    for _ in range(300):
        claims = JobClaims(max_hosts=8)
        for _ in range(rng.randint(1, 30)):
            host, rank, world = f"h{rng.randint(0, 3)}", rng.randint(0, 5), rng.choice((4, 4, 4, 6))
            before = {r: claims.owner(r) for r in range(8)}
            held, reassigned = claims.claim(host, rank, world)
            reference = claims.membership()
            assert {r: claims.owner(r) for r in range(8)} == {r: reference.owners.get(r) for r in range(8)}
            assert claims.world_size == reference.world_size
            assert claims.contested == reference.contested
            assert claims.hosts == reference.hosts
            moved = any(
                host_before is not None and claims.owner(r) != host_before
                for r, host_before in before.items()
            )
            if held and moved:
                assert reassigned  # an owner lost is always said, so the analysis starts afresh


def test_a_claim_past_the_host_limit_or_outside_the_world_is_not_held() -> None:
    claims = JobClaims(max_hosts=1)
    assert claims.claim("a", 0, 4) == (True, False)
    assert claims.claim("b", 1, 4)[0] is False
    assert claims.claim("a", 9, 4)[0] is False
