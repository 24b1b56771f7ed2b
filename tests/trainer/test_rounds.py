from grappa.config import PlateauConfig, RoundsConfig
from grappa.runtime.job_progress import Progress
from grappa.strategies.grappa.rounds import (
    RoundDecision,
    ScheduleRounds,
    plateaued,
    round_seed,
    variable_chunk,
)
from grappa.data.store.assign import base_chunks


def test_sweep_visits_every_other_chunk_once_per_p_minus_1_rounds():
    P = 5
    for r in range(P):
        seen = [variable_chunk(r, P, P, RoundDecision(t, 0, 0), "sweep") for t in range(P - 1)]
        assert sorted(seen) == sorted(set(range(P)) - {r})
        assert seen[0] == (r + 1) % P  # the reference's first pairing


def test_pairings_give_distinct_variable_chunks_when_k_equals_p():
    P = 6
    for pairing in ("sweep", "random"):
        for t in range(8):
            d = RoundDecision(t, round_seed(3, t), 0)
            chosen = [variable_chunk(r, P, P, d, pairing) for r in range(P)]
            assert len(set(chosen)) == P and all(c != r for r, c in enumerate(chosen))


def test_random_pairing_is_seeded():
    a = [variable_chunk(0, 8, 8, RoundDecision(t, round_seed(1, t), 0), "random") for t in range(20)]
    b = [variable_chunk(0, 8, 8, RoundDecision(t, round_seed(1, t), 0), "random") for t in range(20)]
    c = [variable_chunk(0, 8, 8, RoundDecision(t, round_seed(2, t), 0), "random") for t in range(20)]
    assert a == b and a != c


def test_single_worker_has_no_variable_chunk_and_extra_chunks_are_shared_out():
    assert variable_chunk(0, 1, 1, RoundDecision(0, 0, 0), "sweep") is None
    assert base_chunks(1, 2, 5) == [1, 3]
    assert variable_chunk(1, 2, 5, RoundDecision(0, 0, 0), "sweep") not in (1, 3)


def test_schedule_every_r_epochs():
    s = ScheduleRounds(RoundsConfig(every=3), partition_seed=0)
    d = RoundDecision(0, round_seed(0, 0), 0)
    rounds = []
    for epoch in range(10):
        d = s.decide(epoch, Progress(), d)
        rounds.append(d.round)
    assert rounds == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    assert s.decide(0, Progress(), RoundDecision(0, 1, 0)) == RoundDecision(0, 1, 0)


def test_fixed_partitions_never_move():
    s = ScheduleRounds(RoundsConfig(every=0), partition_seed=0)
    d = RoundDecision(0, 0, 0)
    for epoch in range(50):
        d = s.decide(epoch, Progress(), d)
    assert d.round == 0


def test_plateau_trigger():
    hist = [(1, 0.5), (2, 0.6), (3, 0.6), (4, 0.6)]
    assert plateaued(hist, 0, patience=2, min_delta=0.001)
    assert not plateaued(hist, 0, patience=3, min_delta=0.001)
    assert not plateaued(hist, 3, patience=2, min_delta=0.001)  # only evaluations of this round count
    s = ScheduleRounds(RoundsConfig(every=0, plateau=PlateauConfig(patience=2)), 0)
    d = s.decide(5, Progress(val_history=hist), RoundDecision(0, 0, 0))
    assert d.round == 1 and d.effective_epoch == 5
