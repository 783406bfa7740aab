"""The resident agent imports neither torch nor Django: a node needs only Celery and redis to run it."""

import sys

from devtools.devstack import python_env, run_to_end

BLOCK_AND_IMPORT = """
import sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "django"):
            raise ImportError(f"{name} is not installed on this node")

sys.meta_path.insert(0, Block())
import agents, agents.cli, agents.worker, agents.runner, agents.facts, agents.netinfo, agents.rendezvous, agents.probe
import agents.gpu, agents.gpu_check, agents.gpu_contract, agents.gpu_findings, agents.nccl_errors
agents.worker.Agent("n0", "127.0.0.1", "redis://127.0.0.1:1/0").app.loader.import_default_modules()
print("ok", sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "django", "pynvml")))
"""


def test_the_agent_modules_import_without_torch_or_django():
    out = run_to_end(
        [sys.executable, "-c", BLOCK_AND_IMPORT], env=python_env(DJANGO_SETTINGS_MODULE="cluster_health.settings")
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok []"
