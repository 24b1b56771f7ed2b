"""The trainer's only Kubernetes code: progress into the job's status, rounds out of it.

Used by the aggregator when GRAPPA_JOB_NAME is set. Its ServiceAccount may only get and patch the
`grappajobs/status` subresource of its own job; the operator owns `status.rounds`.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import time
from typing import Any, Callable

from grappa.runtime.job_progress import Progress
from grappa.strategies.grappa.rounds import RoundDecision

GROUP, VERSION, PLURAL = "grappa.dev", "v1alpha1", "grappajobs"
log = logging.getLogger("grappa.kube")


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def progress_status(p: Progress) -> dict[str, Any]:
    doc = {
        "epoch": p.epoch, "epochsTotal": p.epochs_total, "round": p.round, "loss": p.loss,
        "trainAcc": p.train_acc, "valAcc": p.val_acc, "testAcc": p.test_acc,
        "valMrr": p.val_mrr, "testMrr": p.test_mrr, "testHits50": p.test_hits50, "testAuc": p.test_auc,
        "bestVal": p.best_val,
        "bestEpoch": p.best_epoch, "epochSeconds": p.epoch_seconds,
        "trainBytesPerEpoch": p.train_bytes_per_epoch, "evalBytesPerEpoch": p.eval_bytes_per_epoch,
        "etaSeconds": p.eta_seconds, "updatedAt": _now(),
    }
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in doc.items() if v is not None}


class JobStatus:
    """ProgressSink and RoundSource over one GrappaJob's status subresource."""

    def __init__(self, name: str, namespace: str, api=None, retries: int = 5):
        if api is None:
            from kubernetes import client, config  # imported here: only pods need it
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            api = client.CustomObjectsApi()
        self.api, self.name, self.namespace, self.retries = api, name, namespace, retries

    @classmethod
    def from_env(cls) -> "JobStatus":
        return cls(os.environ["GRAPPA_JOB_NAME"], os.environ.get("GRAPPA_JOB_NAMESPACE", "default"))

    def _call(self, fn: Callable, *args) -> Any:
        delay = 0.5
        for attempt in range(self.retries):
            try:
                return fn(GROUP, VERSION, self.namespace, PLURAL, self.name, *args)
            except Exception as err:  # API hiccups must not kill a training run
                if attempt == self.retries - 1:
                    raise
                log.warning("status call failed (%s), retrying in %.1fs", err, delay)
                time.sleep(delay)
                delay *= 2

    def report(self, progress: Progress, final: bool = False) -> None:
        status: dict[str, Any] = {"progress": progress_status(progress)}
        if final:
            status["progress"]["finished"] = True
            status["result"] = {"testAcc": progress.test_acc, "bestVal": progress.best_val,
                                "bestEpoch": progress.best_epoch}
            m = progress.final_metrics  # link prediction: the best epoch's ranking metrics
            for key, name in (("test_mrr", "testMrr"), ("test_hits@10", "testHits10"),
                              ("test_hits@50", "testHits50"), ("test_hits@100", "testHits100"),
                              ("test_auc", "testAuc")):
                if m.get(key) is not None:
                    status["result"][name] = round(float(m[key]), 6)
        try:
            self._call(self.api.patch_namespaced_custom_object_status, {"status": status})
        except Exception as err:
            if final:
                raise
            log.error("could not write progress to the job status: %s", err)

    def decide(self, next_epoch: int, progress: Progress, current: RoundDecision) -> RoundDecision:
        try:
            obj = self._call(self.api.get_namespaced_custom_object_status)
        except Exception as err:
            log.error("could not read rounds from the job status, keeping round %d: %s", current.round, err)
            return current
        rounds = (obj.get("status") or {}).get("rounds") or {}
        t = rounds.get("current")
        if t is None or int(t) <= current.round:
            return current
        if next_epoch < int(rounds.get("effectiveEpoch", next_epoch)):
            return current  # decided early (we raced the operator): wait for its boundary
        # Late is possible (the operator was slow): apply now; progress.round reports it.
        return RoundDecision(int(t), int(rounds.get("pairingSeed", 0)), next_epoch)
