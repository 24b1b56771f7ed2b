"""A failed trainer's `grappa: error:` text is the job's status message, without the progress bars
of a log tail (issue 28, item 4)."""
from __future__ import annotations

from grappa_operator import settings as s
from grappa_operator.desired import JobRef
from grappa_operator.status import PodObs, error_line, step

from gj_testlib import T0, later, make_spec

JOB = JobRef("job", "ns", "0123456789abcdef")
LINE = "grappa: error: /grappa/data/g/edges.npy edge 137: destination id 50 is outside [0, 50) (the graph has 50 nodes)"
BARS = ("prepare: read edges:   0%|          | 0.00/200 [00:00<?, ?edge/s]\r"
        "prepare: read edges:  50%|#####     | 100/200 [00:00<00:00, 12.1kedge/s]")


def _failed_prepare(message: str) -> PodObs:
    return PodObs.from_pod({
        "metadata": {"name": "job-prepare", "labels": {s.LABEL_ROLE: s.ROLE_PREPARE, s.LABEL_ATTEMPT: "0"}},
        "status": {"phase": "Failed", "containerStatuses": [
            {"name": "grappa", "state": {"terminated": {"exitCode": 3, "reason": "Error", "message": message}}}]}})


def test_the_error_line_is_taken_from_a_log_tail():
    # FallbackToLogsOnError: an older trainer image wrote no termination message
    assert _failed_prepare(f"{BARS}\n{LINE}\n").message == LINE
    assert _failed_prepare(f"{BARS}{LINE}\n").message == LINE  # an unfinished bar shares the line
    assert _failed_prepare(LINE).message == LINE  # what the trainer writes itself
    multi = "grappa: error: invalid config:\n  training.fanouts: 2 entries but model.layers is 3"
    assert error_line(f"{BARS}\n{multi}\n") == multi
    assert error_line("OOMKilled") == "OOMKilled"


def test_cannot_run_message_is_exactly_the_error_line():
    spec = make_spec()
    st = step(JOB, spec, None, [], T0).status
    plan = step(JOB, spec, st, [_failed_prepare(f"{BARS}\n{LINE}\n")], later(5))
    assert plan.status["reason"] == "CannotRun" and plan.status["message"] == LINE
    assert [(e.type, e.reason, e.message) for e in plan.events] == [
        ("Warning", "CannotRun", f"pod job-prepare exited with code 3: {LINE}")]
