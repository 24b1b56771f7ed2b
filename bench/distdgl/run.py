"""The DistDGL side of the peer benchmark. Runs in its own environment (`make peer-env`: dgl 2.1.0,
torch 2.1, numpy < 2), never in Grappa's; bench/distdgl_job.py starts it. Four roles:

    run.py partition --graph g.npz --parts 4 --method metis --out parts/
    run.py server    (DGL_ROLE=server and the DGL_* variables DistDGL's launcher sets)
    run.py trainer   --part-config parts/g.json --out out/ ...   (one per machine, with torch RANK)
    run.py evaluate  --graph g.npz --out out/ ...   (full-neighbour inference of every saved epoch)

The trainer follows DistDGL's own GraphSAGE example: DistGraph, node_split of the train mask,
DistNodeDataLoader with a NeighborSampler, features pulled from the servers per mini-batch,
gradients all-reduced by DistributedDataParallel over gloo. The model mirrors Grappa's GraphSAGE
(mean aggregator, ReLU, dropout on hidden activations only, Adam with the same weight decay).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np


def build_graph(path: str):
    import dgl
    import torch
    z = np.load(path)
    g = dgl.graph((torch.from_numpy(z["src"]), torch.from_numpy(z["dst"])), num_nodes=int(z["num_nodes"]))
    g.ndata["feat"] = torch.from_numpy(z["x"])
    g.ndata["label"] = torch.from_numpy(z["y"])
    for split in ("train", "val", "test"):
        # int8 rather than bool, as GraphStorm stores them for DistDGL (bool was not tried since
        # the out-of-range pulls we first saw turned out to be the shared /dev/shm, distdgl_job.py)
        g.ndata[f"{split}_mask"] = torch.from_numpy(z[f"{split}_mask"].astype(np.int8))
    return g, int(z["num_classes"])


def make_model(in_dim: int, hidden: int, classes: int, layers: int, dropout: float):
    import torch.nn.functional as F
    from dgl.nn import SAGEConv
    from torch import nn

    class SAGE(nn.Module):
        def __init__(self):
            super().__init__()
            dims = [in_dim] + [hidden] * (layers - 1) + [classes]
            self.layers = nn.ModuleList(SAGEConv(dims[i], dims[i + 1], "mean") for i in range(layers))

        def forward(self, blocks, x):
            h = x
            for i, (layer, block) in enumerate(zip(self.layers, blocks)):
                if i > 0:  # as Grappa: dropout on hidden activations only
                    h = F.dropout(h, dropout, self.training)
                h = layer(block, h)
                if i < len(self.layers) - 1:
                    h = F.relu(h)
            return h

    return SAGE()


def partition(args) -> None:
    import dgl
    g, _ = build_graph(args.graph)
    t0 = time.perf_counter()
    dgl.distributed.partition_graph(g, args.name, args.parts, args.out, part_method=args.method,
                                    balance_train=True, balance_edges=True)
    print(json.dumps({"partition_seconds": time.perf_counter() - t0}))


def server(args) -> None:
    import dgl
    dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])  # serves until every trainer leaves


def _counters() -> tuple[int, int]:
    """This machine's (namespace's) eth0 bytes sent and received: the kernel's own counters."""
    base = Path("/sys/class/net/eth0/statistics")
    try:
        return int((base / "tx_bytes").read_text()), int((base / "rx_bytes").read_text())
    except OSError:
        return 0, 0


def trainer(args) -> None:
    t_start = time.time()
    import dgl
    import torch
    import torch.nn.functional as F

    torch.manual_seed(args.seed)
    t_import = time.time()
    # the servers load their partitions before they answer: this wait is the partitions' loading
    dgl.distributed.initialize(args.ip_config)
    torch.distributed.init_process_group("gloo")
    rank = torch.distributed.get_rank()
    g = dgl.distributed.DistGraph(args.graph_name, part_config=args.part_config)
    train_nid = dgl.distributed.node_split(g.ndata["train_mask"], g.get_partition_book(), force_even=True)
    setup = {"import_seconds": t_import - t_start, "load_seconds": time.time() - t_import}
    sampler = dgl.dataloading.NeighborSampler([int(f) for f in args.fanouts.split(",")])
    loader = dgl.dataloading.DistNodeDataLoader(g, train_nid, sampler, batch_size=args.batch_size,
                                                shuffle=True, drop_last=False)
    model = make_model(g.ndata["feat"].shape[1], args.hidden, args.classes, args.layers, args.dropout)
    model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    epochs = []
    for epoch in range(1, args.epochs + 1):
        model.train()
        torch.distributed.barrier()  # every machine starts the epoch together, as a cluster would
        sent0, recv0 = _counters()
        t0, cpu0 = time.time(), time.process_time()
        steps, loss_sum, seeds_total = 0, 0.0, 0
        for input_nodes, seeds, blocks in loader:
            x = g.ndata["feat"][input_nodes]
            y = g.ndata["label"][seeds].long()
            loss = F.cross_entropy(model(blocks, x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
            loss_sum += float(loss) * len(seeds)
            seeds_total += len(seeds)
        t1, cpu1 = time.time(), time.process_time()
        sent1, recv1 = _counters()
        epochs.append({"epoch": epoch, "started_at": t0, "ended_at": t1, "train_seconds": t1 - t0,
                       "trainer_cpu_seconds": cpu1 - cpu0, "steps": steps,
                       "loss": loss_sum / max(seeds_total, 1), "seeds": seeds_total,
                       "machine_sent_bytes": sent1 - sent0, "machine_received_bytes": recv1 - recv0})
        if rank == 0:  # saved outside the timed window, for evaluate()
            torch.save(model.module.state_dict(), out / f"epoch-{epoch}.pt")
    (out / f"trainer-{rank}.json").write_text(json.dumps({"rank": rank, "epochs": epochs, "setup": setup,
                                                         "train_nodes": int(len(train_nid))}))
    torch.distributed.barrier()


def evaluate(args) -> None:
    """Exact full-neighbour inference, layer by layer on the whole graph, for every saved epoch."""
    import torch
    g, classes = build_graph(args.graph)
    model = make_model(g.ndata["feat"].shape[1], args.hidden, classes, args.layers, args.dropout)
    model.eval()
    out, rows = Path(args.out), []
    for path in sorted(out.glob("epoch-*.pt"), key=lambda p: int(p.stem.split("-")[1])):
        model.load_state_dict(torch.load(path))
        with torch.no_grad():
            pred = model([g] * args.layers, g.ndata["feat"]).argmax(1)
        acc = {s: float((pred == g.ndata["label"])[g.ndata[f"{s}_mask"].bool()].float().mean())
               for s in ("train", "val", "test")}
        rows.append({"epoch": int(path.stem.split("-")[1]), **{f"{s}_acc": a for s, a in acc.items()}})
    (out / "accuracy.json").write_text(json.dumps(rows))
    print(json.dumps(rows[-1] if rows else {}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("role", choices=["partition", "server", "trainer", "evaluate"])
    ap.add_argument("--graph", help="npz written by bench/distdgl_job.py export_graph()")
    ap.add_argument("--name", default="g")
    ap.add_argument("--parts", type=int)
    ap.add_argument("--method", choices=["random", "metis"], default="metis")
    ap.add_argument("--out")
    ap.add_argument("--graph-name", default="g")
    ap.add_argument("--ip-config")
    ap.add_argument("--part-config")
    ap.add_argument("--classes", type=int)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--fanouts", default="25,10")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    {"partition": partition, "server": server, "trainer": trainer, "evaluate": evaluate}[args.role](args)


if __name__ == "__main__":
    main()
