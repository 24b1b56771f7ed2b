"""Operator-decided repartition rounds: cadence, plateau, and restart safety."""
from __future__ import annotations

from grappa.strategies.grappa.rounds import round_seed
from grappa_operator import rounds
from grappa_operator.status import step

from gj_testlib import group, later, make_spec
from gj_testlib import running_status


def progress(epoch, rnd, **kw):
    return {"epoch": epoch, "round": rnd, "epochsTotal": 30, **kw}


def test_every_n_epochs(t0):
    spec = make_spec(grappa={"rounds": {"every": 10}, "partitionSeed": 7})
    rs = rounds.initial(spec, t0)
    assert rs["pairingSeed"] == round_seed(7, 0)
    for e in range(9):
        rs, d, _ = rounds.decide(spec, rs, progress(e, 0), t0)
        assert d is None
    rs, d, reason = rounds.decide(spec, rs, progress(9, 0), t0)
    assert (d.round, d.effective_epoch, d.pairing_seed, reason) == (1, 10, round_seed(7, 1), "every")
    assert rs["current"] == 1 and rs["effectiveEpoch"] == 10 and [h["round"] for h in rs["history"]] == [0, 1]


def test_restart_safe_no_repeat_no_skip(t0):
    """Re-running the decision on the status it produced never makes another round."""
    spec = make_spec(grappa={"rounds": {"every": 5}})
    rs, d, _ = rounds.decide(spec, rounds.initial(spec, t0), progress(4, 0), t0)
    assert d.round == 1
    # operator restarts: same durable status, aggregator has not applied round 1 yet
    for e in (4, 5, 6, 12):
        rs2, d2, _ = rounds.decide(spec, rs, progress(e, 0), later(100))
        assert d2 is None and rs2 == rs
    # the aggregator applies round 1 at epoch 5; the next decision is round 2, never 3
    rs3, d3, _ = rounds.decide(spec, rs, progress(9, 1), later(200))
    assert d3.round == 2 and d3.effective_epoch == 10
    # a lost write re-decides the same round with the same seed
    again, d4, _ = rounds.decide(spec, rs, progress(9, 1), later(300))
    assert (d4.round, d4.pairing_seed) == (d3.round, d3.pairing_seed)


def test_no_round_after_last_epoch_or_when_fixed(t0):
    spec = make_spec(grappa={"rounds": {"every": 5}})
    rs = rounds.initial(spec, t0)
    assert rounds.decide(spec, rs, progress(29, 0), t0)[1] is None
    assert rounds.decide(spec, rs, progress(20, 0, finished=True), t0)[1] is None
    fixed = make_spec(grappa={"rounds": {"every": 0}})
    assert rounds.decide(fixed, rounds.initial(fixed, t0), progress(20, 0), t0)[1] is None
    assert rounds.decide(spec, rs, None, t0)[1] is None
    assert rounds.decide(spec, rs, {"epoch": 9}, t0)[1] is None


def test_plateau_trigger(t0):
    spec = make_spec(grappa={"rounds": {"every": 0, "plateau": {"patience": 2, "minDelta": 0.01}}})
    rs = rounds.initial(spec, t0)
    vals = [0.5, 0.6, 0.7, 0.7, 0.7]
    decisions = []
    for e, v in enumerate(vals):
        rs, d, reason = rounds.decide(spec, rs, progress(e, 0, valAcc=v), t0)
        decisions.append((d, reason))
    assert all(d is None for d, _ in decisions[:4])
    d, reason = decisions[4]
    assert d.round == 1 and reason == "plateau" and rs["valHistory"] == []
    # the same progress seen twice is not a second evaluation
    rs2, d2, _ = rounds.decide(spec, rs, progress(4, 0, valAcc=0.7), t0)
    assert d2 is None


def test_plateau_of_a_link_job_reads_its_validation_mrr(t0):
    spec = make_spec(task="link-prediction",
                     grappa={"rounds": {"every": 0, "plateau": {"patience": 2, "minDelta": 0.01}}})
    rs = rounds.initial(spec, t0)
    decisions = []
    for e, v in enumerate([0.2, 0.3, 0.3, 0.3]):
        rs, d, reason = rounds.decide(spec, rs, progress(e, 0, valMrr=v), t0)
        decisions.append((d, reason))
    assert all(d is None for d, _ in decisions[:3]) and decisions[3][1] == "plateau"


def test_state_machine_decides_and_emits_event(job, t0):
    spec = make_spec(grappa={"rounds": {"every": 3}})
    st = running_status(rounds=rounds.initial(spec, t0), progress=progress(2, 0))
    plan = step(job, spec, st, group(), later(1))
    assert plan.status["rounds"]["current"] == 1 and plan.round_reason == "every"
    assert [e.reason for e in plan.events] == ["RoundDecided"]
    replay = step(job, spec, plan.status, group(), later(2))  # operator restarted
    assert replay.status["rounds"] == plan.status["rounds"] and replay.events == []


def test_full_run_every_round_exactly_once(t0):
    """Simulated aggregator that applies decisions at the next boundary; operator restarts often."""
    spec = make_spec(grappa={"rounds": {"every": 4}})
    rs, applied, seen = rounds.initial(spec, t0), 0, []
    for epoch in range(30):
        if rs["current"] != applied:
            applied = rs["current"]
            seen.append((applied, epoch))
        for _ in range(2):  # each progress observed twice (restart / duplicate events)
            rs, _, _ = rounds.decide(spec, rs, progress(epoch, applied), t0)
    assert [r for r, _ in seen] == list(range(1, len(seen) + 1))
    assert [e for _, e in seen] == [4, 8, 12, 16, 20, 24, 28]
