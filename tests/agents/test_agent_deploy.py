"""The agent as a deployable unit: a wheel without Django, a sandboxed systemd unit, Kubernetes manifests."""

import shutil
import subprocess
import sys
import time
import zipfile
from email.parser import Parser
from pathlib import Path

import yaml

from tests.support.action_fixtures import require_tool

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "systemd" / "cluster-health-agent.service"
K8S = ROOT / "deploy" / "kubernetes"


def test_it_builds_an_agent_wheel_without_django(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "agents", src / "agents", ignore=shutil.ignore_patterns("__pycache__"))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            str(src),
            "-w",
            str(tmp_path / "dist"),
        ],
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert run.returncode == 0, run.stderr
    (wheel,) = (tmp_path / "dist").glob("cluster_health_agent-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = Parser().parsestr(zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode())
        entry_points = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    shipped = {p.relative_to(ROOT).as_posix() for p in (ROOT / "agents").rglob("*.py")}
    assert shipped and shipped <= set(names), sorted(shipped - set(names))  # every module, subpackages too
    assert not [n for n in names if n.startswith(("cluster_health/", "tests/", "devtools/"))]
    requires = [r.lower() for r in meta.get_all("Requires-Dist") or []]
    assert requires and not [r for r in requires if r.startswith(("django", "channels", "torch"))], requires
    assert "cluster-health-agent = agents.cli:main" in entry_points


def test_the_systemd_unit_is_sandboxed_but_keeps_the_host_network():
    unit = UNIT.read_text()
    settings = dict(line.split("=", 1) for line in unit.splitlines() if "=" in line and not line.startswith("#"))
    for key, value in {
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "NoNewPrivileges": "yes",
        "StateDirectory": "cluster-health-agent",
    }.items():
        assert settings.get(key) == value, key
    assert settings["EnvironmentFile"].startswith("/etc/cluster-health/")
    assert settings["LoadCredential"].startswith("agent.key:")
    # Probes must reach peers through the node's own NICs.
    for forbidden in ("PrivateNetwork", "IPAddressDeny", "RestrictAddressFamilies"):
        assert forbidden not in settings


def test_the_systemd_unit_passes_systemd_analyze_verify(tmp_path):
    analyze = require_tool("systemd-analyze")
    # verify insists that ExecStart exists: point it at a stand-in for the installed script.
    stand_in = tmp_path / "cluster-health-agent"
    stand_in.write_text("#!/bin/sh\n")
    stand_in.chmod(0o755)
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace("/opt/cluster-health-agent/bin/cluster-health-agent", str(stand_in)))
    run = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and not run.stderr.strip(), run.stdout + run.stderr


