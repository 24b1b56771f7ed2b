"""Helpers that know nothing of graphs or training: progress bars (`progress_bar.py`), this
process's memory (`process_memory.py`), and safe file writes (`files.py`).

May import: nothing of grappa.
"""
