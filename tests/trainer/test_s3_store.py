"""The chunk store in S3-compatible object storage (issue 37, part 3), against a real SeaweedFS
S3 gateway on 127.0.0.1 (tests/s3_server.py): a prepared graph round-trips exactly, uploaded
manifest last; a worker's fetch from the bucket reads the bytes the folder store's fetch reads
(plus the gaps it counts apart) and builds the same local graph; a job on the bucket trains
the same parameters as on a folder; a wrong endpoint, bucket or credential fails within seconds
naming the storage.s3 field, nothing written."""
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from grappa.app.cli import main
from grappa.config import TrainConfig
from grappa.data.errors import ChunkStoreError
from grappa.data.local_copy import LocalCopy
from grappa.data.local_graph import build_local_graph
from grappa.data.s3 import Bucket, S3Error
from grappa.data.s3 import packed
from grappa.data.s3 import upload as upload_module
from grappa.data.store.chunk_store import ChunkStore, open_store
from grappa.data.s3.source import HEADER_PROBE
from grappa.data.store.manifest import CHUNK_FILES, MANIFEST, chunk_dir
from grappa.data.store.preparation import prepare_store
from grappa.models.model_file import read_meta
from grappa.runtime.local_job import LocalJob
from s3_server import s3_bucket, s3_server  # noqa: F401
from test_round_fetch import K, P, StoreArrays, assert_same_graph, owned_sets


def job(tmp: Path, server, bucket: str | None, **over) -> TrainConfig:
    d = {"partitions": P, "dataset": {"name": "csbm", "synthetic": {"numNodes": 600}},
         "model": {"hidden": 16}, "training": {"epochs": 3, "mode": "mini-batch", "batchSize": 60,
                                               "evalEvery": 3},
         "grappa": {"chunks": K, "rounds": {"every": 1}}, "storage": {"fetch": "on-demand"},
         "runDir": str(tmp / "run"), "storeDir": str(tmp / "store")}
    if bucket is not None:
        d["storage"]["s3"] = {"endpoint": server.endpoint, "bucket": bucket, "prefix": "graphs/csbm/",
                              "region": server.region}
    for k, v in over.items():
        node = d
        *parents, leaf = k.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = v
    return TrainConfig.model_validate(d)


@pytest.fixture
def creds(s3_server, monkeypatch):  # noqa: F811
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(var, raising=False)
    return s3_server


def objects(bucket: Bucket) -> dict[str, bytes]:
    return {k: bucket.get(k) for k in bucket.keys()}


def store_objects(bucket: Bucket) -> dict[str, bytes]:
    """The bucket's copy of the store's own files, each packed one checked to unpack to it exactly."""
    got = objects(bucket)
    index = json.loads(got.pop(packed.INDEX))
    assert index["codec"] == packed.CODEC
    for rel, size in index["files"].items():
        blob = got.pop(rel + packed.KEY_SUFFIX)
        assert len(blob) == size and len(blob) < len(got[rel])
        out = io.BytesIO()
        header, n = packed.copy_unpacked(iter([blob[:7], blob[7:]]), out, lambda b: None, lambda n: None, rel)
        assert out.getvalue() == got[rel] and n == size - 4 - len(header)
    # every chunk's structure files packed, no other file
    assert sorted(index["files"]) == sorted(k for k in got if k.startswith("chunk-") and
                                            k.split("/")[1] in packed.PACKED_FILES)
    return got


def test_a_prepared_store_round_trips_exactly_and_a_second_prepare_reuses_it(creds, s3_bucket, tmp_path):
    cfg = job(tmp_path / "a", creds, s3_bucket)
    manifest = prepare_store(cfg, progress=False)
    bucket = Bucket(cfg.storage.s3)
    local = {p.relative_to(cfg.store_path).as_posix(): p.read_bytes()
             for p in cfg.store_path.rglob("*") if p.is_file()}
    assert store_objects(bucket) == local and MANIFEST in local and len(local) > K * 6
    assert json.loads(local[MANIFEST]) == manifest
    # another machine: an empty storeDir becomes the bucket's mirror, nothing prepared again
    other = job(tmp_path / "b", creds, s3_bucket)
    assert prepare_store(other, progress=False) == manifest
    assert [p.name for p in other.store_path.iterdir()] == [MANIFEST]
    store = open_store(other)
    chunk = store.load_chunk(1)  # read whole: downloaded on first use, checked against the manifest
    sizes = bucket.packed()  # its structure files come packed
    assert store.bytes_downloaded == sum(sizes.get(k, len(v)) for k, v in local.items() if k.startswith("chunk-1/"))
    assert store.bytes_downloaded < sum(len(v) for k, v in local.items() if k.startswith("chunk-1/"))
    np.testing.assert_array_equal(chunk.nodes.numpy(), np.load(cfg.store_path / "chunk-1" / "nodes.npy"))


