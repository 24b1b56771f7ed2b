"""Grappa's version, in one place (`grappa.__version__`, the model file's `grappa_version`)."""
__version__ = "0.1.0"
