"""The previous design's step, kept as the reference the all-reduce is compared with: every worker
sent its message to the aggregator, which stacked and summed them, applied the reducer and the
optimizer, and sent the parameters back (what runtime/aggregator.py did before the ring)."""
import torch

from grappa.models.params import flat_state, load_flat_state, set_grads
from grappa.strategies.grappa.reducer import combine


def star_step(model, optimizer, contributions, n_params: int, n_buf: int) -> None:
    """contributions: one (Contribution or None, the worker's float buffers) per worker."""
    grads, weights, seeds, bufs = [], [], [], []
    for c, b in contributions:
        grads.append(c.grad_sum if c is not None else torch.zeros(n_params))
        weights.append(c.weight_sum if c is not None else 0.0)
        seeds.append(float(c.seeds) if c is not None else 0.0)
        bufs.append(b)
    n = torch.tensor(seeds)
    if n_buf and float(n.sum()) > 0:
        state = flat_state(model)
        state[n_params:] = (torch.stack(bufs) * n[:, None]).sum(0) / n.sum()
        load_flat_state(model, state)
    if any(w > 0 for w in weights):
        set_grads(model, combine(grads, weights))
        optimizer.step()