def test_a_cut_upload_is_no_store_and_the_next_prepare_uploads_it_whole(creds, s3_bucket, tmp_path, monkeypatch):
    cfg = job(tmp_path, creds, s3_bucket)
    real, calls = Bucket.put_file, []

    def cut(self, path, rel):
        calls.append(rel)
        if len(calls) == 5:
            raise S3Error("connection lost (test)")
        return real(self, path, rel)
    monkeypatch.setattr(Bucket, "put_file", cut)
    monkeypatch.setattr(upload_module, "_PARALLEL", 1)
    with pytest.raises(S3Error, match="connection lost"):
        prepare_store(cfg, progress=False)
    bucket = Bucket(cfg.storage.s3)
    assert MANIFEST not in bucket.keys() and bucket.keys()  # files, no manifest: not a store
    with pytest.raises(S3Error, match=r"storage\.s3\.prefix: .*no prepared chunk store"):
        open_store(cfg)
    monkeypatch.setattr(Bucket, "put_file", real)
    prepare_store(cfg, progress=False)
    local = {p.relative_to(cfg.store_path).as_posix(): p.read_bytes()
             for p in cfg.store_path.rglob("*") if p.is_file()}
    assert store_objects(bucket) == local


def test_another_jobs_store_under_the_prefix_is_refused_not_replaced(creds, s3_bucket, tmp_path):
    prepare_store(job(tmp_path / "a", creds, s3_bucket), progress=False)
    bucket = Bucket(job(tmp_path / "a", creds, s3_bucket).storage.s3)
    before = objects(bucket)
    other = job(tmp_path / "b", creds, s3_bucket, **{"grappa.partitionSeed": 7})
    with pytest.raises(ChunkStoreError, match=r"partitionSeed|seed.*storage\.s3\.prefix"):
        prepare_store(other, progress=False)
    assert objects(bucket) == before and not other.store_path.exists()


