"""The start-sweep form lists the nodes "none ticked" means: every active node, an offline one marked."""

import pytest

from cluster_health.models import Node
from tests.support.dashboard_rows import make_nodes, make_user

pytestmark = pytest.mark.django_db


def test_it_lists_every_active_node_and_marks_the_offline_one(client):
    client.force_login(make_user("operator", operator=True))
    make_nodes(["host1", "host2", "host10"])
    make_nodes(["host5"], online=False)
    make_nodes(["gone1"])
    Node.objects.filter(name="gone1").update(active=False)
    page = client.get("/sweeps/new/").content.decode()
    boxes = [line for line in page.split('<label class="check">')[1:]]
    labels = [box.split("</label>")[0].split(">", 1)[1].strip() for box in boxes]
    assert labels == ["host1", "host2", "host5 (offline)", "host10"]
    assert "none ticked: every active node" in page
