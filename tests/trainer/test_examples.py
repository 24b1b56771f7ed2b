"""Every example config in the repository validates (the docs point users at them)."""
from pathlib import Path

import pytest

from grappa.config import load_config

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_config_validates(path):
    cfg = load_config(str(path))
    assert cfg.partitions >= 1


def test_there_are_examples():
    assert len(EXAMPLES) >= 2
