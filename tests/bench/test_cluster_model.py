"""The cluster-time model (bench/cluster_model.py) and the peer page's use of it."""
import json
import math

import pytest

from bench_modules import load


def machine(cpu: float, sent: int, received: int) -> dict:
    return {"cpu_seconds": cpu, "sent_bytes": sent, "received_bytes": received}


def test_modelled_epoch_is_slowest_compute_plus_busiest_link_plus_latency():
    cm = load("cluster_model")
    ms = [machine(1.0, 100, 300), machine(2.0, 200, 50)]
    # the ring (Grappa) and DistDGL send and receive at once: the larger direction
    assert cm.modelled_epoch(ms, "grappa", rate_bytes_s=100.0) == pytest.approx(2.0 + 300 / 100)
    assert cm.modelled_epoch(ms, "distdgl", rate_bytes_s=100.0) == pytest.approx(2.0 + 300 / 100)
    # the previous star: phases took turns on a link (sent + received), and the aggregator
    # (machine 0) reduced while the workers waited: its CPU adds to the busiest worker's
    assert cm.modelled_epoch(ms, "grappa-star", rate_bytes_s=100.0) == pytest.approx(1.0 + 2.0 + 400 / 100)
    # DistDGL, 2 machines, 3 layers: 3 sampling hops + 1 pull + a 2-step ring = 6 round trips a step;
    # Grappa's ring over 5 members (P = 4 + the aggregator): 8 hops; the star: up and down
    assert cm.round_trips("distdgl", 2, 3) == 6 and cm.round_trips("grappa", 5, 3) == 8
    assert cm.round_trips("grappa-star", 5, 3) == 2
    assert cm.modelled_epoch(ms, "distdgl", 100.0, steps=4, layers=3, latency_s=0.01) == pytest.approx(5.0 + 4 * 6 * 0.01)


def test_projection_at_the_measured_p_gives_back_the_measurement():
    cm = load("cluster_model")
    n_train, batch, steps = 26_000, 1000, 7  # P = 4: ceil(26000 / 4000) = 7 steps
    grappa = [machine(0.7, 5_000_000, 9_000_000)] + [machine(3.5, 2_000_000, 1_000_000)] * 4
    machines, s = cm.project(cm.profile("grappa", grappa, steps), 4, n_train, batch)
    assert s == steps
    assert machines[0]["received_bytes"] == 9_000_000 and machines[1]["cpu_seconds"] == pytest.approx(3.5)
    dgl = [machine(3.0, 40_000_000, 60_000_000)] * 4
    machines, _ = cm.project(cm.profile("distdgl", dgl, steps), 4, n_train, batch)
    assert machines[0] == pytest.approx(dgl[0])


def test_projection_scales_steps_seeds_fan_in_and_remote_share():
    cm = load("cluster_model")
    n_train, batch = 26_000, 1000
    star = cm.profile("grappa-star", [machine(0.8, 8e6, 8e6)] + [machine(2.0, 1e6, 1e6)] * 8, steps=4)
    machines, steps = cm.project(star, 64, n_train, batch)
    assert steps == 1  # ceil(26000 / 64000)
    # the star's aggregator served 64 workers a step instead of 8; a worker's message is the model's size
    assert machines[0]["sent_bytes"] == pytest.approx(8 * 2e6, rel=1e-6)
    assert machines[1]["sent_bytes"] == pytest.approx(0.25e6, rel=1e-6)
    # a worker's step now has 26000 / 64 = 406 seeds instead of 1000
    assert machines[1]["cpu_seconds"] == pytest.approx(0.5 * (26_000 / 64) / 1000)
    dgl = cm.profile("distdgl", [machine(2.0, 4e6, 8e6)] * 8, steps=4)
    machines, _ = cm.project(dgl, 16, n_train, batch)
    remote = (15 / 16) / (7 / 8)
    assert machines[0]["received_bytes"] == pytest.approx(2 * 2e6 * remote, rel=1e-6)
    assert len(machines) == 16 and math.isclose(machines[0]["cpu_seconds"], 2 * 0.5)
    # the ring: every member's share is 2(M-1)/M of a message, M = P + 1, whoever it is
    ring = cm.profile("grappa", [machine(0.1, 1e6, 1e6)] * 9, steps=4)
    machines, _ = cm.project(ring, 64, n_train, batch)
    share = (64 / 65) / (8 / 9)
    assert machines[0]["sent_bytes"] == pytest.approx(0.25e6 * share, rel=1e-6)
    assert machines[0]["cpu_seconds"] == pytest.approx(0.025)  # no fan-in: the aggregator steps like a worker
    assert machines[64]["received_bytes"] == pytest.approx(0.25e6 * share, rel=1e-6)


def run(system: str, seconds: float, machines: list[dict], steps: int = 7, curve=None) -> dict:
    epochs = [{"train_seconds": seconds, "steps": steps, "machines": machines}] * 3
    return {"system": system, "epoch_seconds": seconds, "kernel_bytes_per_epoch": 10**7, "epochs": epochs,
            "curve": curve or [], "batch_size": 1000, "train_nodes": 26_000, "test_acc": 0.5,
            "epochs_run": 3}


