"""The operator's one user-facing error: a job that can never run as written."""
from __future__ import annotations


class SpecError(ValueError):
    """A GrappaJob the schema admits but that cannot run; `reason` is CamelCase, message names the field."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message
