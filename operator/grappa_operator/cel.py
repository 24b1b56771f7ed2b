"""CEL rules (`x-kubernetes-validations`) for the generated CRD, built from the models' own values.

The API server evaluates them at admission, so a job that breaks a cross-field rule is refused by
`kubectl apply` instead of failing later; the pydantic validators and `desired.check_runnable`
stay the twins the operator and `grappa train` run. Expressions read only bounded fields (see
crdgen's maxLength/maxItems) to stay inside the API server's estimated-cost budget.
"""
from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel

RULES_KEY = "x-kubernetes-validations"


def rule(expr: str, message: str, field_path: Optional[str] = None) -> dict[str, str]:
    out = {"rule": expr, "message": message}
    if field_path:
        out["fieldPath"] = field_path  # where kubectl shows the error (relative to the rule's node)
    return out


def validations(*rules: dict[str, str]) -> dict[str, Any]:
    return {RULES_KEY: list(rules)}


def immutable(what: str) -> dict[str, str]:
    """A transition rule: the field keeps the value it was created with."""
    return rule("self == oldSelf", f"{what} cannot change once the job exists (its chunk store and "
                "checkpoints are built for it): delete the job and create it again")


def literal(value: Any, as_float: bool = False) -> str:
    """A CEL literal of a Python default (strings single-quoted, floats with a point)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, (int, float)):
        return repr(float(value)) if as_float or isinstance(value, float) else str(int(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no CEL literal for {value!r}")


def at_defaults(model: type[BaseModel], path: str, fields: Optional[list[str]] = None) -> str:
    """CEL that holds when each field of `path` (a `model`) is absent or has the model's default."""
    default = model()
    parts = []
    for name in fields or list(model.model_fields):
        info = model.model_fields[name]
        sub = f"{path}.{info.alias or name}"
        value = getattr(default, name)
        if value is None:
            parts.append(f"!has({sub})")
        elif isinstance(value, BaseModel):
            parts.append(f"(!has({sub}) || ({at_defaults(type(value), sub)}))")
        elif isinstance(value, (list, dict)) and not value:
            parts.append(f"(!has({sub}) || size({sub}) == 0)")
        else:
            parts.append(f"(!has({sub}) || {sub} == {literal(value, info.annotation is float)})")
    return " && ".join(parts)


def rules_of(schema: dict[str, Any]) -> list[dict[str, str]]:
    return list(schema.get(RULES_KEY) or [])
