"""Kubernetes resource quantities ("500m", "2", "4Gi"): parsed by the kubernetes client's own
parser, refused at admission by the CRD's `pattern` (the one Kubernetes' CRD generators emit for
resource.Quantity, without a sign: requests and limits are never negative) and, for a quantity
written as an integer, which the pattern does not see (it applies to strings only), `minimum: 0`.

`check` is the pydantic twin of the pattern: the operator refuses what an older CRD let through,
naming the field, before any pod is made of it.
"""
from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Optional, Union

from kubernetes.utils.quantity import parse_quantity

PATTERN = (r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
           r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
_FORM = re.compile(PATTERN)
HINT = "a Kubernetes quantity such as 500m, 2 or 4Gi"
# The CRD schema of one quantity: an int of at least 0 (`minimum` checks numbers only) or a string
# of that form (`pattern` checks strings only).
SCHEMA: dict[str, Any] = {"anyOf": [{"type": "integer"}, {"type": "string"}], "pattern": PATTERN, "minimum": 0}


def parse(value: Union[int, str]) -> Optional[Decimal]:
    """The quantity's value (cores, bytes, ...), None when it is not a non-negative quantity."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    if isinstance(value, str) and not _FORM.fullmatch(value):
        return None  # the client's parser is laxer than the API server (e.g. "2 Gi")
    try:
        amount = parse_quantity(value)
    except ValueError:
        return None
    return amount if amount >= 0 else None


def check(value: Union[int, str]) -> Union[int, str]:
    if parse(value) is None:
        raise ValueError(f"{value!r} is not {HINT}")
    return value
