"""A run whose home is the bucket (storage.s3.runPrefix; issue 37 part 3): runDir local to each
process, the store and the run's results in a real SeaweedFS (tests/s3_server.py). It trains and
evaluates exactly (layer rows passed through the bucket) as the folder job does, leaves its
results in the bucket, a restart with an empty runDir resumes from the bucket's checkpoint, and
an object that is not whole (no sha256 of Grappa's, or other bytes) is never used."""
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

import grappa

from grappa.app.cli import claim_run_dir, main
from grappa.config import ConfigError
from grappa.data.s3 import Bucket, S3Error
from grappa.data.s3.upload import upload_store
from grappa.data.s3.run_home import RunHome
from grappa.data.store.preparation import prepare_store
from grappa.inference.bucket_model import BucketModel
from grappa.models.model_file import read_meta
from grappa.runtime.local_job import LocalJob, rank_modules
from grappa.runtime.zygote import Zygote
from s3_server import s3_bucket, s3_server  # noqa: F401
from test_round_fetch import _KeptZygote
from test_s3_store import creds, job  # noqa: F401

RUN = "runs/csbm-job/"
EXACT = {"training.evalMode": "exact", "training.evalEvery": 1, "training.epochs": 2}


def bucket_run(tmp: Path, server, bucket: str, name: str, **over):
    """A job on the bucket's store whose run lives in the bucket too: every process's runDir
    and storeDir are its own (here: fresh folders under `name`)."""
    cfg = job(tmp / name, server, bucket, storeDir=str(tmp / name / "mirror"), **{**EXACT, **over})
    s3 = cfg.storage.s3.model_copy(update={"run_prefix": RUN})
    return cfg.model_copy(update={"storage": cfg.storage.model_copy(update={"s3": s3})})


@pytest.fixture
def zygote(tmp_path):
    """One zygote every training job here forks its ranks from (torch imported once)."""
    cfg = job(tmp_path, None, None)
    z = Zygote({**os.environ, "OMP_NUM_THREADS": str(LocalJob(cfg).threads)}, rank_modules(cfg),
               tmp_path / "zygote.log")
    yield _KeptZygote(z)
    z.close()


@pytest.fixture
def runs(creds, s3_bucket, tmp_path, zygote):  # noqa: F811
    """The folder job and the bucket job, 2 epochs each, exact evaluation every epoch."""
    folder = job(tmp_path / "folder", creds, None, **EXACT)
    prepare_store(folder, progress=False)
    # one prepared store: the folder job's, uploaded as prepare would (the same manifest)
    upload_store(folder.store_path, Bucket(job(tmp_path, creds, s3_bucket).storage.s3))
    out = {"folder": (folder, LocalJob(folder, progress=False, zygote=zygote).run())}
    cfg = bucket_run(tmp_path, creds, s3_bucket, "s3")
    out["s3"] = (cfg, LocalJob(cfg, progress=False, zygote=zygote).run())
    return out


def test_a_run_in_the_bucket_trains_evaluates_and_predicts_as_the_folder_run_and_resumes_from_it(
        runs, creds, s3_bucket, tmp_path, capsys, zygote):  # noqa: F811
    (cf, rep_f), (cs, rep_s) = runs["folder"], runs["s3"]
    for key in ("loss", "val_acc", "test_acc", "train_acc"):
        assert [h[key] for h in rep_s["history"]] == [h[key] for h in rep_f["history"]], key
    home = RunHome(cs.storage.s3)
    keys = set(home.keys())
    assert {"report.json", "model.pt", "metrics.jsonl", "training.png"} <= keys
    assert sorted(k for k in keys if k.startswith("checkpoints/")) == ["checkpoints/epoch-000002.pt"]
    assert not [k for k in keys if k.startswith("eval-layers/")]  # dropped when the job ended
    assert home.bucket.get("report.json") == (Path(cs.run_dir) / "report.json").read_bytes()
    got = tmp_path / "got-model.pt"
    assert home.fetch("model.pt", got)
    state_f, state_s = read_meta(Path(cf.run_dir) / "model.pt")[1], read_meta(got)[1]
    for name in state_f:
        assert torch.equal(state_f[name], state_s[name]), name
    # the rows went through the bucket: each worker wrote its own folder, never the shared one
    assert not (Path(cs.run_dir) / "eval-layers").exists()

    # predict on the bucket's model, named by its URI: the same predictions as the folder's
    # model, uploaded next to it (manifest last); a rerun does nothing; another job is refused
    # without --start-over, nothing replaced
    assert main(["predict", "--model", str(Path(cf.run_dir) / "model.pt"), "--partitions", "2", "--quiet"]) == 0
    want = (Path(cf.run_dir) / "predictions" / "predictions.npy").read_bytes()
    where = ["--set", f"storage.s3.endpoint={creds.endpoint}", "--set", f"storage.s3.region={creds.region}"]
    local = tmp_path / "local-out"
    assert main(["predict", "--model", home.uri("model.pt"), "--partitions", "2", "--quiet",
                 "--out", str(local), *where]) == 0
    assert home.bucket.get("predictions/predictions.npy") == want == (local / "predictions.npy").read_bytes()
    before = {k: home.bucket.get(k) for k in home.keys("predictions/")}
    assert main(["predict", "--model", home.uri("model.pt"), "--quiet", "--partitions", "2", *where]) == 0
    got = grappa.predict(home.uri("model.pt"), out=tmp_path / "api-out", workers=2, progress=False,
                         set={"storage.s3.endpoint": creds.endpoint, "storage.s3.region": creds.region})
    assert (tmp_path / "api-out" / "predictions.npy").read_bytes() == want  # the bucket's, downloaded
    assert got.manifest["job"] == json.loads(before["predictions/manifest.json"])["job"]
    assert main(["predict", "--model", home.uri("model.pt"), "--quiet", "--partitions", "2", "--scores",
                 *where]) == 2
    assert "another predict job" in capsys.readouterr().err
    assert {k: home.bucket.get(k) for k in home.keys("predictions/")} == before
    home.delete(list(before))

    # a new pod: an empty runDir and storeDir; 3 epochs resume from the bucket's epoch 2
    longer = bucket_run(tmp_path, creds, s3_bucket, "restarted", **{"training.epochs": 3})
    rep_r = LocalJob(longer, progress=False, zygote=zygote).run()
    assert [h["epoch"] for h in rep_r["history"]] == [1, 2, 3]
    assert rep_r["history"][:2] == rep_s["history"]
    assert rep_r["resumed_at"] == [2]
    lines = [json.loads(x) for x in home.bucket.get("metrics.jsonl").decode().splitlines()]
    assert [x.get("epoch") for x in lines if "event" not in x] == [1, 2, 3]
    local = sorted(p.name for p in (Path(longer.run_dir) / "checkpoints").iterdir())
    assert sorted(k for k in home.keys() if k.startswith("checkpoints/")) == [f"checkpoints/{n}" for n in local]
    assert local[-1] == "epoch-000003.pt"
    assert json.loads(home.bucket.get("report.json"))["epochs"] == 3

    # another machine's empty runDir judges the bucket's run as a local one: other settings are
    # refused naming them; --start-over deletes the run's objects, never the store's
    other = bucket_run(tmp_path, creds, s3_bucket, "other", **{"training.epochs": 3, "model.hidden": 32})
    with pytest.raises(ConfigError, match=r"(?s)other settings.*model\.hidden: 16 in the run, 32 now"):
        claim_run_dir(other)
    again = bucket_run(tmp_path, creds, s3_bucket, "again", **{"training.epochs": 3})
    assert claim_run_dir(again)["epochs"] == 3  # finished: nothing to train
    claim_run_dir(other, fresh=True)
    assert home.keys() == [] and Bucket(cs.storage.s3).exists("manifest.json")


