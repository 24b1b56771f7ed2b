"""Metrics endpoint, the per-epoch report, and the Kubernetes status adapter (with a fake API)."""
import json
import socket
import urllib.request

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from grappa.app.metrics import TrainerMetrics, metrics_port_for
from grappa.app.report import write_report
from grappa.runtime.job_progress import Progress
from grappa.runtime.kube_status import JobStatus
from grappa.runtime.transport import ByteCounter
from grappa.strategies.grappa.rounds import RoundDecision
from grappa.util.cgroup_memory import CgroupPeaks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_metrics_are_served_with_project_names():
    m = TrainerMetrics(rank=0, job="demo")
    port = free_port()
    m.serve(port, addr="127.0.0.1")
    m.loss.set(0.25)
    m.round.set(3)
    m.step_seconds.observe(0.02)
    counter = ByteCounter()
    counter.sent["train"] += 1000
    m.observe_bytes(counter)
    counter.sent["train"] += 500
    m.observe_bytes(counter)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'grappa_trainer_loss{job="demo",rank="0"} 0.25' in body
    assert 'grappa_trainer_round{job="demo",rank="0"} 3.0' in body
    assert 'grappa_trainer_bytes_sent_total{job="demo",kind="train",rank="0"} 1500.0' in body
    assert "grappa_trainer_step_seconds_bucket" in body


def test_metrics_bind_all_interfaces_in_a_pod(monkeypatch):
    # port-forward connects to 127.0.0.1 inside the pod: a server on $POD_IP only would refuse it.
    monkeypatch.setenv("POD_IP", "127.0.0.2")  # not 127.0.0.1: binding it would refuse 127.0.0.1
    monkeypatch.delenv("GRAPPA_BIND_ADDRESS", raising=False)
    m = TrainerMetrics(rank=1, job="pf")
    port = free_port()
    m.serve(port)
    m.loss.set(0.5)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'grappa_trainer_loss{job="pf",rank="1"} 0.5' in body


def test_metrics_bind_address_override(monkeypatch):
    seen = {}
    monkeypatch.setattr("grappa.app.metrics.start_http_server", lambda port, addr, registry: seen.update(addr=addr))
    monkeypatch.setenv("GRAPPA_BIND_ADDRESS", "127.0.0.7")
    TrainerMetrics(rank=0).serve(1)
    assert seen["addr"] == "127.0.0.7"


def test_metrics_port_per_rank(monkeypatch):
    monkeypatch.delenv("POD_IP", raising=False)
    assert metrics_port_for(9400, 2) == 9402 and metrics_port_for(0, 2) == 0
    monkeypatch.setenv("POD_IP", "127.0.0.5")
    assert metrics_port_for(9400, 2) == 9400


def test_report_and_plot(tmp_path):
    hist = [{"epoch": e, "round": e // 3, "round_start": 3 * (e // 3), "loss": 1.0 / e,
             "train_acc": 0.5, "val_acc": 0.4 + e / 100, "test_acc": 0.4, "train_bytes": 10}
            for e in range(1, 8)]
    path = write_report(tmp_path, {"title": None}, hist, {"test_acc": 0.4})
    rep = json.loads(path.read_text())
    assert rep["rounds"] == [0, 1, 2] and rep["train_bytes_total"] == 70
    assert (tmp_path / "training.png").read_bytes()[:4] == b"\x89PNG"


