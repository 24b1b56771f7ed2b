"""data/pace.py: a fetch ahead spread over its budget (issue 37: a round boundary costs little
more than a steady epoch), on a clock of the test's own, so nothing here depends on the machine's
speed: the waits a paced fetch asks for, a budget set anew, and a release that ends the waiting."""
import threading

import pytest

from grappa.data.pace import Pace


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def test_a_fetch_keeps_to_its_budget_block_by_block():
    c = Clock()
    p = Pace(10.0, clock=c, sleep=c.sleep)
    p.begin(1000)
    p.spend(100)  # a tenth of the bytes at once: waits until a tenth of the budget has passed
    assert c.now == pytest.approx(101.0)
    c.now += 5.0  # the fetch fell behind (the link was busy): the next block does not wait
    p.spend(300)
    assert c.now == pytest.approx(106.0)
    p.spend(600)  # all of it: not before the budget's end
    assert c.now == pytest.approx(110.0)
    assert p.waited == pytest.approx(1.0 + 4.0)
    assert max(c.slept) <= 1.0  # in steps of a second at most, so a new budget is seen soon


def test_a_new_budget_spreads_the_rest_and_more_bytes_join_it():
    c = Clock()
    p = Pace(100.0, clock=c, sleep=c.sleep)
    p.begin(1000)
    p.spend(500)
    assert c.now == pytest.approx(150.0)
    p.retarget(10.0)  # the worker's epochs turned out shorter: the other half in 10 s from now
    p.spend(250)
    assert c.now == pytest.approx(155.0)
    p.begin(500)  # then rows it did not know of (the halo's): they join the rest, by the same deadline
    p.spend(250)  # a quarter of what was left at the new budget: not ahead of it, no wait
    assert c.now == pytest.approx(155.0)
    p.spend(500)
    assert c.now == pytest.approx(160.0)
    p.retarget(None)  # no budget: at once
    p.begin(100)
    p.spend(100)
    assert c.now == pytest.approx(160.0)


def test_expected_bytes_keep_the_first_ones_from_taking_the_whole_budget():
    c = Clock()
    p = Pace(10.0, clock=c, sleep=c.sleep)
    p.begin(200)  # the chunk files
    p.expect(800)  # the halo's rows, of a size known only later
    p.spend(200)  # a fifth of the bytes: a fifth of the budget, not all of it
    assert c.now == pytest.approx(102.0)
    p.settle(300)  # fewer than expected: the rest of the budget for them
    assert p.total == 500
    p.spend(300)
    assert c.now == pytest.approx(110.0)
    q = Pace(10.0, clock=c, sleep=c.sleep)
    q.begin(100)
    q.expect(900)
    q.spend(100)
    q.settle(0)  # none came (a halo fetched before): the fetch is done, never below what it spent
    assert q.total == q.done == 100


def test_release_lets_a_waiting_fetch_go_at_once():
    p = Pace(3600.0)  # the real clock: an hour for the bytes
    p.begin(10)
    done = threading.Event()

    def fetch() -> None:
        p.spend(10)
        done.set()
    t = threading.Thread(target=fetch, daemon=True)
    t.start()
    assert not done.wait(0.3)  # waiting for its budget
    p.release()  # the round needs the data now
    assert done.wait(60)
    assert p.due() == 0.0
