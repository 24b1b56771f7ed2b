"""Grappa, the method (arXiv 2602.01872; docs/method): isolated partitions that exchange only
gradients (`strategy.py`), the coverage of each seed's computation graph on its worker
(`coverage.py`), the coverage-corrected reducer that weighs the seeds' losses (`reducer.py`),
repartition rounds that move each worker's variable chunk (`rounds.py`, torch-free: the operator
decides rounds with it), and the harness that measures how far the reduced gradient is from the
exact one (`fidelity.py`)."""
