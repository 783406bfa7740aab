"""A sweep's problems: one line per culprit, each holding the findings it rests on."""

from __future__ import annotations

from cluster_health.core import problems

HOSTS = [f"host{i}" for i in range(1, 7)]


def finding(severity, code, subject, text="", pairs=(), **detail):
    return {
        "severity": severity,
        "code": code,
        "subject": subject,
        "text": text,
        "pairs": list(pairs),
        "detail": detail,
    }


def bed_findings():
    """The faulted bed's sweep: host5's agent stopped, host1<->host2 firewalled, host3 shaped to 200 Mbit/s."""
    slow_links = [f"host3<->{h}" for h in ("host1", "host2", "host4", "host6")]
    return [
        finding("fail", "node_offline", "host5", "host5 went offline: its agent stopped sending heartbeats"),
        finding("fail", "link_failed", "host1<->host2", "host1<->host2 timeout at connect (connect_timeout): ..."),
        finding("warn", "slow_node", "host3", "every link of host3 is slow ...", slow_links, busbw_gbps=0.0238),
        *(finding("warn", "below_baseline", link, f"{link} degraded at bandwidth") for link in slow_links),
        finding("info", "confirmed", "host3<->host4", "host3<->host4 slow ...: confirmed, host3", ["host3<->host4"]),
        finding("info", "confirmed", "host1<->host2", "host1<->host2 timeout ...: confirmed", ["host1<->host2"]),
        finding("info", "transient", "host4<->host6", "host4<->host6 slow ...: transient, not acted on"),
    ]


def test_it_reads_one_line_per_culprit_with_its_evidence():
    found = bed_findings()
    listed = problems.problems(found, HOSTS)
    assert [(p["severity"], p["culprit"], p["text"]) for p in listed] == [
        ("fail", "host5", "host5's agent is down"),
        ("fail", "host1<->host2", "host1<->host2 blocked: connections time out (a firewall dropping packets?)"),
        ("warn", "host3", "host3's links at ~190 Mbit/s"),
    ]
    # host3's problem: the slow node, its four links below baseline and the pass's line about one of them.
    assert [found[i]["code"] for i in listed[2]["findings"]] == ["slow_node", *["below_baseline"] * 4, "confirmed"]
    assert [found[i]["code"] for i in listed[1]["findings"]] == ["link_failed", "confirmed"]
    assert problems.summary(listed) == (
        "3 problems: host5's agent is down; host1<->host2 blocked: connections time out (a firewall dropping "
        "packets?); host3's links at ~190 Mbit/s"
    )


def test_an_info_line_never_makes_a_problem():
    found = [finding("info", "transient", "host4<->host6", "slow once"), finding("info", "sweep_slow", "cluster")]
    assert problems.problems(found, HOSTS) == []
    assert problems.summary([]) == "No problems."


def test_a_culprits_severity_is_its_worst_findings_whatever_its_lines_say():
    warn = [finding("warn", "slow_node", "host3", "slow", ["host3<->host1"], busbw_gbps=0.02)]
    fail = [{**warn[0], "severity": "fail"}]
    # The links below baseline are warnings; the node confirmed slow again is a fail: the problem follows it.
    links = [finding("warn", "below_baseline", "host3<->host1", "degraded")]
    assert problems.problems(warn + links, HOSTS)[0]["severity"] == "warn"
    assert problems.problems(links + fail, HOSTS)[0]["severity"] == "fail"
    assert problems.problems(links + fail, HOSTS)[0]["text"] == "host3's links at ~160 Mbit/s"


def test_a_link_joins_an_offline_node_it_touches_but_not_a_slow_node_that_does_not_list_it():
    found = [
        finding("fail", "node_offline", "host5", "host5 is offline"),
        finding("warn", "slow_node", "host3", "slow", ["host3<->host1"], busbw_gbps=2.0),
        finding("warn", "below_baseline", "host4<->host5", "degraded"),
        finding("fail", "link_failed", "host3<->host2", "host3<->host2 failed at init (transport): ..."),
    ]
    listed = problems.problems(found, HOSTS)
    assert [(p["culprit"], p["findings"]) for p in listed] == [
        ("host5", [0, 2]),
        ("host3<->host2", [3]),
        ("host3", [1]),
    ]
    assert listed[2]["text"] == "host3's links at ~2 GB/s"


def test_findings_without_a_known_shape_read_as_their_first_clause():
    found = [
        finding("warn", "version_mismatch", "host1, host2", "torch differs: 2.4 on host1, 2.5 on host2; align it"),
        finding("fail", "segment", "rack1<->rack2", "every pair between rack1 and rack2 fails (4 of 4: refused)"),
    ]
    assert [(p["kind"], p["text"]) for p in problems.problems(found, HOSTS)] == [
        ("segment", "every pair between rack1 and rack2 fails"),
        ("fleet", "torch differs"),
    ]
