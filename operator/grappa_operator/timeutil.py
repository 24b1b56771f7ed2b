"""RFC 3339 timestamps as Kubernetes writes them (second precision, UTC, 'Z')."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional


def iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(value: Optional[str]) -> Optional[datetime]:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def now() -> datetime:
    return datetime.now(timezone.utc)
