"""DistDGL as its users deploy it, on our throttled namespaces: one "machine" per namespace, each
running one DistGraph server and one trainer, as DistDGL's launch.py starts them (the same DGL_*
variables, torch.distributed over gloo for the gradients, DGL's own RPC for sampling and
features). The DGL code itself is bench/distdgl/run.py, run by the peer environment's python.

    py = peer_python()                       # builds the environment once (hack/peer-env.sh)
    export_graph(load_dataset(cfg.dataset), work / "g.npz")
    part = partition(py, work / "g.npz", parts=4, method="metis", out=work / "parts")
    with ThrottledNetwork(4, "1gbit") as net:
        trainers = DistDGLJob(py, net, part["part_config"], model).run(work / "out")
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "bench" / "distdgl" / "run.py"
SERVER_PORT, MASTER_PORT = 30050, 29500


class PeerUnavailable(RuntimeError):
    """The DistDGL environment cannot be built here (no registry, no disk, ...)."""


def peer_python() -> str:
    done = subprocess.run([str(ROOT / "hack" / "peer-env.sh")], capture_output=True, text=True)
    if done.returncode:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise PeerUnavailable(f"hack/peer-env.sh failed (exit {done.returncode}): {tail}")
    return done.stdout.strip().splitlines()[-1]


def export_graph(data, path: Path) -> Path:
    """Grappa's loaded dataset (the same nodes, edges, features, labels and split) as plain arrays
    both numpy 1 and 2 read."""
    src, dst = data.edge_index.numpy()
    np.savez(path, src=src, dst=dst, x=data.x.numpy(), y=data.y.numpy(),
             train_mask=data.train_mask.numpy(), val_mask=data.val_mask.numpy(),
             test_mask=data.test_mask.numpy(), num_nodes=np.int64(data.num_nodes),
             num_classes=np.int64(int(data.y.max()) + 1))
    return path


def partition(python: str, graph: Path, parts: int, method: str, out: Path) -> dict:
    """DGL's own `partition_graph`; returns the part config's path and the seconds it took."""
    done = subprocess.run([python, str(RUN), "partition", "--graph", str(graph), "--parts", str(parts),
                           "--method", method, "--out", str(out)],
                          capture_output=True, text=True, env=_env())
    if done.returncode:
        raise RuntimeError(f"DGL partition_graph failed:\n{done.stderr[-3000:]}")
    return {"part_config": str(out / "g.json"), **json.loads(done.stdout.strip().splitlines()[-1])}


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # one thread per process, as our workers run here: 2 cores hold every machine's processes
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", DGLBACKEND="pytorch", **extra)
    return env


class DistDGLJob:
    def __init__(self, python: str, net, part_config: str, model: dict, timeout: float = 1800):
        self.python, self.net, self.part_config, self.model = python, net, part_config, model
        self.machines = net.ranks
        self.timeout = timeout

    def _model_args(self) -> list[str]:
        m = self.model
        return ["--classes", str(m["classes"]), "--layers", str(m["layers"]), "--hidden", str(m["hidden"]),
                "--dropout", str(m["dropout"]), "--fanouts", ",".join(map(str, m["fanouts"])),
                "--batch-size", str(m["batch_size"]), "--lr", str(m["lr"]),
                "--weight-decay", str(m["weight_decay"]), "--epochs", str(m["epochs"]),
                "--seed", str(m.get("seed", 0))]

    def run(self, out: Path) -> list[dict]:
        """Starts P servers and P trainers, waits for the trainers, returns each trainer's record
        (rank order: its train node count and per-epoch figures). Every process is killed on the
        way out."""
        out.mkdir(parents=True, exist_ok=True)
        ip_config = out / "ip_config.txt"
        ip_config.write_text("".join(f"{self.net.address(m)} {SERVER_PORT}\n" for m in range(self.machines)))
        common = dict(DGL_DIST_MODE="distributed", DGL_IP_CONFIG=str(ip_config), DGL_NUM_SERVER="1",
                      DGL_CONF_PATH=self.part_config, DGL_GRAPH_FORMAT="csc", DGL_NUM_SAMPLER="0",
                      **{"GLOO_SOCKET_IFNAME": "eth0", **self.net.env})
        procs: list[subprocess.Popen] = []
        logs = []
        shm = [Path(f"/dev/shm/{self.net.tag}-m{m}") for m in range(self.machines)]
        try:
            for d in shm:
                d.mkdir(exist_ok=True)
            for m in range(self.machines):
                log = open(out / f"server-{m}.log", "w")
                logs.append(log)
                procs.append(subprocess.Popen(
                    self._on(m, shm[m]) + [self.python, str(RUN), "server"], stdout=log, stderr=subprocess.STDOUT,
                    env=_env(**common, DGL_ROLE="server", DGL_SERVER_ID=str(m),
                             DGL_NUM_CLIENT=str(self.machines))))
            trainers = []
            for m in range(self.machines):
                log = open(out / f"trainer-{m}.log", "w")
                logs.append(log)
                trainers.append(subprocess.Popen(
                    self._on(m, shm[m]) + [self.python, str(RUN), "trainer", "--ip-config", str(ip_config),
                                          "--part-config", self.part_config, "--out", str(out)]
                    + self._model_args(), stdout=log, stderr=subprocess.STDOUT,
                    env=_env(**common, DGL_ROLE="client", MASTER_ADDR=self.net.address(0),
                             MASTER_PORT=str(MASTER_PORT), RANK=str(m), WORLD_SIZE=str(self.machines))))
            procs += trainers
            self._wait(trainers, procs[:self.machines], out)
            return [json.loads((out / f"trainer-{m}.json").read_text()) for m in range(self.machines)]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for p in procs:
                p.wait()
            for log in logs:
                log.close()
            for d in shm:
                shutil.rmtree(d, ignore_errors=True)

    def _on(self, m: int, shm: Path) -> list[str]:
        """Runs a command on machine m: in its network namespace, and with its own /dev/shm.
        A server shares its partition with the trainers of its machine through shared memory,
        named after the graph: on one host every machine's server would write the same names."""
        return self.net.prefix(m) + ["sh", "-c", 'mount --bind "$0" /dev/shm && exec "$@"', str(shm)]


    def _wait(self, trainers: list, servers: list, out: Path) -> None:
        """Until every trainer exits 0; the first failure (a trainer, or a server dying under them)
        ends the job at once instead of leaving the others blocked in a collective."""
        deadline = time.monotonic() + self.timeout
        while any(t.poll() is None for t in trainers):
            for role, group in (("trainer", trainers), ("server", servers)):
                for m, p in enumerate(group):
                    if p.poll():
                        raise RuntimeError(f"DistDGL {role} {m} exited {p.returncode}:\n"
                                           f"{_tail(out / f'{role}-{m}.log')}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"DistDGL job still running after {self.timeout:.0f} s (logs in {out})")
            time.sleep(0.2)
        bad = [m for m, t in enumerate(trainers) if t.returncode]
        if bad:
            raise RuntimeError(f"DistDGL trainer {bad[0]} failed:\n{_tail(out / f'trainer-{bad[0]}.log')}")


def reap_stale_shm() -> list[str]:
    """Per-machine /dev/shm folders of runs whose process is gone (a SIGKILL skips the cleanup;
    they hold copies of the partitions, so they are worth deleting)."""
    gone = []
    for d in Path("/dev/shm").glob("gr*-m*"):
        m = re.match(r"^gr(\d+)-m\d+$", d.name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            shutil.rmtree(d, ignore_errors=True)
            gone.append(str(d))
    return gone


def evaluate(python: str, graph: Path, out: Path, model: dict) -> list[dict]:
    """Test accuracy of every epoch the job saved, by exact full-neighbour inference."""
    done = subprocess.run([python, str(RUN), "evaluate", "--graph", str(graph), "--out", str(out),
                           "--layers", str(model["layers"]), "--hidden", str(model["hidden"]),
                           "--dropout", str(model["dropout"])],
                          capture_output=True, text=True, env=_env())
    if done.returncode:
        raise RuntimeError(f"DistDGL evaluation failed:\n{done.stderr[-3000:]}")
    return json.loads((out / "accuracy.json").read_text())


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text().splitlines()[-lines:])
    except OSError:
        return "(no log)"

