"""docs/troubleshooting.md and docs/metrics.md say what the code does: every reason the operator
sets is in the reasons table, every state condition is named, the deadline's clock is the one
status.py reads, and the dashboards' template variables are documented, not denied."""
from __future__ import annotations

import json
import re
from pathlib import Path

from grappa_operator import status

REPO = Path(__file__).resolve().parents[2]
SOURCES = "\n".join(p.read_text() for p in sorted((REPO / "operator" / "grappa_operator").glob("*.py")))
TROUBLE = (REPO / "docs" / "troubleshooting.md").read_text()
METRICS = (REPO / "docs" / "metrics.md").read_text()

# Where the operator names a reason for a failure, a wait or a Warning: the state machine's
# _fail (t.fail in its transitions)/_restart/_wait, SpecError (spec and refusal checks), Refusal
# (refused creates), REASON constants (imagepull.py, gpu.py).
REASON_PATTERNS = (r'_fail\(plan, "(\w+)"', r't\.fail\("(\w+)"', r'_restart\((?:t\.)?plan, spec, "(\w+)"',
                   r'_wait\(plan, wl, "(\w+)"',
                   r'else "(\w+)",\n\s+f"Kueue evicted', r'SpecError\(\s*"(\w+)"', r'Refusal\("(\w+)"',
                   r'^REASON = "(\w+)"')


def operator_reasons() -> set[str]:
    found: set[str] = set()
    for pattern in REASON_PATTERNS:
        found |= set(re.findall(pattern, SOURCES, re.M))
    return found


def reasons_table() -> str:
    return TROUBLE.split("## Reasons the operator sets", 1)[1].split("\n## ", 1)[0]


def test_every_reason_is_in_the_table():
    found = operator_reasons()
    assert {"ImagePullFailed", "GPUNotUsed", "Evicted", "KueueMissing", "DeadlineExceeded"} <= found, found
    missing = sorted(r for r in found if f"`{r}`" not in reasons_table())
    assert not missing, f"reasons the operator sets but docs/troubleshooting.md does not explain: {missing}"


def test_every_state_condition_is_named():
    line = next(ln for ln in TROUBLE.splitlines() if "state condition (" in ln)
    named = re.search(r"state condition \(([^)]*)\)", line).group(1)
    assert [c.strip() for c in named.split(",")] == list(status.STATE_CONDITIONS), line


def test_the_deadline_clock_is_active_since():
    assert re.search(r'parse\((t\.)?st\.get\("activeSince"\)\)', SOURCES)  # what status.py times the deadline from
    row = next(ln for ln in reasons_table().splitlines() if ln.startswith("| `DeadlineExceeded`"))
    assert "status.activeSince" in row and "startTime" not in row, row


def test_metrics_doc_names_the_dashboards_variables():
    used = set()
    for p in (REPO / "charts" / "grappa" / "dashboards").glob("*.json"):
        used |= set(re.findall(r"\$(\w+)", json.dumps(json.loads(p.read_text()))))
    assert {"namespace", "job"} <= used
    assert "no template variables" not in METRICS
    for var in sorted(used):
        assert f"`${var}`" in METRICS, f"docs/metrics.md does not explain the dashboards' ${var}"


def test_each_reason_has_one_row():
    """A reason listed twice gets two different fixes (issue 35: PodDisrupted, WaitingForAdmission
    and Preempted / Evicted were)."""
    rows = [ln.split("|")[1].strip() for ln in reasons_table().splitlines() if ln.startswith("| `")]
    twice = sorted({r for r in rows if rows.count(r) > 1})
    assert not twice, f"reasons with more than one row in docs/troubleshooting.md: {twice}"
