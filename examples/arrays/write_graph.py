"""Write a small graph in the Grappa arrays format (numpy only): the README's first example of
training on your own graph.

    python examples/arrays/write_graph.py /tmp/mygraph [NODES]

Two-thousand nodes in 4 communities; an edge stays inside its community with probability 0.8;
features are the community's mean direction plus noise; 20% train, 20% val, 60% test.
"""
import sys
from pathlib import Path

import numpy as np


def main(folder: Path, n: int = 2000, classes: int = 4, degree: int = 8, features: int = 16) -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, classes, n)
    m = n * degree // 2
    src = rng.integers(0, n, m)
    same = rng.random(m) < 0.8
    members = [np.flatnonzero(y == c) for c in range(classes)]
    partner_class = np.where(same, y[src], rng.integers(0, classes, m))
    dst = np.array([rng.choice(members[c]) for c in partner_class])
    centres = rng.standard_normal((classes, features))
    x = (centres[y] + 2.0 * rng.standard_normal((n, features))).astype(np.float32)
    order = rng.permutation(n)
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "edges.npy", np.stack([src, dst]).astype(np.int32))  # [2, E]; one direction
    np.save(folder / "features.npy", x)                                   # [n, f] float32
    np.save(folder / "labels.npy", y)                                     # [n] integers
    np.save(folder / "train.npy", np.sort(order[: n // 5]))               # index arrays (or masks)
    np.save(folder / "val.npy", np.sort(order[n // 5: 2 * n // 5]))
    np.save(folder / "test.npy", np.sort(order[2 * n // 5:]))
    print(f"wrote {n} nodes and {m} edges to {folder}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), *map(int, sys.argv[2:3]))