def test_peer_page_ratio_target_validation_and_labelled_projections(tmp_path):
    render = load("render_peer")
    g = [machine(0.1, 10**6, 10**6)] + [machine(1.0, 10**5, 10**5)] * 8
    d = [machine(2.0, 10**8, 10**8)] * 8
    runs = {f"timing|rmat|8|3|grappa|1gbit|{r}": run("grappa", s, g) for r, s in enumerate([1.0, 3.0, 2.0])}
    runs |= {f"timing|rmat|8|3|distdgl|1gbit|{r}": run("distdgl", s, d) for r, s in enumerate([9.0, 8.0, 10.0])}
    runs["timing|rmat|4|3|distdgl|1gbit|0"] = {"system": "distdgl", "error": "trainer 1 exited 1"}
    page = render.render(json.loads(json.dumps(runs)), tmp_path).read_text()
    row = next(line for line in page.splitlines() if line.startswith("| rmat | 8 | 1gbit | 3 |"))
    cols = [c.strip() for c in row.strip("|").split("|")]
    assert cols[4] == "2.00" and cols[6] == "9.00" and cols[8] == "**4.50x**" and cols[12] == "≥ 2.0x: met"
    # validation: Grappa's model = 1.0 s compute + 1 MB / 125 MB/s (the ring: the larger direction)
    section = page.split("## Cluster-time model: validation")[1]
    val = next(line for line in section.splitlines() if line.startswith("| rmat | 8 | 1gbit | 3 | Grappa |"))
    assert val.endswith("| 3 | 1.01 | 2.00 | -50% |")
    assert "PROJECTION" in page and "| rmat | 3 | 8 | 64 | 10gbit |" in page
    assert "`timing|rmat|4|3|distdgl|1gbit|0`: trainer 1 exited 1" in page
    assert (tmp_path / "peer-projection.png").exists() and (tmp_path / "peer-time-bytes.png").exists()


def test_accuracy_same_epochs_and_same_budget(tmp_path):
    render = load("render_peer")

    def curve(points):
        return [{"epoch": i + 1, "cum_seconds": t, "val_acc": v, "test_acc": a} for i, (t, v, a) in enumerate(points)]
    m = [machine(1.0, 1, 1)] * 5
    runs = {"accuracy|rmat|4|3|grappa|1gbit|0": run("grappa", 1.0, m, curve=curve([(1, .5, .50), (2, .6, .61), (3, .7, .72)])),
            "accuracy|rmat|4|3|distdgl|1gbit|0": run("distdgl", 3.0, m[:4], curve=curve([(3, .55, .56), (6, .8, .79), (9, .6, .60)]))}
    page = render.render(runs, tmp_path).read_text()
    row = next(line for line in page.splitlines() if line.startswith("| rmat | 4 | 3 | all-reduce | 3 |"))
    cols = [c.strip() for c in row.strip("|").split("|")]
    # same epochs: best validation of each; same budget (3 s, Grappa's total): DistDGL has 1 epoch
    assert cols[5:7] == ["0.720", "0.790"] and cols[7] == "3.0" and cols[8:10] == ["0.720", "0.560"]
    assert cols[10] == "3/1"


def test_a_sharded_optimizer_divides_only_the_optimizers_share_of_the_fixed_work():
    cm = load("cluster_model")
    n_train, batch = 26_000, 1000
    ms = [machine(0.4, 1e6, 1e6)] + [machine(1.0, 1e6, 1e6)] * 8  # 4 steps: 0.1 s fixed, 0.25 s a worker
    whole = cm.profile("grappa", ms, steps=4)
    sharded = cm.profile("grappa", ms, steps=4)
    sharded.optimizer_cpu, sharded.shard = 0.08, True  # of the 0.1 s: 0.08 optimizer, 0.02 all-reduce
    assert cm.fixed_at(whole, 65) == pytest.approx(0.1)
    assert cm.fixed_at(sharded, 65) == pytest.approx(0.02 + 0.08 / 65)
    a, _ = cm.project(whole, 64, n_train, batch)
    b, _ = cm.project(sharded, 64, n_train, batch)
    saved = 0.08 * (1 - 1 / 65)  # per step, on every member, the aggregator included
    assert a[0]["cpu_seconds"] - b[0]["cpu_seconds"] == pytest.approx(saved)
    assert a[1]["cpu_seconds"] - b[1]["cpu_seconds"] == pytest.approx(saved)
    assert a[1]["sent_bytes"] == b[1]["sent_bytes"]  # the same bytes


def test_a_machine_working_behind_the_steps_costs_only_what_outlasts_them():
    cm = load("cluster_model")
    # aggregator, two workers, the storage machine (rank 3) serving 250 bytes at 100 B/s
    ms = [machine(0.5, 10, 10), machine(1.0, 20, 120), machine(1.5, 20, 130), machine(0.2, 250, 5)]
    assert cm.modelled_epoch(ms, "grappa", 100.0) == pytest.approx(1.5 + 2.5)  # in series
    # behind: the others' epoch (1.5 + 1.3) against the storage machine's own (0.2 + 2.5)
    assert cm.modelled_epoch_behind(ms, "grappa", 100.0, background=3) == pytest.approx(2.8)
    slow = ms[:3] + [machine(0.2, 400, 5)]
    assert cm.modelled_epoch_behind(slow, "grappa", 100.0, background=3) == pytest.approx(4.2)
