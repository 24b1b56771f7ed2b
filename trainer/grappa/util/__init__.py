"""Helpers that know nothing of graphs or training: progress bars (`progress_bar.py`), this
process's memory (`process_memory.py`), safe file writes (`files.py`), and the version (`version.py`).

May import: nothing of grappa.
"""
