"""status.progress is written by the trainer (grappa.runtime.kube_status) and read by the operator as plain keys:
the keys on both sides, and the operator's schema for them, must agree."""
from __future__ import annotations

import dataclasses

from grappa.runtime.job_progress import Progress as TrainerProgress
from grappa.runtime.kube_status import progress_status
from grappa_operator.api import Progress as StatusProgress
from grappa_operator.metrics import PROGRESS_GAUGES


def _every_field_set() -> TrainerProgress:
    values = {f.name: 1 for f in dataclasses.fields(TrainerProgress)} | {"val_history": [(1, 0.5)]}
    return TrainerProgress(**values)


def test_trainer_writes_only_fields_the_operator_schema_declares():
    written = progress_status(_every_field_set())
    StatusProgress.model_validate({**written, "finished": True})  # extra fields are forbidden
    declared = {f.alias or name for name, f in StatusProgress.model_fields.items()}
    # all but finished (set on the last report) are written on every report where the value is known
    assert set(written) == declared - {"finished"}


def test_keys_the_operator_reads_are_written_by_the_trainer():
    written = set(progress_status(_every_field_set())) | {"finished"}
    read = {key for key, _ in PROGRESS_GAUGES.values()} | {"epoch", "round", "valAcc", "epochsTotal"}
    assert read <= written, read - written
