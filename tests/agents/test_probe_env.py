"""Probe launch variables: transport knobs pass; anything naming a file, path, directory or plugin is refused."""

import json

import pytest
from django.contrib.auth.models import Group, User

from agents import contract
from cluster_health.models import ApiToken, Sweep
from tests.support.agent_fixtures import command

LOADS_OR_WRITES = [
    ("NCCL_NET_PLUGIN", "/tmp/x.so"),
    ("NCCL_NET_PLUGIN", "x"),
    ("NCCL_TUNER_PLUGIN", "tuner"),
    ("NCCL_DEBUG_FILE", "/home/u/.bashrc"),
    ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/home/u/.bashrc"),
    ("NCCL_TOPO_FILE", "topo.xml"),
    ("NCCL_GRAPH_DUMP_FILE", "g"),
    ("NCCL_CONF_FILE", "c"),
    ("NCCL_IB_CONFIG_FILE", "c"),
    ("GLOO_PLUGIN_LIB", "x"),
    ("NCCL_HOME_DIR", "x"),
    ("NCCL_LIB_PATH", "x"),
    ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1"),
    ("LD_PRELOAD", "x.so"),
    ("LD_LIBRARY_PATH", "x"),
    ("NCCL_SOCKET_IFNAME", "../../etc/passwd"),
    ("NCCL_IB_HCA", "mlx5_0/1"),
    ("NCCL_DEBUG", "INFO\nX=1"),
]
TRANSPORT_KNOBS = {
    "GLOO_SOCKET_IFNAME": "eth0",
    "NCCL_SOCKET_IFNAME": "=ib0,ib1",
    "NCCL_IB_HCA": "^mlx5_2:1",
    "NCCL_IB_DISABLE": "1",
    "NCCL_DEBUG": "INFO",
    "NCCL_DEBUG_SUBSYS": "INIT,NET",
    "NCCL_P2P_LEVEL": "NVL",
    "NCCL_NET_GDR_LEVEL": "PHB",
    "NCCL_ALGO": "Ring",
    "NCCL_PROTO": "Simple",
    "NCCL_MIN_NCHANNELS": "4",
    "NCCL_MAX_NCHANNELS": "16",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
    "TORCH_NCCL_BLOCKING_WAIT": "1",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
}


@pytest.mark.parametrize("name, value", LOADS_OR_WRITES)
def test_it_refuses_variables_that_load_code_or_write_files(name, value):
    with pytest.raises(contract.ContractError) as info:
        contract.validate_env({name: value})
    assert f"env.{name}" in str(info.value)


def test_it_accepts_transport_knobs():
    assert contract.validate_env(TRANSPORT_KNOBS) == TRANSPORT_KNOBS


@pytest.mark.parametrize("name, value", LOADS_OR_WRITES[:5])
def test_the_agent_refuses_such_a_command_again(name, value):
    with pytest.raises(contract.ContractError, match=f"env.{name}"):
        contract.validate_command({**command(0, kind="group"), "env": {name: value}})


@pytest.mark.django_db
@pytest.mark.usefixtures("memory_channel_layer")
@pytest.mark.parametrize("name, value", LOADS_OR_WRITES[:5])
def test_the_api_answers_400_naming_the_variable(client, name, value):
    user = User.objects.create_user("op", password="pw-op-12345")
    user.groups.add(Group.objects.get(name="operators"))
    token = ApiToken.issue(user, "ci", scope=ApiToken.OPERATE)[1]
    r = client.post(
        "/api/sweeps",
        data=json.dumps({"kind": "group", "env": {name: value}}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert r.status_code == 400 and name in r.json()["error"]
    assert Sweep.objects.count() == 0
