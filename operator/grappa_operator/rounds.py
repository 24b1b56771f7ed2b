"""Operator-side repartition rounds: when round t+1 starts, as a pure function of spec and status.

Contract (docs/architecture.md): the operator owns `status.rounds`; the aggregator reports the
round it applies in `status.progress.round`. Restart safety comes from two rules:

* a new round is decided only when the aggregator applies the latest decided one
  (`progress.round == rounds.current`), so a decision never stacks on an unapplied one;
* the decision is written to status *before* any event, metric or pod acts on it, and the
  function is deterministic: re-running it on the status it produced returns "no decision", and
  re-running it after a lost write decides the same round with the same pairing seed.
"""
from __future__ import annotations

import copy
from datetime import datetime
from typing import Any, Optional

from grappa.strategies.grappa.rounds import RoundDecision, plateaued, round_seed

from .api import GrappaJobSpec
from .timeutil import iso

MAX_VAL_HISTORY = 256


def initial(spec: GrappaJobSpec, now: datetime) -> dict[str, Any]:
    """Round 0 applies before any decision (seed from grappa.strategies.grappa.rounds.round_seed, like a local run)."""
    seed = round_seed(spec.grappa.partition_seed, 0)
    return {
        "current": 0, "pairingSeed": seed, "effectiveEpoch": 0,
        "history": [{"round": 0, "pairingSeed": seed, "effectiveEpoch": 0, "reason": "initial",
                     "decidedAt": iso(now)}],
        "valHistory": [],
    }


def decide(spec: GrappaJobSpec, rounds: Optional[dict[str, Any]], progress: Optional[dict[str, Any]],
           now: datetime) -> tuple[dict[str, Any], Optional[RoundDecision], Optional[str]]:
    """(new status.rounds, the decision for round t+1 or None, its reason: 'every' | 'plateau')."""
    rs = copy.deepcopy(rounds) if rounds else initial(spec, now)
    if spec.strategy != "grappa":
        rs["note"] = (f"repartition rounds apply to strategy grappa only; strategy {spec.strategy} "
                      "keeps fixed partitions")
        return rs, None, None
    cfg = spec.grappa.rounds
    if not progress or progress.get("finished"):
        return rs, None, None
    epoch, applied = progress.get("epoch"), progress.get("round")
    if not isinstance(epoch, int) or not isinstance(applied, int) or applied != rs["current"]:
        return rs, None, None  # nothing reported yet, or the aggregator has not applied round t
    eff = int(rs["effectiveEpoch"])

    if cfg.plateau is not None:
        val = progress.get("valAcc") if progress.get("valAcc") is not None else progress.get("valMrr")
        hist = rs.setdefault("valHistory", [])
        fresh = not hist or hist[-1][0] < epoch
        if isinstance(val, (int, float)) and epoch >= eff and fresh \
                and epoch % spec.training.eval_every == 0:
            hist.append([epoch, float(val)])
            del hist[:-MAX_VAL_HISTORY]

    total = progress.get("epochsTotal") or spec.training.epochs
    next_epoch = epoch + 1  # the aggregator is past boundary `epoch`; the next one it reads is +1
    if next_epoch >= total:
        return rs, None, None
    reason = None
    if cfg.every > 0 and next_epoch - eff >= cfg.every:
        reason = "every"
    elif cfg.plateau is not None and plateaued(
            [tuple(h) for h in rs.get("valHistory", [])], eff, cfg.plateau.patience, cfg.plateau.min_delta):
        reason = "plateau"
    if reason is None:
        return rs, None, None
    t = int(rs["current"]) + 1
    decision = RoundDecision(t, round_seed(spec.grappa.partition_seed, t), next_epoch)
    rs.update(current=t, pairingSeed=decision.pairing_seed, effectiveEpoch=next_epoch, valHistory=[])
    rs.setdefault("history", []).append({
        "round": t, "pairingSeed": decision.pairing_seed, "effectiveEpoch": next_epoch,
        "reason": reason, "decidedAt": iso(now)})
    return rs, decision, reason
