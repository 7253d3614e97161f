"""A notebook placed on a joined node: its JupyterLab runs there (in the node's sandbox, in
the owner's workspace on that node) and is reached through the server's proxy, at the same
/notebooks/ID/ address as on one machine, HTTP and kernel WebSocket alike."""

from __future__ import annotations

import httpx

from tests.support.cli import FINAL, wait_for
from tests.support.notebooks import Lab
from tests.support.pool import Pool

SEEN = "import os\nprint(os.environ['CUDA_VISIBLE_DEVICES'], os.getcwd())"


def test_a_notebook_on_a_joined_node_is_reached_through_the_proxy(pool: Pool) -> None:
    bearer = {"Authorization": f"Bearer {pool.server.token}"}
    with httpx.Client(base_url=f"{pool.server.url}/api/v1", headers=bearer, timeout=30) as api:
        body = {"name": "on-n1", "resources": {"gpus": 1}, "gpu_types": ["H100"]}
        made = api.post("/notebooks", json=body)
        assert made.status_code == 201, made.text
        notebook = made.json()
        lab = Lab(pool.server.url, notebook["id"], pool.server.token)
        try:
            lab.answering()
            job = api.get(f"/jobs/{notebook['job_id']}").json()
            assert job["placement"]["node"] == "n1", job  # only n1 has H100s
            gpu, cwd = lab.run(lab.start_kernel(), SEEN).split()
            assert gpu == job["placement"]["gpus"][0]["uuid"]
            assert cwd == str(pool.nodes["n1"].data_dir / "workspaces" / "admin")  # n1's own
        finally:
            lab.close()
            assert api.post(f"/notebooks/{notebook['id']}/stop").status_code == 200
            wait_for(  # its GPU free again for the pool's next test
                lambda: api.get(f"/jobs/{notebook['job_id']}").json()["status"] in FINAL,
                60,
                "the notebook's job to end",
            )
