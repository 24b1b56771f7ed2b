"""Using a trained model: exact layer-wise inference over the chunk store, in bounded memory.

`grappa predict` / `grappa evaluate` (commands.py) start P worker processes (launcher.py,
worker.py). Each computes the rows of the chunks it owns, one layer at a time and a bounded block
of rows at a time (layer_pass.py), writing them as per-chunk row files (rowfiles.py) on the
shared volume; the next layer reads its halo rows from those files. Nothing assembles a
num_nodes x width tensor; the outputs are .npy files in the user's node numbering (outputs.py).
Training's exact evaluation runs the same pass (exact_eval.py).
"""
