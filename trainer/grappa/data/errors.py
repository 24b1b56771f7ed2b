"""The one error type of dataset loading."""


class DatasetError(ValueError):
    """A dataset cannot be loaded as configured; the message names the field and the fix."""
