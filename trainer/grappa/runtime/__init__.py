"""The runtime: P + 1 processes training as one job.

Ranks (`aggregator.py`, rank 0, keeps the model of record; `worker.py`, ranks 1..P; `stages.py`,
the loops of a strategy trained stage by stage), how they meet (`rendezvous.py`, `group.py`:
gloo with timeouts that name the rank), what they say (`transport.py` with byte counters,
`protocol.py`, `exchange.py`: each step's one all-reduce, `replica.py`), how a job stops and
resumes (`stop.py`, `checkpoint.py`, `exit_codes.py`), evaluation during training
(`exact_eval.py`; `link_eval.py`: link prediction's ranking on exact embeddings), progress and rounds (`job_progress.py`; `kube_status.py`, the only Kubernetes
code of the trainer, used in pods), local processes (`local_job.py`), and the one-process runs
(`single_process.py`: the baseline; `simulation.py`: Grappa's P shards in one process).

May import: `grappa.config`, `grappa.util`, `grappa.data`, `grappa.models`, `grappa.tasks`,
`grappa.strategies`.
"""
