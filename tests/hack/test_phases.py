"""hack/phases.py: the timeline `make test` prints, and the figures table of recorded runs
(docs/results/test-loop.md) computed from their phases files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hack"))
import phases  # noqa: E402


def test_the_table_is_computed_from_the_phases(tmp_path: Path) -> None:
    run = tmp_path / "cold-abc1234.txt"
    run.write_text("venv 10 300 ok\ncluster 900 300 ok\nkueue-install 1500 100 ok\ncommand 12 1980 ok\n"
                   "lane-gw0(unit) 320 1000 ok\nlane-gw1(unit-2) 320 1100 ok\nlane-gw2(e2e) 320 1672 ok\n"
                   "make-test 0 2000 ok\ncpu-busy 0 3600 core-s\ncpu-containers 0 900 core-s\n"
                   "cpu-available 0 4000 core-s\n")
    old = tmp_path / "warm-old.txt"  # recorded before make-test and lane rows existed
    old.write_text("cluster 2 214 ok\ncommand 0 2058 exit-1\n")
    rows = [r for r in phases.markdown([str(run), str(old)]).splitlines() if r.startswith("| ")]
    assert rows[1] == ("| cold-abc1234 | passed | 33.3 min (2,000 s) | 33.0 min (1,980 s) | 20.0 min (1,200 s) | "
                       "26.7 min (1,600 s) | 23.7 min (1,420 s) | 33.2 min (1,992 s) | busy 90% of the run (3,600 of 4,000 "
                       "core-s); the bed's containers (the cluster's node and its pods, image builds) 900 core-s |")
    assert rows[2] == "| warm-old | exit-1 | 34.3 min (2,058 s) | 34.3 min (2,058 s) | 3.6 min (216 s) | - | - | - | - |"


def test_the_timeline_prints_every_phase(tmp_path: Path) -> None:
    run = tmp_path / "phases.txt"
    run.write_text("venv 0 30 ok\ncluster 30 60 failed\ncpu-busy 0 150 core-s\ncpu-available 0 180 core-s\n")
    out = subprocess.run([sys.executable, str(REPO / "hack" / "phases.py"), str(run), "0"],
                         capture_output=True, text=True, check=True).stderr
    assert "venv" in out and "cluster" in out and "failed" in out
    assert "CPU: busy 83% of the run (150 of 180 core-s)" in out and "cpu-busy" not in out, out


def test_the_sampler_counts_the_machine_and_writes_its_rows_when_stopped(tmp_path: Path) -> None:
    import signal
    import time
    run = tmp_path / "phases.txt"
    sampler = subprocess.Popen([sys.executable, str(REPO / "hack" / "cpu_sample.py"), str(run)])
    try:
        deadline = time.process_time() + 0.5  # half a CPU-second of this process's own
        while time.process_time() < deadline:
            pass
    finally:
        sampler.send_signal(signal.SIGTERM)
        assert sampler.wait(timeout=60) == 0
    rows = dict((ln.split()[0], ln.split()[2:]) for ln in run.read_text().splitlines())
    assert set(rows) == {"cpu-busy", "cpu-containers", "cpu-available", "cpu-pods-ended", "cpu-pods-lasting",
                         "cpu-containers-other"} and all(r[1] == "core-s" for r in rows.values())
    assert int(rows["cpu-busy"][0]) >= 0 and int(rows["cpu-available"][0]) >= int(rows["cpu-busy"][0]) - 1


def test_a_pod_gone_while_its_node_runs_ended_and_one_gone_with_it_lasted(tmp_path: Path) -> None:
    import shutil
    sys.path.insert(0, str(REPO / "hack"))
    import cpu_sample

    node = tmp_path / "sys/fs/cgroup/cpuacct/docker/abc123"
    qos = node / "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice"
    job = qos / "kubelet-kubepods-besteffort-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice"
    api = node / "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/pod9a8b7c6d-5e4f-3a2b-1c0d-ffeeddccbbaa"
    for cgroup, ns in ((node, 9e9), (qos, 3e9), (job, 2e9), (job / "cri-containerd-1.scope", 2e9), (api, 1e9)):
        cgroup.mkdir(parents=True, exist_ok=True)
        (cgroup / "cpuacct.usage").write_text(str(int(ns)))
    (qos / "kubelet-kubepods-besteffort-pod11112222_3333_4444_5555_666677778888.slice").mkdir()  # its files gone
    seen: dict[str, float] = {}
    ended: set[str] = set()
    cpu_sample.sample_pods({}, seen, ended, tmp_path)
    assert sorted(seen.values()) == [1.0, 2.0] and not ended  # the pods, not the QoS level or a container
    (job / "cpuacct.usage").write_text(str(int(5e9)))
    cpu_sample.sample_pods({}, seen, ended, tmp_path)
    shutil.rmtree(job)
    cpu_sample.sample_pods({}, seen, ended, tmp_path)
    assert ended == {str(job)} and seen[str(job)] == 5.0
    shutil.rmtree(node)  # the cluster's end: its pods lasted
    cpu_sample.sample_pods({}, seen, ended, tmp_path)
    assert ended == {str(job)} and seen[str(api)] == 1.0
