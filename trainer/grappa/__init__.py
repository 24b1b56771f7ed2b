"""Grappa: gradient-only communication for distributed GNN training.

Importing the package is cheap and torch-free (the operator imports `grappa.config`).
"""
__version__ = "0.1.0"
