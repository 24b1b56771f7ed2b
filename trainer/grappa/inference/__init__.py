"""Using a trained model: `grappa predict` / `grappa evaluate` as jobs, exact and in bounded memory.

The commands (`commands.py`) check the model against the graph and describe a job (`job.py`);
P worker processes (`local_predict.py` locally; `pod.py` in a GrappaJob's pods) each run
`predict_worker.py`: the rows of the chunks they own, one layer at a time and a bounded block of
rows at a time (the models' layer-wise pass, models/layerwise.py), written as per-chunk row files
(data/rowfiles.py) that the next layer reads its halo rows from. Nothing assembles a
num_nodes x width tensor; the outputs are .npy files in the user's node numbering (`outputs.py`),
progress is a status file per worker (`status.py`).

May import: every room but `grappa.app`.
"""
