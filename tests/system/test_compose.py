"""No Docker engine runs here: check that docker-compose.yml only uses what the project has."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SOURCES = "\n".join(p.read_text() for d in ("cluster_health", "agents") for p in (ROOT / d).rglob("*.py"))


def env_files(service: dict) -> list[Path]:
    out = []
    for entry in service.get("env_file", []):
        path = entry["path"] if isinstance(entry, dict) else entry
        required = entry.get("required", True) if isinstance(entry, dict) else True
        if required:
            out.append(ROOT / path)
    return out


def read_env_file(path: Path) -> dict:
    pairs = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            pairs[key] = value
    return pairs


def test_it_has_every_service_the_design_names():
    assert {"redis", "postgres", "web", "worker", "beat", "agent-1", "agent-2"} <= set(COMPOSE["services"])
    for name in ("redis", "postgres", "web", "worker"):
        assert "healthcheck" in COMPOSE["services"][name], name


def test_it_runs_commands_that_exist_in_the_project():
    for name, service in COMPOSE["services"].items():
        cmd = service.get("command")
        if not cmd or name in ("redis", "postgres"):
            continue
        line = " ".join(cmd)
        if cmd[0] == "daphne":
            module, _, attr = cmd[-1].partition(":")
            assert (ROOT / (module.replace(".", "/") + ".py")).exists(), line
            assert re.search(rf"^{attr} = ", (ROOT / (module.replace(".", "/") + ".py")).read_text(), re.M)
        elif cmd[0] == "celery":
            assert cmd[1:3] == ["-A", "cluster_health"] and (ROOT / "cluster_health/celery.py").exists()
            if "worker" in cmd:
                assert cmd[cmd.index("-Q") + 1] == "server", line
        elif cmd[:2] == ["python", "manage.py"]:
            assert (ROOT / "manage.py").exists()
            assert cmd[2] in ("migrate",) or (ROOT / f"cluster_health/management/commands/{cmd[2]}.py").exists()
        elif cmd[:3] == ["python", "-m", "agents"]:
            assert (ROOT / "agents/__main__.py").exists(), line
            assert cmd[3] == "run"
        else:
            raise AssertionError(f"{name}: unexpected command {line}")


def test_it_sets_only_variables_the_project_reads():
    for name, service in COMPOSE["services"].items():
        if name in ("redis", "postgres"):
            continue
        variables = dict(service.get("environment", {}))
        for path in env_files(service):
            assert path.exists(), f"{name}: env file {path} is missing"
            variables.update(read_env_file(path))
        assert variables, name
        for var in variables:
            assert f'"{var}"' in SOURCES or f"'{var}'" in SOURCES, f"{name}: {var} is read nowhere"


def test_it_builds_the_image_from_files_that_exist():
    dockerfile = (ROOT / "Dockerfile").read_text()
    for src in re.findall(r"^COPY (\S+)", dockerfile, re.M):
        assert (ROOT / src).exists(), src
    assert "--no-deps" in dockerfile and "torch==2.13.0" in dockerfile


def test_each_agent_mounts_its_own_key_and_redis_keeps_the_buffer_across_restarts():
    services = COMPOSE["services"]
    mounts = {name: {v.split(":")[0] for v in services[name]["volumes"]} for name in ("agent-1", "agent-2")}
    assert mounts["agent-1"].isdisjoint(mounts["agent-2"]), mounts
    for name, volumes in mounts.items():
        writers = [
            s
            for s, svc in services.items()
            if s != name and volumes & {v.split(":")[0] for v in svc.get("volumes", [])}
        ]
        assert all(w.startswith("enroll") for w in writers), (name, writers)
        assert services[name]["environment"]["CLUSTER_HEALTH_AGENT_KEY_FILE"] == f"/keys/{name}.key"
    redis = services["redis"]["command"]
    assert redis[redis.index("--appendonly") + 1] == "yes" and services["redis"]["volumes"]
