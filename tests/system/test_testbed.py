"""The namespace test bed itself: real hosts, real faults, and nothing left behind."""

import subprocess
import sys
import time

import pytest

from devtools import testbed as tb_module

pytestmark = pytest.mark.netns

LISTEN = (
    "import socket,sys,time;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
    "s.bind(('0.0.0.0',7000));s.listen();print('ready',flush=True);time.sleep(30)"
)
CONNECT = (
    "import socket,sys;s=socket.socket();s.settimeout(1.0)\n"
    "try:\n s.connect((sys.argv[1],7000));print('connected')\n"
    "except OSError as e:\n print('failed',type(e).__name__)"
)


def listen(bed, name):
    proc = subprocess.Popen(
        bed.exec_args(bed.host(name), [sys.executable, "-c", LISTEN]),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc


def reach(bed, src, dst):
    return bed.run(src, sys.executable, "-c", CONNECT, dst).strip()


@pytest.mark.timeout(60)
def test_it_joins_hosts_with_their_own_names_and_drops_what_a_firewall_drops(make_testbed):
    bed = make_testbed(3)
    servers = [listen(bed, "host2"), listen(bed, "host3")]
    try:
        assert bed.run("host1", "hostname").strip() == "host1"
        assert bed.run("host1", "getent", "hosts", "host2").split()[0] == bed.host("host2").address
        assert reach(bed, "host1", "host2") == "connected"
        bed.drop("host1", "host2")
        assert reach(bed, "host1", "host2") == "failed TimeoutError"
        assert reach(bed, "host1", "host3") == "connected"
        bed.heal("host1", "host2")
        assert reach(bed, "host1", "host2") == "connected"
        bed.resolve_to_loopback("host1")
        assert bed.run("host1", "getent", "hosts", "host1").split()[0] == "127.0.1.1"
        bed.misresolve("host1", "host3", "198.18.0.99")
        assert reach(bed, "host1", "host3") != "connected"
    finally:
        for proc in servers:
            proc.kill()
            proc.wait(timeout=5)


@pytest.mark.timeout(60)
def test_it_shapes_a_link_to_the_rate_asked(make_testbed):
    bed = make_testbed(2)
    bed.shape("host1", 100)
    mbit = bed.iperf3_mbit("host1", "host2", seconds=2)
    assert 85 <= mbit <= 105


@pytest.mark.timeout(60)
def test_it_leaves_no_namespace_behind(make_testbed):
    bed = make_testbed(2, second_interface=True)
    names = [h.ns for h in bed.hosts] + [bed.bridge_ns]
    assert set(names) <= set(tb_module.sh("ip", "netns", "list").split())
    sleeper = subprocess.Popen(bed.exec_args(bed.hosts[0], ["sleep", "30"]), start_new_session=True)
    time.sleep(0.2)
    bed.close()
    listed = tb_module.sh("ip", "netns", "list")
    assert not any(name in listed for name in names)
    assert sleeper.wait(timeout=5) is not None
    assert not any((tb_module.NETNS_ETC / name).exists() for name in names)
