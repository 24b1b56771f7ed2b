"""A worker evaluates only on the aggregator's word (protocol.CMD_EVAL), after the epoch's end."""
from types import SimpleNamespace

import pytest
import torch

from grappa.runtime import protocol as proto
from grappa.runtime.worker import Worker


class Scripted:
    """A worker's side of the control channel, its messages given in order; every call logged."""

    def __init__(self, controls: list[torch.Tensor]):
        self.controls, self.calls = list(controls), []
        self.link = SimpleNamespace(rank=3, recv=self.recv)
        self.metrics = None

    def recv(self, buf, src, channel):
        self.calls.append(("recv", int(self.controls[0][0])))
        return self.controls.pop(0)

    def run_epoch(self, epoch, steps, wbar):
        self.calls.append(("train", epoch))

    def send_epoch_report(self):
        self.calls.append(("report",))

    def evaluate(self):
        self.calls.append(("evaluate",))

    recv_control = Worker.recv_control
    await_eval = Worker.await_eval


def test_evaluation_waits_for_the_word_after_the_report():
    w = Scripted([proto.control(proto.CMD_EVAL, 4)])
    Worker.epoch_command(w, 4, 10, 1.0, True)
    assert w.calls == [("train", 4), ("report",), ("recv", proto.CMD_EVAL), ("evaluate",)]


def test_no_word_awaited_without_evaluation():
    w = Scripted([])
    Worker.epoch_command(w, 2, 10, 1.0, False)
    assert w.calls == [("train", 2), ("report",)]


@pytest.mark.parametrize("ctrl", [proto.control(proto.CMD_EPOCH, 4), proto.control(proto.CMD_EVAL, 3)])
def test_another_command_is_an_error_naming_the_rank(ctrl):
    w = Scripted([ctrl])
    with pytest.raises(RuntimeError, match=r"rank 3: expected the aggregator's evaluate command for epoch 5"):
        Worker.epoch_command(w, 4, 10, 1.0, True)
    assert ("evaluate",) not in w.calls


def test_quiet_seconds_from_the_environment(monkeypatch):
    monkeypatch.delenv(proto.EVAL_QUIET, raising=False)
    assert proto.eval_quiet_seconds() == 0.0
    monkeypatch.setenv(proto.EVAL_QUIET, "0.2")
    assert proto.eval_quiet_seconds() == pytest.approx(0.2)
    for bad in ("soon", "-1", "nan", "600"):
        monkeypatch.setenv(proto.EVAL_QUIET, bad)
        with pytest.raises(ValueError, match=f"{proto.EVAL_QUIET}='{bad}': give seconds from 0 to 60"):
            proto.eval_quiet_seconds()
