"""Init-time hangs' rules (cluster_health.core.init_hangs through core.hangs.diagnose): pure, every cause."""

from cluster_health.core.hangs import EXIT_CODES, diagnose, position

STORE = "10.0.0.1:29500"


def rank(n: int, node: str, stage: str, world: int = 2, master: str = "10.0.0.1", **init) -> dict:
    return {
        "rank": n,
        "node": node,
        "pid": 100 + n,
        "world_size": world,
        "state": "sleeping",
        "moved": False,
        "where": {"collective": "init_process_group", "frame": None},
        "launch": {"RANK": str(n), "WORLD_SIZE": str(world), "MASTER_ADDR": master, "MASTER_PORT": "29500"},
        "init": {"stage": stage, "peer": None, "peer_state": None, "listening": [], "interface": "eth0", **init},
    }


def test_a_rank_missing_is_the_node_it_should_be_on():
    out = diagnose([rank(0, "gpu-0", "store_wait")], nodes=["gpu-0", "gpu-1"])
    (c,) = out["culprits"]
    assert (out["verdict"], EXIT_CODES[out["verdict"]], c["kind"], c["ranks"], c["nodes"]) == (
        "node",
        2,
        "node",
        [1],
        ["gpu-1"],
    )
    assert c["text"] == (
        "rank(s) 1 of 2 never arrived: 1 arrived (1 at store_wait); expected on gpu-1 (its agent found no process "
        "of the job)"
    )
    assert (out["init"]["arrived"], out["init"]["missing"], out["init"]["stage"]) == ([0], [1], "store_wait")


def test_torchruns_node_rank_that_no_launcher_holds_is_missing():
    launcher = {
        "rank": None,
        "role": "launcher",
        "node": "gpu-0",
        "pid": 7,
        "world_size": 2,
        "launch": {"nnodes": "2", "node_rank": "0", "endpoint": STORE, "rdzv_backend": "static"},
        "init": {"stage": "rendezvous"},
    }
    out = diagnose([launcher], nodes=["gpu-0", "gpu-1"])
    assert out["verdict"] == "node" and out["init"]["missing_node_ranks"] == [1] and out["init"]["missing"] == []
    assert out["culprits"][0]["nodes"] == ["gpu-1"] and out["culprits"][0]["ranks"] == []
    assert out["init"]["launchers"][0]["node_rank"] == "0" and out["init"]["stage"] == "rendezvous"


def test_the_masters_port_held_by_another_program_comes_first():
    holder = {"role": "listener", "node": "gpu-0", "address": "0.0.0.0", "port": 29500, "pid": 9, "comm": "nginx"}
    waiting = rank(1, "gpu-1", "store_connect", peer=STORE, peer_state="estab")
    out = diagnose([waiting, holder], nodes=["gpu-0", "gpu-1"])
    c = out["culprits"][0]
    assert (out["verdict"], c["kind"], c["subject"], c["ranks"]) == ("application", "node", "gpu-0:29500", [1])
    assert "held by `nginx` (pid 9)" in c["text"] and c["hint"].startswith("MASTER_PORT=")
    assert out["culprits"][1]["ranks"] == [0]  # rank 0 exited on EADDRINUSE: missing, second


def test_a_rank_with_another_master_only_when_the_job_misses_its_rank():
    stray = {**rank(1, "gpu-1", "store_connect", master="10.0.0.9", peer="10.0.0.9:29500"), "master_differs": True}
    out = diagnose([rank(0, "gpu-0", "store_wait"), stray])
    (c,) = out["culprits"]
    assert (out["verdict"], c["kind"], c["ranks"]) == ("application", "rank", [1])
    assert c["hint"] == "MASTER_ADDR=10.0.0.1 on gpu-1 (it has MASTER_ADDR=10.0.0.9)"
    # Another job on the same port: its rank 1 is one this job has, or its world size another.
    other_job = {**stray, "pid": 555}
    both = diagnose([rank(0, "gpu-0", "pair_connect"), rank(1, "gpu-1", "pair_connect"), other_job])
    assert all(c["kind"] != "rank" or "another master" not in c["text"] for c in both["culprits"])
    bigger = {**stray, "world_size": 16}
    assert diagnose([rank(0, "gpu-0", "store_wait"), bigger])["culprits"][0]["kind"] == "node"


def test_a_rank_listening_on_loopback_is_named_with_the_interface_to_use():
    lo = rank(1, "gpu-1", "pair_connect", listening=["127.0.0.1:41000"], interface="ens5")
    lo["launch"]["GLOO_SOCKET_IFNAME"] = "lo"
    out = diagnose([rank(0, "gpu-0", "pair_connect", listening=["10.0.0.1:40000", "*:29500"]), lo])
    (c,) = out["culprits"]
    assert (out["verdict"], c["kind"], c["ranks"]) == ("network", "rank", [1])
    assert c["hint"].startswith("GLOO_SOCKET_IFNAME=ens5 on gpu-1") and "GLOO_SOCKET_IFNAME=lo" in c["text"]


def test_syns_unanswered_to_the_store_or_to_a_dead_address_are_the_link():
    fw = rank(1, "gpu-1", "store_connect", peer=STORE, peer_state="syn-sent")
    out = diagnose([rank(0, "gpu-0", "store_wait"), fw])
    (c,) = out["culprits"]
    assert (out["verdict"], c["kind"], c["subject"]) == ("network", "link", f"gpu-1->{STORE}")
    assert "tcp/29500" in c["hint"]
    dead = rank(0, "gpu-0", "pair_connect", peer="192.168.77.11:40100", peer_state="syn-sent")
    peer = rank(1, "gpu-1", "pair_connect", listening=["192.168.77.11:40100"])
    named = diagnose([dead, peer])
    assert (named["verdict"], named["culprits"][0]["kind"], named["culprits"][0]["ranks"]) == ("network", "rank", [1])
    nobody = diagnose([dead, rank(1, "gpu-1", "pair_connect")])
    assert nobody["culprits"][0]["kind"] == "link" and "no rank of the job listens on" in nobody["culprits"][0]["text"]


def test_a_stopped_rank_stays_first_and_nothing_seen_is_unknown():
    stopped = {**rank(1, "gpu-1", "store_connect"), "state": "stopped"}
    assert diagnose([rank(0, "gpu-0", "store_wait"), stopped])["culprits"][0]["text"].startswith(
        "rank 1 on gpu-1 is stopped"
    )
    quiet = diagnose([rank(0, "gpu-0", "pair_connect"), rank(1, "gpu-1", "pair_connect")])
    assert (quiet["verdict"], quiet["hung"]) == ("unknown", True) and "pair_connect" in quiet["why"]


def test_hostile_entries_do_not_break_it_and_the_first_collective_is_named():
    odd = [rank(0, "gpu-0", "store_wait"), "not a rank", {"role": "launcher", "launch": "x", "init": 3}]
    assert diagnose(odd, world_size=1)["verdict"] in ("unknown", "node")
    flight = {"groups": [], "pending": {"op": "all_reduce", "pg": 0, "seq": 1, "desc": "default_pg"}}
    where = position({"where": {"collective": "all_reduce", "frame": None}, "flight": flight})
    assert where["init"] == {"stage": "first_collective", "peer": None}
