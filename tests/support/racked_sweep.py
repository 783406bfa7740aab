"""A full sweep over racks whose pairs measure as cabled: fast inside a rack, slow across (topology tests).

``CABLED`` puts gpu03 in rack-b while ``CONF`` (a Slurm topology.conf) labels it rack-a: the
mislabelled node that topology inference must name.
"""

from __future__ import annotations

from django.core.management import call_command

from devtools.sweep_driver import heartbeat, result_for

NODES = ["gpu01", "gpu02", "gpu03", "gpu04", "gpu05", "gpu06"]
CONF = "SwitchName=rack-a Nodes=gpu[01-03]\nSwitchName=rack-b Nodes=gpu[04-06]\nSwitchName=spine Switches=rack-[a,b]\n"
CABLED = {
    "gpu01": "rack-a",
    "gpu02": "rack-a",
    "gpu03": "rack-b",
    "gpu04": "rack-b",
    "gpu05": "rack-b",
    "gpu06": "rack-b",
}
INSIDE = (12.0, 9.6)  # latency us, busbw GB/s
ACROSS = (41.0, 2.4)


def racked_sweep(driver, tmp_path, cabled=CABLED):
    """Declare CONF with ``nodes topology``, run a full sweep answered as ``cabled``; returns the sweep."""
    for name in NODES:
        heartbeat(name)
    conf = tmp_path / "topology.conf"
    conf.write_text(CONF)
    call_command("nodes", "topology", str(conf))
    sweep = driver.sweep(kind="full")
    wobble = iter([1.0, 1.03, 0.98, 1.02, 0.97, 1.01] * 1000)  # a measurement's few percent

    def answer(cmd):
        if cmd["kind"] != "pair":
            return result_for(cmd)
        a, b = cmd["node"], cmd["peers"][0]["name"]
        latency, busbw = INSIDE if cabled[a] == cabled[b] else ACROSS
        w = next(wobble)
        return result_for(cmd, latency=latency * w, busbw=busbw / w)

    driver.answer_all(answer)
    sweep.refresh_from_db()
    return sweep
