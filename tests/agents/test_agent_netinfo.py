"""Network facts the hints depend on: who holds a port, which NIC a variable names, which address to announce."""

from agents import netinfo
from agents.worker import pick_address
from tests.support.agent_fixtures import held_port

INTERFACES = [
    {"name": "lo", "up": True, "loopback": True, "mtu": 65536, "addresses": ["127.0.0.1"]},
    {"name": "eth0", "up": True, "loopback": False, "mtu": 1500, "addresses": ["10.0.0.2"]},
    {"name": "ib0", "up": False, "loopback": False, "mtu": 2044, "addresses": ["10.1.0.2"]},
]


def test_it_names_the_process_holding_a_port():
    with held_port() as port:
        assert netinfo.port_holder(port).startswith("pid ")
    assert netinfo.port_holder(port) is None


def test_it_flags_an_interface_variable_naming_a_missing_or_down_nic():
    assert netinfo.ifname_setting_problem("GLOO_SOCKET_IFNAME", "eth0", INTERFACES) is None
    assert "ib0" in netinfo.ifname_setting_problem("GLOO_SOCKET_IFNAME", "ib0", INTERFACES)
    assert "eth1" in netinfo.ifname_setting_problem("GLOO_SOCKET_IFNAME", "eth0,eth1", INTERFACES)
    # NCCL takes prefixes, '=' for exact names, '^' to exclude
    assert netinfo.ifname_setting_problem("NCCL_SOCKET_IFNAME", "eth", INTERFACES) is None
    assert netinfo.ifname_setting_problem("NCCL_SOCKET_IFNAME", "=eth", INTERFACES)
    assert netinfo.ifname_setting_problem("NCCL_SOCKET_IFNAME", "^docker", INTERFACES) is None


def test_candidates_leave_out_loopback_and_down_interfaces():
    assert [c["name"] for c in netinfo.candidate_interfaces(False, INTERFACES)] == ["eth0"]
    assert [c["name"] for c in netinfo.candidate_interfaces(True, INTERFACES)] == ["lo", "eth0"]


def test_the_agent_announces_loopback_only_for_a_loopback_broker():
    assert pick_address("redis://127.0.0.1:6379/0") == "127.0.0.1"
    non_loopback = netinfo.candidate_interfaces(False)
    if non_loopback:  # this host has a NIC: a remote broker is reached through it, never loopback
        address = pick_address(f"redis://{non_loopback[0]['address']}:6379/0")
        assert not netinfo.is_loopback(address)
