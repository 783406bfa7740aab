"""A slow job's kept diagnosis on its page: the verdict shown as a warning (not a failure, not a pass), the
straggler named with its lateness."""

import pytest

from cluster_health import hang_diagnoses
from cluster_health.models import HangDiagnosis
from cluster_health.queues import dispatch
from tests.support.dashboard_rows import make_nodes
from tests.web.test_hangs import logged_in, rank, report

pytestmark = pytest.mark.django_db
IN_OWN_CODE = {"collective": None, "frame": {"function": "step", "file": "/job/train.py", "line": 37}}


def recorded(n: int, late_s: float) -> dict:
    recent = [
        {"pg": 0, "seq": s, "op": "all_reduce", "created_ns": 10**18 + s * 400_000_000 + int(late_s * 1e9)}
        for s in range(1, 21)
    ]
    return {**rank(n, IN_OWN_CODE), "moved": True, "flight": {"groups": [], "pending": None, "recent": recent}}


def test_a_slow_job_is_shown_as_a_warning_with_its_straggler():
    make_nodes(["g0", "g1"])
    with dispatch.capture():  # the inspect commands, not sent
        diagnosis = hang_diagnoses.request(master="10.0.0.1:29500", nodes=["g0", "g1"])
    assert report(diagnosis, "g0", [recorded(0, 0.0)]) == "applied"
    assert report(diagnosis, "g1", [recorded(1, 0.25)]) == "applied"
    result = hang_diagnoses.conclude(HangDiagnosis.objects.get(pk=diagnosis.pk))
    assert (result["verdict"], result["hung"], result["culprits"][0]["ranks"]) == ("slow", False, [1])
    page = logged_in(operator=True).get(f"/hangs/{diagnosis.pk}/").content.decode()
    assert "verdict-warn" in page and "slow" in page and "250 ms after the others a step" in page
