"""A gpu sweep on its page (one row per GPU, the model's median beside each figure, outliers marked), a node's
GPUs on the node page (facts and figures, the GPU x GPU matrix), and the API that serves both."""

import pytest

from tests.support import gpu_fleet

pytestmark = pytest.mark.django_db


def test_the_sweep_page_lists_every_gpu_with_its_models_median_and_marks_the_slow_one(driver, viewer_client):
    sweep = gpu_fleet.recorded_sweep(driver)
    page = viewer_client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert page.count('data-gpu-row="') == 8 * 5 + 7
    row = page.split('data-gpu-row="gpu-005/2"')[1].split("</tr>")[0]
    assert 'data-slow="h2d_gbps"' in row and 'data-slow="d2h_gbps"' in row and 'data-slow="bf16_tflops"' not in row
    assert "13.2 <span" in row
    healthy = page.split('data-gpu-row="gpu-001/0"')[1].split("</tr>")[0]
    assert "data-slow" not in healthy and "795.8 <span" in healthy


def test_the_node_page_shows_its_gpus_and_the_matrix_and_the_api_serves_them(driver, viewer_client):
    gpu_fleet.recorded_sweep(driver)
    page = viewer_client.get("/nodes/gpu-003/").content.decode()
    assert page.count('data-gpu="') == 8
    assert "17 up, 7 down" in page  # GPU 3's NVLink link 7
    assert 'id="gpu-matrix-data"' in page and "cluster_health/gpus.js" in page
    api = viewer_client.get("/api/nodes/gpu-006/gpus").json()
    assert api["node"] == "gpu-006" and len(api["devices"]) == 8
    m = api["check"]["matrix"]
    assert m["gpus"] == list(range(8)) and m["p2p_gbps"][3][3] is None
    assert m["p2p_gbps"][3][5] < 27 and m["p2p_gbps"][5][3] < 27 and m["p2p_gbps"][0][1] > 370
    assert m["link"][0][1] == "nvlink" and m["nvlink_lanes"][0][1] == 18
    assert viewer_client.get("/api/nodes/nobody/gpus").status_code == 404


def test_a_cpu_node_says_it_has_no_gpus(driver, viewer_client):
    gpu_fleet.gpu_sweep(driver, {"cpu-1": "cpu_node"})
    page = viewer_client.get("/nodes/cpu-1/").content.decode()
    assert "data-no-gpus" in page and "no NVIDIA driver" in page