def test_memory_cgroup_peaks_per_rank_in_the_report_and_gauges(tmp_path):
    """The largest of each rank's cgroup peaks over the epochs (a run resumed in a new pod starts
    its peaks again), the aggregator's, and which cgroup that is; the gauge, one series per kind."""
    mib = 2 ** 20
    hist = [{"epoch": e, "round": 0, "loss": 1.0, "worker_peak_rss_bytes": [100 * mib, 90 * mib],
             "worker_peak_pss_bytes": [60 * mib, 50 * mib], "worker_local_edges": [10, 10],
             "worker_cgroup_peak_bytes": [e * 300 * mib, 200 * mib],
             "worker_cgroup_working_set_peak_bytes": [e * 250 * mib, 150 * mib],
             "worker_cgroup_cache_peak_bytes": [e * 40 * mib, 30 * mib],
             "aggregator_cgroup_peak_bytes": 400 * mib, "aggregator_cgroup_working_set_peak_bytes": 350 * mib,
             "aggregator_cgroup_cache_peak_bytes": 20 * mib} for e in (2, 1)]
    group = {"path": "/user.slice/session-4.scope", "version": 1, "limit_bytes": None}
    path = write_report(tmp_path, {"title": None}, hist, {"test_acc": 0.4}, cgroup=group)
    mem = json.loads(path.read_text())["memory"]
    assert mem["worker_cgroup_peak_bytes"] == [600 * mib, 200 * mib]
    assert mem["worker_cgroup_working_set_peak_bytes"] == [500 * mib, 150 * mib]
    assert mem["worker_cgroup_cache_peak_bytes"] == [80 * mib, 30 * mib]
    assert mem["aggregator_cgroup_peak_bytes"] == 400 * mib
    assert {k: mem["cgroup"][k] for k in group} == group and "session" in mem["cgroup"]["what"]

    class Peaks:
        peak_rss, peak_pss = 100 * mib, 60 * mib
        cgroup = CgroupPeaks(None, find=False)
    Peaks.cgroup.usage, Peaks.cgroup.working_set, Peaks.cgroup.cache = 3 * mib, 2 * mib, mib
    m = TrainerMetrics(rank=1, job="demo")
    m.observe_memory(Peaks)
    samples = {(x.name, x.labels.get("kind")): x.value
               for family in text_string_to_metric_families(generate_latest(m.registry).decode())
               for x in family.samples}
    assert samples[("grappa_trainer_peak_pss_bytes", None)] == 60 * mib
    for kind, value in (("peak", 3), ("working_set_peak", 2), ("cache_peak", 1)):
        assert samples[("grappa_trainer_cgroup_memory_bytes", kind)] == value * mib


class FakeApi:
    def __init__(self, status):
        self.status, self.patches = status, []

    def get_namespaced_custom_object_status(self, group, version, ns, plural, name):
        assert (group, plural) == ("grappa.dev", "grappajobs")
        return {"status": self.status}

    def patch_namespaced_custom_object_status(self, group, version, ns, plural, name, body):
        self.patches.append((ns, name, body))


def test_job_status_reports_progress_and_applies_operator_rounds_at_boundaries():
    api = FakeApi({"rounds": {"current": 2, "pairingSeed": 77, "effectiveEpoch": 9}})
    js = JobStatus("job-a", "ns1", api=api)
    current = RoundDecision(1, 5, 4)
    assert js.decide(8, Progress(), current) == current  # not before the recorded boundary
    d = js.decide(10, Progress(), current)
    assert d == RoundDecision(2, 77, 10)  # applied at the boundary the aggregator is at
    assert js.decide(11, Progress(), d) == d  # nothing newer: stay
    js.report(Progress(epoch=10, round=2, loss=0.5, val_acc=0.8), final=False)
    ns, name, body = api.patches[-1]
    assert (ns, name) == ("ns1", "job-a")
    assert body["status"]["progress"]["round"] == 2 and body["status"]["progress"]["valAcc"] == 0.8
    assert "result" not in body["status"]
    js.report(Progress(epoch=12, test_acc=0.81, best_val=0.8, best_epoch=10), final=True)
    final = api.patches[-1][2]["status"]
    assert final["progress"]["finished"] is True and final["result"]["testAcc"] == 0.81


def test_accuracy_gauges_say_how_they_were_measured_as_the_docs_do():
    """Mini-batch runs evaluate on samples by default: the gauges' help may not promise "exact
    evaluation" (issue 35), and docs/metrics.md says what the help says."""
    from pathlib import Path
    docs = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    m = TrainerMetrics(rank=0, job="demo")
    helps = {metric.name: metric.documentation for metric in m.registry.collect()}
    for split in ("train", "val", "test"):
        name = f"grappa_trainer_{split}_accuracy"
        assert "sampled" in helps[name] and "exact" in helps[name], helps[name]
        assert f"| `{name}` | gauge | | {helps[name]} |" in docs, name


def test_the_plot_title_names_the_users_graph_not_its_format(tmp_path):
    from grappa.app.report import describe_run
    from grappa.config import TrainConfig
    cfg = TrainConfig.model_validate({"dataset": {"name": "arrays", "path": "/data/graphs/mygraph/"}})
    title = describe_run(json.loads(cfg.model_dump_json(by_alias=True)))
    assert title.startswith("mygraph (arrays) - GCN x2"), title
    assert describe_run(json.loads(TrainConfig().model_dump_json(by_alias=True))).startswith("csbm - ")