def _docs():
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def test_the_kubernetes_manifests_run_the_agent_on_the_host_network_and_the_server_as_deployments():
    docs = _docs()
    assert all(d["metadata"].get("namespace") == "cluster-health" for (k, _), d in docs.items() if k != "Namespace")
    agent = docs[("DaemonSet", "cluster-health-agent")]
    pod = agent["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert agent["spec"]["selector"]["matchLabels"].items() <= agent["spec"]["template"]["metadata"]["labels"].items()
    container = pod["containers"][0]
    assert container["command"] == ["cluster-health-agent", "run"]
    env = {e["name"]: e for e in container["env"]}
    assert env["CLUSTER_HEALTH_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # Every pod would mount a Secret whole: a node's credentials are its own files, never the fleet's.
    assert not [v for v in pod["volumes"] if "secret" in v or "projected" in v], pod["volumes"]
    assert "envFrom" not in container
    (own,) = [v for v in pod["volumes"] if "hostPath" in v]
    assert own["hostPath"]["path"] == "/etc/cluster-health"
    assert env["CLUSTER_HEALTH_AGENT_KEY_FILE"]["value"] == "/etc/cluster-health/agent.key"
    assert env["CLUSTER_HEALTH_BROKER_URL_FILE"]["value"] == "/etc/cluster-health/agent.broker"
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert not [name for kind, name in docs if kind == "Secret" and "agent" in name or "node-keys" in name]
    for component, command in (("web", "daphne"), ("worker", "celery"), ("beat", "celery")):
        deploy = docs[("Deployment", f"cluster-health-{component}")]
        spec = deploy["spec"]
        assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
        assert spec["template"]["spec"]["containers"][0]["command"][0] == command
    assert docs[("Deployment", "cluster-health-beat")]["spec"]["replicas"] == 1
    assert docs[("ConfigMap", "cluster-health-server")]["data"]["CLUSTER_HEALTH_K8S_ACTIONS"] == "off"


def test_the_inspect_helper_units_grant_ptrace_to_the_helper_alone_and_verify(tmp_path):
    """The agent keeps no capability; the socket-activated helper holds CAP_SYS_PTRACE for one request."""
    analyze = require_tool("systemd-analyze")
    agent = UNIT.read_text()
    assert (
        "CapabilityBoundingSet=\n" in agent
        and "CLUSTER_HEALTH_INSPECT_SOCKET=/run/cluster-health-inspect.sock" in agent
    )
    socket_unit = (ROOT / "deploy/systemd/cluster-health-inspect.socket").read_text()
    service = (ROOT / "deploy/systemd/cluster-health-inspect@.service").read_text()
    assert "ListenStream=/run/cluster-health-inspect.sock" in socket_unit and "Accept=yes" in socket_unit
    assert (
        "AmbientCapabilities=CAP_SYS_PTRACE" in service and "--stdio" in service and "StandardInput=socket" in service
    )
    stand_in = tmp_path / "python"
    stand_in.write_text("#!/bin/sh\n")
    stand_in.chmod(0o755)
    (tmp_path / "cluster-health-inspect.socket").write_text(socket_unit)
    (tmp_path / "cluster-health-inspect@.service").write_text(
        service.replace("/opt/cluster-health-agent/bin/python", str(stand_in))
    )
    run = subprocess.run(
        [
            analyze,
            "verify",
            str(tmp_path / "cluster-health-inspect.socket"),
            str(tmp_path / "cluster-health-inspect@.service"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0 and not run.stderr.strip(), run.stdout + run.stderr


def test_the_daemonsets_inspect_helper_alone_holds_ptrace_and_answers_the_agent_on_their_shared_socket(tmp_path):
    """hostPID is the pod's; SYS_PTRACE (and DAC_READ_SEARCH) only the helper container's. Its command, run
    as the manifest gives it, answers on the socket the agent container is pointed at."""
    from agents.hangs import inspect as helper
    from devtools.services import free_port

    pod = _docs()[("DaemonSet", "cluster-health-agent")]["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    agent, inspect = containers["agent"], containers["inspect"]
    assert pod["hostPID"] is True and set(containers) == {"agent", "inspect"}
    for c in (agent, inspect):
        ctx = c["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False and not ctx.get("privileged")
        assert ctx["capabilities"]["drop"] == ["ALL"]
    assert "add" not in agent["securityContext"]["capabilities"]
    assert sorted(inspect["securityContext"]["capabilities"]["add"]) == ["DAC_READ_SEARCH", "SYS_PTRACE"]
    assert not inspect.get("ports") and "env" not in inspect  # no broker URL, no node key, nothing to listen on
    socket_path = {e["name"]: e.get("value") for e in agent["env"]}[helper.SOCKET_ENV]
    command = inspect["command"]
    assert command[:4] == ["python", "-m", "agents.hangs.inspect", "--listen"] and command[4] == socket_path
    mounts = {c: {m["name"]: m["mountPath"] for m in containers[c]["volumeMounts"]} for c in containers}
    shared = {v["name"]: v for v in pod["volumes"]}["inspect-socket"]
    assert "emptyDir" in shared and set(mounts["inspect"]) == {"inspect-socket"}
    assert (
        socket_path.startswith(mounts["agent"]["inspect-socket"] + "/")
        and mounts["inspect"]["inspect-socket"] == (mounts["agent"]["inspect-socket"])
    )
    local = str(tmp_path / "inspect.sock")
    server = subprocess.Popen([sys.executable, *command[1:4], local], cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while not Path(local).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        ranks = helper._ask_socket(local, {"master_addr": "127.0.0.1", "master_port": free_port(), "interval_s": 0})
        assert ranks == []  # no such job: nothing found, and said so as JSON
        try:
            helper._ask_socket(local, {"master_addr": "127.0.0.1", "master_port": 1, "path": "/etc/shadow"})
        except ValueError as exc:
            assert "unexpected fields" in str(exc)
        else:
            raise AssertionError("a request beyond the job selector was answered")
    finally:
        server.kill()
        server.wait(10)
