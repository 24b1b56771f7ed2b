"""The out-of-core pieces of link prediction's edge split (orchestrated by data/link_split.py):

| piece | module |
|---|---|
| the graph's distinct edges as one sorted file of 64-bit keys (external sort in ranges) | `edge_keys.py` |
| refusals of edge files (shape, ids, an edge in two splits), in bounded memory | `edge_check.py` |
| the seeded train / val / test choice: a hash rank, cut at exact counts | `ranking.py` |
| a [2, E] .npy written block by block | `columns.py` |
| the evaluation's negatives, the shared ones checked against the sorted keys | `negatives.py` |
| the message-passing source: the training edges, streamed from their file | `message.py` |
"""
