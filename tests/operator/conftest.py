from __future__ import annotations

from datetime import datetime

import pytest
from gj_testlib import T0, make_spec

from grappa_operator.desired import JobRef


@pytest.fixture
def job() -> JobRef:
    return JobRef("job", "ns", "0123456789abcdef")


@pytest.fixture
def spec():
    return make_spec()


@pytest.fixture
def t0() -> datetime:
    return T0
