"""Grappa operator: turns a GrappaJob into a running Grappa training job. Never imports torch."""

__version__ = "0.1.0"
