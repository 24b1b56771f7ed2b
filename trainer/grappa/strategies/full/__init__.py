"""Full communication (`strategy: full`), the feature-fetching baseline: fixed partitions, and
every step each worker fetches its halo's input features and hidden activations from their owners
and sends their gradients back (`halo_exchange.py`, also VARCO's and RETEXO's engine), so its
gradient is exactly the full-graph one (`strategy.py`)."""