def test_a_fetch_from_the_bucket_reads_what_the_folders_does_and_builds_the_same_graph(creds, s3_bucket, tmp_path):
    cfg = job(tmp_path, creds, s3_bucket)
    prepare_store(cfg, progress=False)
    arrays = StoreArrays(cfg.store_path)
    base, var, var2 = owned_sets()
    mirror = tmp_path / "mirror"  # another machine's storeDir: the manifest alone
    store = open_store(job(tmp_path, creds, s3_bucket, storeDir=str(mirror)))
    bucket = store.remote
    copy = LocalCopy(store.path, tmp_path / "local", remote=bucket)
    got = copy.fetch(base + [var])
    index, rows = arrays.halo_bytes(base + [var])
    # a file the bucket holds packed crosses as packed: its blocks (s3/packed.py) after its header
    index_blob = bucket.get(packed.INDEX)  # the test's own read: taken off below
    sizes = json.loads(index_blob)["files"]

    def header(k, f):
        return np.load(cfg.store_path / chunk_dir(k) / f, mmap_mode="r").offset

    def crossed(k, f):
        rel = f"{chunk_dir(k)}/{f}"
        return sizes[rel] - 4 - header(k, f) if rel in sizes else arrays.file(k, f).nbytes
    halo_chunks = arrays.halo_chunks(base + [var])
    copied = [(k, f) for k in base + [var] for f in CHUNK_FILES] + \
        [(k, f) for k in halo_chunks for f in ("nodes.npy", "indptr.npy")]
    assert (got.chunk_files, got.halo_index, got.halo_rows) == (
        sum(crossed(k, f) for k in base + [var] for f in CHUNK_FILES),
        sum(crossed(k, f) for k in halo_chunks for f in ("nodes.npy", "indptr.npy")), rows)
    assert got.chunk_files < arrays.chunk_bytes(base + [var]) and got.halo_index < index
    # what crossed the link besides: the manifest (open_store) and the packed files' index, each
    # file's header, probed once (a packed file's comes in its object, with its length), and the
    # headers of the files copied whole as they lie (the gaps read between rows: got.total)
    probed = [(k, f) for k, f in copied if f == "x.npy"] + [(k, "x.npy") for k in halo_chunks]
    probes = sum(min(HEADER_PROBE, (cfg.store_path / chunk_dir(k) / f).stat().st_size) for k, f in probed)
    headers = sum(header(k, f) + (4 if f != "x.npy" else 0) for k, f in copied)
    manifest = (cfg.store_path / MANIFEST).stat().st_size
    assert bucket.bytes_received - len(index_blob) - got.total == manifest + len(index_blob) + probes + headers
    assert rows > 0 and got.over_read < rows
    assert sorted(p.name for p in mirror.iterdir()) == [MANIFEST]  # nothing downloaded whole
    direct = build_local_graph(ChunkStore(cfg.store_path), base, var)
    assert_same_graph(direct, build_local_graph(copy.view(base + [var]), base, var))
    received = bucket.bytes_received
    nxt = copy.fetch(base + [var2])  # the base chunks are local: only the new chunk and its halo
    # the new chunk's index kept from the last halo, most of its rows in that halo's runs: the
    # rest of its files read, every chunk's index held
    assert nxt.halo_index == 0 and 0 < nxt.chunk_files <= arrays.next_chunk_read(base + [var], var2)
    packed_saved = sum(arrays.file(var2, f).nbytes - crossed(var2, f) for f in ("indices.npy", "y.npy", "split.npy"))
    assert nxt.reused_files == arrays.chunk_bytes([var2]) - packed_saved - nxt.chunk_files + \
        arrays.halo_bytes(base + [var2])[0]
    for name in CHUNK_FILES:
        np.testing.assert_array_equal(np.load(tmp_path / "local" / chunk_dir(var2) / name), arrays.file(var2, name))
    assert bucket.bytes_received - received >= nxt.total
    # the halo's rows the last round's runs and chunk copies hold come from the folder, not the bucket
    assert nxt.reused > 0 and nxt.halo_rows + nxt.reused == arrays.halo_bytes(base + [var2])[1]
    # the folder's runs hold the last halo's rows (and the rows between them): no row of those
    # is read again, also where a run of the new halo is held in part
    assert nxt.halo_rows <= arrays.rows_not_held(base + [var], base + [var2])
    assert_same_graph(build_local_graph(ChunkStore(cfg.store_path), base, var2),
                      build_local_graph(copy.view(base + [var2]), base, var2))


def test_a_job_on_the_bucket_trains_the_same_parameters_as_on_a_folder(creds, s3_bucket, tmp_path):
    runs = {}
    for name, bucket in (("folder", None), ("s3", s3_bucket)):
        cfg = job(tmp_path / name, creds, bucket)
        prepare_store(cfg, progress=False)
        if bucket is not None:  # the workers read the bucket, not the staging folder
            cfg = job(tmp_path / name, creds, bucket, storeDir=str(tmp_path / name / "mirror"))
        report = LocalJob(cfg, progress=False).run()
        runs[name] = (report, read_meta(Path(cfg.run_dir) / "model.pt")[1])
    (rep_f, state_f), (rep_s, state_s) = runs["folder"], runs["s3"]
    assert [h["loss"] for h in rep_s["history"]] == [h["loss"] for h in rep_f["history"]]
    for name in state_f:
        assert torch.equal(state_f[name], state_s[name]), name
    for h_f, h_s in zip(rep_f["history"], rep_s["history"]):
        # what each worker's round needed, read or held: the bucket's counts add the gaps read (its
        # runs, gaps included, may leave it less to read than the folder's) and take its packed
        # files as packed (exact counts: the fetch test above)
        f, s = ([a + b for a, b in zip(r["fetched"], r["fetched_reused"])]
                for r in (h_f["worker_store_read_bytes"], h_s["worker_store_read_bytes"]))
        assert all(b_f > 0 and b_s > 0 for b_f, b_s in zip(f, s))
    # predict on the bucket's model: its mirror (here gone whole) refilled from the bucket, the
    # same predictions as the folder's model on its own store
    shutil.rmtree(tmp_path / "s3" / "mirror")
    out = {}
    for name in runs:
        model = tmp_path / name / "run" / "model.pt"
        assert main(["predict", "--model", str(model), "--partitions", "2", "--quiet"]) == 0
        out[name] = np.load(model.parent / "predictions" / "predictions.npy")
    np.testing.assert_array_equal(out["s3"], out["folder"])
    assert (tmp_path / "s3" / "mirror" / MANIFEST).is_file()


