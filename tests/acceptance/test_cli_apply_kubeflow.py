"""Kubeflow manifests through the real CLI against a real server: `gpupool apply -f` of a
PyTorchJob as Kubeflow's users write it (a comments-only document first, nprocPerNode as a
string, a namespace) with --dry-run prints the gpupool Job it runs as and names each field
not honoured; its image, no gpupool image, is refused at the file's line unless
--ignore-image; applied, it runs, with its notices in the job's events."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.support.cli import FINAL, Cli, refused, wait_for

MANIFEST = """\
# Copyright The Kubeflow Authors: a document of comments alone
---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: torchrun-cpu
  namespace: kubeflow
spec:
  nprocPerNode: "2"
  runPolicy:
    ttlSecondsAfterFinished: 60
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: pytorch-cpu:py3.8
              imagePullPolicy: Always
              command: [torchrun, demo.py]
    Worker:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: pytorch-cpu:py3.8
              imagePullPolicy: Always
              command: [torchrun, demo.py]
"""
RANKS = "import os; print(os.environ['RANK'], os.environ['WORLD_SIZE'], os.environ['PET_NNODES'])"


def test_a_dry_run_prints_the_job_and_names_what_is_not_honoured(
    admin: Cli, tmp_path: Path
) -> None:
    file = tmp_path / "pytorchjob.yaml"
    file.write_text(MANIFEST)
    before = len(admin.json("ls", "--all"))
    printed = admin("apply", "-f", str(file), "--dry-run", "--ignore-image")
    assert printed.returncode == 0, printed.stderr
    assert "apiVersion: gpupool/v1\nkind: Job\nmetadata:\n  name: torchrun-cpu" in printed.stdout
    for line in ("nodes: 2", "launcher: torch", "launcher_mode: per-node", "procs_per_node: 2"):
        assert line in printed.stdout
    notices = printed.stderr
    assert "document 1 (PyTorchJob torchrun-cpu): not honoured:" in notices
    for field in (
        "metadata.namespace: gpupool has no namespaces",
        "spec.runPolicy.ttlSecondsAfterFinished",
        "spec.pytorchReplicaSpecs.Master.restartPolicy",
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers.0.imagePullPolicy",
        "containers.0.image: asked to ignore images",
    ):
        assert field in notices, notices
    assert len(admin.json("ls", "--all")) == before

    answer = admin("apply", "-f", str(file), "--dry-run")
    assert refused(answer, "image_not_available"), answer.stderr
    assert f"{file}:20:15: document 1 (PyTorchJob torchrun-cpu): " in answer.stderr
    assert "gpupool apply --ignore-image" in answer.stderr


def test_an_applied_manifest_runs_with_its_notices_in_its_events(
    admin: Cli, tmp_path: Path
) -> None:
    file = tmp_path / "one.yaml"
    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "ranks", "namespace": "research"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "pytorch", "command": [sys.executable, "-c", RANKS]}
                            ]
                        }
                    }
                }
            }
        },
    }
    file.write_text(json.dumps(manifest))  # JSON is YAML too
    printed = admin.ok("apply", "-f", str(file), "--ignore-image")
    assert printed.startswith("job ") and printed.strip().endswith("(ranks), from PyTorchJob")
    job_id = int(printed.split()[1])
    job = wait_for(
        lambda: (found := admin.job(job_id))["status"] in FINAL and found,
        what=f"job {job_id} to end",
    )
    assert job["status"] == "succeeded", job
    assert admin.ok("logs", str(job_id)).split() == ["0", "1", "1"]
    ignored = [e for e in job["events"] if e["reason"] == "KubeflowFieldIgnored"]
    assert len(ignored) == 1 and "metadata.namespace" in ignored[0]["message"]
