"""A command's age judged without trusting either clock alone (agents/freshness.py), on a fake clock."""

from agents.freshness import Freshness

LIFETIME = 10.0


def received(judge: Freshness, sent: float, waited: float, skew: float) -> float:
    """How late a command sent at server time ``sent`` looks when taken ``waited`` s later on a node ``skew`` s ahead."""
    return judge.stale_by(sent + LIFETIME, LIFETIME, now=sent + waited + skew)


def test_a_node_far_ahead_of_the_server_still_runs_its_fresh_commands():
    judge = Freshness(window_s=300)
    assert [received(judge, t, waited=0.2, skew=42.0) for t in (1000.0, 1030.0, 1060.0)] == [0.0, 0.0, 0.0]
    # By the node's clock alone each had expired 32 s before it arrived: every pair would time out.
    assert 1060.0 + 0.2 + 42.0 > 1060.0 + LIFETIME


def test_a_command_that_waited_past_its_lifetime_is_stale_on_a_fast_or_slow_clock():
    for skew in (42.0, -40.0):
        judge = Freshness(window_s=300)
        received(judge, 1000.0, waited=0.2, skew=skew)
        late = received(judge, 1030.0, waited=25.2, skew=skew)
        assert 14.9 < late < 15.1, (skew, late)
        # By the slow node's own clock it would still be within its lifetime: run 25 s late.


def test_past_the_signature_window_a_command_is_stale_whatever_came_before():
    judge = Freshness(window_s=300)
    assert received(judge, 1000.0, waited=900.0, skew=0.0) > 0


def test_an_older_servers_command_without_a_lifetime_is_judged_by_the_clock_alone():
    judge = Freshness(window_s=300)
    assert judge.stale_by(1010.0, None, now=1005.0) == 0.0
    assert judge.stale_by(1010.0, None, now=1013.0) == 3.0