def test_an_object_that_is_not_whole_is_never_used(creds, s3_bucket, tmp_path):  # noqa: F811
    cfg = bucket_run(tmp_path, creds, s3_bucket, "a")
    home = RunHome(cfg.storage.s3)
    good = tmp_path / "epoch-000002.pt"
    good.write_bytes(b"complete checkpoint" * 100)
    home.put_checkpoint(good, keep=2)
    # a newer name holding half a file, put by another client (no sha256 of ours), and one whose
    # bytes are not those its sha256 was recorded for
    home.bucket.client.put_object(Bucket=home.bucket.name, Key=home.bucket.key("checkpoints/epoch-000004.pt"),
                                  Body=good.read_bytes()[:50])
    home.bucket.client.put_object(Bucket=home.bucket.name, Key=home.bucket.key("checkpoints/epoch-000003.pt"),
                                  Body=b"torn", Metadata={"sha256": "0" * 64})
    folder = tmp_path / "ck"
    assert home.latest_checkpoint(folder) == folder / "epoch-000002.pt"
    assert (folder / "epoch-000002.pt").read_bytes() == good.read_bytes()
    assert sorted(p.name for p in folder.iterdir()) == ["epoch-000002.pt"]  # no half file left
    with pytest.raises(S3Error, match="not a complete file"):
        home.fetch("checkpoints/epoch-000003.pt", tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()
    assert not home.fetch("model.pt", tmp_path / "model.pt")  # absent: False, not an error
    shutil.rmtree(folder)
    # a model named by its URI: a torn one is refused, nothing left behind; an ambiguous or
    # malformed name is refused naming the fix
    home.bucket.client.put_object(Bucket=home.bucket.name, Key=home.bucket.key("model.pt"), Body=b"half",
                                  Metadata={"sha256": "1" * 64})
    s3 = cfg.storage.s3.model_copy(update={"run_prefix": None})
    model = BucketModel(home.uri("model.pt"), s3, "predict")
    assert model.home.where == home.where and model.out == "predictions/"
    with pytest.raises(S3Error, match="not a complete file"):
        model.download(tmp_path / "m")
    assert not (tmp_path / "m").exists() or not list((tmp_path / "m").iterdir())
    with pytest.raises(ConfigError, match="drop --set storage.s3.bucket"):
        BucketModel(f"s3://other-bucket/{RUN}model.pt", s3, "predict")
    with pytest.raises(ConfigError, match=r"s3://BUCKET/KEY\.pt"):
        BucketModel(f"s3://{s3_bucket}/{RUN}", s3, "evaluate")


def test_run_prefix_must_not_hold_the_store_nor_a_retexo_run(tmp_path):
    from grappa.config import TrainConfig
    with pytest.raises(ValueError, match=r"storage\.s3\.runPrefix 'graphs/' holds the store's prefix"):
        TrainConfig.model_validate({"storage": {"fetch": "on-demand", "s3": {
            "bucket": "graphs", "prefix": "graphs/cora/", "runPrefix": "graphs/"}}, "runDir": str(tmp_path)})
    with pytest.raises(ValueError, match=r"strategy retexo keeps each worker's stage rows.*remove storage\.s3\.runPrefix"):
        TrainConfig.model_validate({"strategy": "retexo", "training": {"mode": "full-graph"}, "storage": {
            "s3": {"bucket": "graphs", "runPrefix": "runs/a/"}}, "runDir": str(tmp_path)})
