"""Checkpoint writes: atomic (a failed write never replaces or shadows a good checkpoint), and the
last epoch's state kept for a SIGTERM."""
import errno

import pytest
import torch

from grappa.runtime import checkpoint
from grappa.runtime.checkpoint import LastEpoch, latest_checkpoint, load_checkpoint, save_checkpoint
from grappa.util import files


class DiskFullHalfway:
    """A file whose write puts down the first half of the bytes, then fails (ENOSPC)."""

    def __init__(self, path, mode):
        self.f = open(path, mode)

    def write(self, data):
        self.f.write(data[:len(data) // 2])
        self.f.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def __getattr__(self, name):
        return getattr(self.f, name)


@pytest.mark.parametrize("epoch", [4, 6], ids=["same-epoch", "newer-epoch"])
def test_a_write_failing_halfway_leaves_the_previous_checkpoint(tmp_path, monkeypatch, epoch):
    good = save_checkpoint(tmp_path, 4, {"epoch": 4, "w": torch.arange(1000.0)})
    monkeypatch.setattr(files, "open", DiskFullHalfway, raising=False)  # atomic_write's open
    with pytest.raises(OSError):
        save_checkpoint(tmp_path, epoch, {"epoch": epoch, "w": torch.zeros(1000)})
    monkeypatch.undo()
    assert latest_checkpoint(tmp_path) == good  # a torn newer file would shadow it
    ck = load_checkpoint(good)
    assert ck["epoch"] == 4 and torch.equal(ck["w"], torch.arange(1000.0))
    assert [p.name for p in checkpoint.checkpoint_dir(tmp_path).iterdir()] == [good.name]  # no temp left


def test_only_the_newest_checkpoints_are_kept(tmp_path):
    for e in (1, 2, 3):
        save_checkpoint(tmp_path, e, {"epoch": e})
    assert sorted(p.name for p in checkpoint.checkpoint_dir(tmp_path).iterdir()) == [
        "epoch-000002.pt", "epoch-000003.pt"]


def test_last_epoch_is_written_once_and_only_when_not_on_disk(tmp_path):
    last = LastEpoch(tmp_path)
    assert last.save() is None  # no epoch completed: nothing to write
    w = torch.ones(3)
    last.record(2, 10, {"epoch": 2, "w": w}, write=False)
    w += 1  # the live model moves on; the kept state must not
    assert latest_checkpoint(tmp_path) is None
    s = last.save()
    assert (s.epoch, s.step, s.path) == (2, 10, latest_checkpoint(tmp_path))
    assert torch.equal(load_checkpoint(s.path)["w"], torch.ones(3))
    s.path.unlink()
    assert last.save().path == s.path and not s.path.exists()  # written already: not again

    resumed = LastEpoch(tmp_path)
    resumed.on_disk(5, 20, tmp_path / "elsewhere.pt")
    assert resumed.save().path == tmp_path / "elsewhere.pt"
    assert latest_checkpoint(tmp_path) is None
