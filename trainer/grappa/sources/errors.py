"""The one error type of reading a dataset (torch-free, so preparation workers stay light)."""


class DatasetError(ValueError):
    """A dataset cannot be read as configured; the message names the file or field and the fix."""
