"""A user's own PyG model in a GrappaJob (README, "Bring your own model"): its code in a file on
the job's volume trains to Succeeded and a predict job applies its model; a factory that does not
import fails the job CannotRun at once, with no restart."""
from __future__ import annotations

import json
import time
from pathlib import Path

import kubernetes
import pytest
import yaml

import helpers as h
from cluster import Cluster
from test_dataset_sources import MOUNT, _wait_written, writer_pod

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "manifests" / "examples" / "csbm-gatv2.yaml"
MODEL_FILE = REPO / "examples" / "models" / "gatv2.py"
WRITE = ("import pathlib, sys\np = pathlib.Path(sys.argv[1])\np.parent.mkdir(parents=True, exist_ok=True)\n"
         "p.write_text(sys.argv[2])\n")


def put_on_volume(cluster: Cluster, namespace: str, pod: str, relative: str, text: str) -> None:
    """A file on the job's claim, written by a pod as the trainer's uid (as a user would)."""
    cluster.apply(json.dumps(h.storage_claim()), namespace)
    cluster.apply(json.dumps(writer_pod(pod, f"{MOUNT}/{relative}", text, script=WRITE)), namespace)
    _wait_written(cluster, namespace, pod)


def example_job(name: str, code_path: str, factory: str = "gatv2:make_model") -> dict:
    """manifests/examples/csbm-gatv2.yaml shrunk for the bed: P = 2, a small graph, 3 full-graph
    epochs (exact evaluation, which predict must reproduce), the suite's pod settings."""
    job = yaml.safe_load(EXAMPLE.read_text())
    suite = h.job_manifest(name)["spec"]
    job["metadata"] = {"name": name}
    spec = job["spec"]
    spec["partitions"] = 2
    spec["dataset"]["synthetic"].update(numNodes=2000, numClasses=4, numFeatures=16)
    spec["model"]["hidden"] = 16
    spec["model"]["custom"].update(factory=factory, codePath=code_path)
    spec["training"] = {"mode": "full-graph", "epochs": 3}
    spec["grappa"]["rounds"] = {"every": 2}
    spec["checkpoint"] = {"interval": 1}
    spec["storage"] = {"claimName": "grappa-data"}
    spec["aggregator"], spec["worker"] = suite["aggregator"], suite["worker"]
    return job


def test_model_from_a_file_on_the_volume_trains_then_predicts(cluster: Cluster, release: h.Release,
                                                               namespace: str) -> None:
    put_on_volume(cluster, namespace, "write-gatv2", "code/e2e/gatv2.py", MODEL_FILE.read_text())
    train = h.run_job(cluster, namespace, example_job("byom-gatv2", "code/e2e/gatv2.py"), release)
    st = train.job["status"]
    assert st["phase"] == "Succeeded" and st["restarts"] == 0, h.diagnostics(cluster, namespace, "byom-gatv2", release)
    assert 0.0 <= st["result"]["testAcc"] <= 1.0 and st["progress"]["epoch"] == 3, st
    log = h.aggregator_log(cluster, namespace, "byom-gatv2")
    assert "Traceback" not in log, log
    prepare_log = cluster.container_log(namespace, "byom-gatv2-prepare", "grappa")
    assert "model gatv2:make_model" in prepare_log and "layer by layer" in prepare_log, prepare_log

    # the predict job through the Python client, built from the same models as the CRD
    from grappa.config import TrainConfig
    from grappa_operator.client import GrappaJobClient
    client = GrappaJobClient(namespace, kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig)))
    spec = train.job["spec"]
    config = TrainConfig.model_validate({k: spec[k] for k in ("partitions", "dataset", "model", "training", "grappa")})
    client.submit("byom-predict", config, spec["storage"], predict={"model": st["artifacts"]["model"]},
                  aggregator=spec["aggregator"], worker=spec["worker"])
    phases: list[str] = []
    done = client.wait("byom-predict", timeout=h.scaled(420),
                       on_progress=lambda phase, progress: phases.append(phase))
    pst = done["status"]
    assert pst["phase"] == "Succeeded", (phases, h.diagnostics(cluster, namespace, "byom-predict", release))
    # exact inference of the custom model over the same graph: the training run's exact test accuracy
    assert pst["result"]["testAcc"] == pytest.approx(st["result"]["testAcc"], abs=1e-9), (pst["result"], st["result"])
    art = client.artifacts("byom-predict")
    assert art["predictions"] == art["runDir"] + "/predictions/predictions.npy", art
    lines = list(client.logs("byom-predict"))
    assert lines and not any("Traceback" in ln for ln in lines), lines[-20:]
    client.delete("byom-predict")
    cluster.wait_for(lambda: h.get_job(cluster, namespace, "byom-predict") is None, h.scaled(60),
                     "the predict job deleted by the client")


BROKEN = "import torch\n\n\ndef make_model(in_channels, out_channels):\n    return torch.nn.Linear(1, 1)\n\n\nimport e2e_no_such_module  # noqa\n"


def test_a_factory_that_does_not_import_fails_the_job_at_once(cluster: Cluster, release: h.Release,
                                                              namespace: str) -> None:
    put_on_volume(cluster, namespace, "write-broken", "code/e2e_broken.py", BROKEN)
    name = "byom-broken"
    applied = time.monotonic()
    h.apply_file(cluster, namespace, example_job(name, "code/e2e_broken.py", "e2e_broken:make_model"))
    # the bound is the hang it guards against: a crash loop through backoffLimit takes minutes
    failed = h.wait_job(cluster, namespace, name, lambda j: h.phase(j) == "Failed", "Failed", rel=release,
                        timeout=h.scaled(30), fail_on_failed=False)
    took = time.monotonic() - applied
    st = failed["status"]
    log = cluster.container_log(namespace, f"{name}-prepare", "grappa")
    line = log[log.rindex("grappa: error:"):].splitlines()[0]
    assert st["reason"] == "CannotRun" and st["message"] == line, (st, log, took)
    assert "model.custom.factory e2e_broken:make_model" in line and "e2e_no_such_module" in line, line
    assert f"{MOUNT}/code/e2e_broken.py, line 8" in line, line
    assert st.get("restarts", 0) == 0, st
    roles = {p["metadata"]["labels"].get(h.LABEL_ROLE) for p in h.job_pods(cluster, namespace, name)}
    assert roles <= {"prepare"}, roles  # no aggregator or worker was started
