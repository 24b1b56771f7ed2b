"""Graphs from tables: a nodes table and an edges table in Parquet or CSV, with the user's own
ids (`dataset.name: tables`), and results written back keyed by them. Needs pyarrow, which only
the trainer imports (never the operator)."""
