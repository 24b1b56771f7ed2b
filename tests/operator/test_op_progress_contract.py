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
    read = {key for key, _ in PROGRESS_GAUGES.values()} | {"epoch", "round", "valAcc", "valMrr", "epochsTotal"}
    assert read <= written, read - written


def test_a_link_jobs_result_holds_its_ranking_metrics_in_the_schema():
    """The last report of a link-prediction job: the best epoch's test MRR, Hits@K and AUC in
    status.result, keys the operator's schema declares (and status.progress.testMrr for the column)."""
    from grappa.runtime.kube_status import JobStatus
    from grappa_operator.api import Result

    class Api:
        def patch_namespaced_custom_object_status(self, *args):
            self.body = args[-1]

    api = Api()
    final = {"test_mrr": 0.5, "test_hits@10": 0.6, "test_hits@50": 0.7, "test_hits@100": 0.8, "test_auc": 0.9}
    JobStatus("j", "ns", api=api).report(TrainerProgress(val_mrr=0.4, test_mrr=0.5, best_val=0.4, best_epoch=3,
                                                          final_metrics=final), final=True)
    status = api.body["status"]
    assert status["progress"]["testMrr"] == 0.5 and status["progress"]["valMrr"] == 0.4
    result = Result.model_validate(status["result"])
    assert (result.test_mrr, result.test_hits10, result.test_hits50, result.test_hits100, result.test_auc) == \
        (0.5, 0.6, 0.7, 0.8, 0.9)