@pytest.mark.parametrize("wrong, field", [
    ("endpoint", r"storage\.s3\.endpoint: nothing answers"),
    ("bucket", r"storage\.s3\.bucket: bucket 'no-such-bucket' does not exist"),
    ("credentials", r"storage\.s3\.secretName: the credentials were refused"),
    ("no credentials", r"storage\.s3\.secretName: no credentials"),
])
def test_a_wrong_setting_fails_within_seconds_naming_the_field_nothing_written(
        creds, s3_bucket, tmp_path, monkeypatch, wrong, field):
    over = {}
    if wrong == "endpoint":
        over["storage.s3.endpoint"] = "http://127.0.0.1:9"  # the discard port: nothing listens
    elif wrong == "bucket":
        over["storage.s3.bucket"] = "no-such-bucket"
    elif wrong == "credentials":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", creds.denied_access_key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", creds.denied_secret_key)
    else:
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    cfg = job(tmp_path, creds, s3_bucket, **over)
    with pytest.raises(S3Error, match=field):  # one HEAD, 3 s connect timeout: no hang
        prepare_store(cfg, progress=False)
    assert not cfg.store_path.exists() and not Path(cfg.run_dir).exists()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", creds.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", creds.secret_key)
    assert Bucket(job(tmp_path, creds, s3_bucket).storage.s3).keys() == []


def test_fetch_direct_with_a_bucket_is_refused_naming_the_fix(tmp_path):
    with pytest.raises(ValueError, match=r"storage\.fetch direct .* set storage\.fetch: prefetch"):
        TrainConfig.model_validate({"storage": {"s3": {"bucket": "graphs"}}, "runDir": str(tmp_path)})


def test_a_bucket_without_packed_files_is_read_as_it_lies_and_a_corrupt_one_is_refused(creds, s3_bucket, tmp_path):
    """A store uploaded before packing (no packed.json): its files are copied as they lie, every byte
    counted; a packed object that does not unpack to the manifest's sha256 fails naming the file,
    and nothing of the chunk is left in the folder."""
    cfg = job(tmp_path, creds, s3_bucket)
    prepare_store(cfg, progress=False)
    arrays = StoreArrays(cfg.store_path)
    base, var, _ = owned_sets()
    bucket = Bucket(cfg.storage.s3)
    blob = bucket.get(f"{chunk_dir(var)}/indices.npy{packed.KEY_SUFFIX}")
    bad = bytearray(blob)
    bad[-5] ^= 0xFF
    bucket.client.put_object(Bucket=bucket.name, Key=bucket.key(f"{chunk_dir(var)}/indices.npy{packed.KEY_SUFFIX}"),
                             Body=bytes(bad))
    store = open_store(job(tmp_path, creds, s3_bucket, storeDir=str(tmp_path / "mirror")))
    with pytest.raises(ChunkStoreError, match=rf"{chunk_dir(var)}/indices\.npy"):
        LocalCopy(store.path, tmp_path / "local", remote=store.remote).fetch(base + [var])
    assert not (tmp_path / "local" / chunk_dir(var)).exists()
    assert not [p for p in (tmp_path / "local").iterdir() if p.name.startswith(".tmp-")]
    # the bucket as an older version uploaded it: no packed objects, no index
    bucket.delete([k for k in bucket.keys() if k.endswith(packed.KEY_SUFFIX) or k == packed.INDEX])
    store = open_store(job(tmp_path, creds, s3_bucket, storeDir=str(tmp_path / "mirror2")))
    copy = LocalCopy(store.path, tmp_path / "local2", remote=store.remote)
    got = copy.fetch(base + [var])
    assert (got.chunk_files, got.halo_index) == (arrays.chunk_bytes(base + [var]), arrays.halo_bytes(base + [var])[0])
    assert_same_graph(build_local_graph(ChunkStore(cfg.store_path), base, var),
                      build_local_graph(copy.view(base + [var]), base, var))
