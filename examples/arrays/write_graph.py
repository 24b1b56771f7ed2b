"""Write a small graph in the Grappa arrays format (numpy only): the README's first example of
training on your own graph, and of predicting on a new one.

    python examples/arrays/write_graph.py /tmp/mygraph [NODES] [--seed S] [--unlabelled]

Two-thousand nodes in 4 communities; an edge stays inside its community with probability 0.8;
features are the community's mean direction plus noise; 20% train, 20% val, 60% test. The
communities' directions are the same for every graph (a model trained on one labels another);
`--seed` draws another graph of that kind, `--unlabelled` writes only what predicting on it needs:
edges.npy and features.npy.
"""
import argparse
from pathlib import Path

import numpy as np


def main(folder: Path, n: int = 2000, classes: int = 4, degree: int = 8, features: int = 16, seed: int = 0,
         unlabelled: bool = False) -> None:
    centres = np.random.default_rng(0).standard_normal((classes, features))  # the kind of graph
    rng = np.random.default_rng(seed)  # this graph
    y = rng.integers(0, classes, n)
    m = n * degree // 2
    src = rng.integers(0, n, m)
    same = rng.random(m) < 0.8
    members = [np.flatnonzero(y == c) for c in range(classes)]
    partner_class = np.where(same, y[src], rng.integers(0, classes, m))
    dst = np.array([rng.choice(members[c]) for c in partner_class])
    x = (centres[y] + 2.0 * rng.standard_normal((n, features))).astype(np.float32)
    order = rng.permutation(n)
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "edges.npy", np.stack([src, dst]).astype(np.int32))  # [2, E]; one direction
    np.save(folder / "features.npy", x)                                   # [n, f] float32
    if unlabelled:
        print(f"wrote {n} nodes and {m} edges (no labels, no splits) to {folder}")
        return
    np.save(folder / "labels.npy", y)                                     # [n] integers
    np.save(folder / "train.npy", np.sort(order[: n // 5]))               # index arrays (or masks)
    np.save(folder / "val.npy", np.sort(order[n // 5: 2 * n // 5]))
    np.save(folder / "test.npy", np.sort(order[2 * n // 5:]))
    print(f"wrote {n} nodes and {m} edges to {folder}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("nodes", type=int, nargs="?", default=2000)
    p.add_argument("--seed", type=int, default=0, help="another graph of the same kind")
    p.add_argument("--unlabelled", action="store_true", help="edges.npy and features.npy only")
    a = p.parse_args()
    main(a.folder, a.nodes, seed=a.seed, unlabelled=a.unlabelled)
