"""The operator's user-facing errors: a job that can never run as written, or cannot start yet."""
from __future__ import annotations


class SpecError(ValueError):
    """A GrappaJob the schema admits but that cannot run; `reason` is CamelCase, message names the field."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


class CreateBlocked(Exception):
    """A child the API server refused for now (e.g. quota in use by other pods): retried at every
    resync until spec.runPolicy.preRunningDeadlineSeconds runs out (status.blockedSince)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message
