"""A run's home in the bucket (storage.s3.runPrefix): what would otherwise need runDir shared.

Every file goes up whole from a complete local file (written first, then put): an S3 PUT is
all-or-nothing, so a reader never sees half of one. Each object carries the sha256 of its bytes
(`x-amz-meta-sha256`), checked on every download: an object without it, or whose bytes differ
(another client's, or a cut copy put by hand), is never used. Checkpoints follow the local
rules (runtime/checkpoint.py): `checkpoints/epoch-NNNNNN.pt`, the newest `keep` kept, resume
from the newest complete one.

Exact evaluation's layer rows go through here too: a worker writes its chunk's file locally,
uploads it, and only then joins the layer's barrier; a reader downloads each other chunk's file
whole, once per pass (row files are rewritten at every evaluation). A whole file and not a
ranged read of the halo rows: one request per chunk and layer, and the reader's maps stay
those of a local file (rowfiles.LayerRows), at the cost of rows it does not read.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path
from typing import Optional

from grappa.config import S3Config
from grappa.data.s3.bucket import Bucket, S3Error
from grappa.data.rowfiles import layer_file
from grappa.data.s3.mirror import download

log = logging.getLogger("grappa.run_home")

CHECKPOINTS = "checkpoints/"
EVAL_ROWS = "eval-layers/"
# what a run writes into its home: files, and folders (ending in /)
RUN_KEYS = ("report.json", "metrics.jsonl", "model.pt", "training.png", CHECKPOINTS, EVAL_ROWS)
_CHECKPOINT = re.compile(r"^epoch-(\d{6})\.pt$")
_SHA = "sha256"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


class RunHome:
    """runDir's results and evaluation's rows under storage.s3.runPrefix. Thread-safe (the
    SIGTERM watcher uploads the last checkpoint while the loop may upload metrics)."""

    def __init__(self, cfg: S3Config, prefix: Optional[str] = None) -> None:
        """The home at `prefix` (default storage.s3.runPrefix; "" is the bucket's top)."""
        prefix = cfg.run_prefix if prefix is None else prefix
        if not cfg.bucket or prefix is None:
            raise ValueError("RunHome needs storage.s3.bucket and storage.s3.runPrefix")
        self.bucket = Bucket(cfg.model_copy(update={"prefix": prefix}))
        self.where = self.bucket.where
        self.bytes_sent = 0

    def uri(self, rel: str) -> str:
        return f"s3://{self.bucket.name}/{self.bucket.key(rel)}"

    # -- whole files, checked ---------------------------------------------------------------
    def put(self, path: Path, rel: str) -> None:
        """`path` (complete) as `rel`, with its sha256."""
        digest = sha256_of(path)
        self.bucket._call(f"writing {rel}", self.bucket.client.upload_file, Filename=str(path),
                          Bucket=self.bucket.name, Key=self.bucket.key(rel),
                          ExtraArgs={"Metadata": {_SHA: digest}})
        self.bytes_sent += path.stat().st_size

    def recorded_sha(self, rel: str) -> Optional[str]:
        """The sha256 `rel` was put with; None when there is no such object."""
        from botocore.exceptions import ClientError
        try:
            head = self.bucket.client.head_object(Bucket=self.bucket.name, Key=self.bucket.key(rel))
        except ClientError as err:
            if str(err.response.get("Error", {}).get("Code")) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise self.bucket.error(err, f"reading {rel}") from None
        except Exception as err:  # noqa: BLE001 - botocore's transport errors, named
            raise self.bucket.error(err, f"reading {rel}") from None
        return head.get("Metadata", {}).get(_SHA, "")

    def fetch(self, rel: str, dst: Path) -> bool:
        """`rel` into dst, whole and checked; False when the bucket has no such object. An object
        that fails its check is an S3Error: dst is left as it was."""
        want = self.recorded_sha(rel)
        if want is None:
            return False
        tmp = dst.with_name(f".part-{dst.name}-{os.getpid()}")
        try:
            download(self.bucket, rel, tmp)
            got = sha256_of(tmp)
            if got != want:
                raise S3Error(f"{self.uri(rel)} is not a complete file Grappa uploaded (its sha256 "
                              f"{got[:12]} is not the {want[:12] or 'none'} recorded with it): "
                              "delete it; it is never used")
            os.replace(tmp, dst)
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def keys(self, under: str = "") -> list[str]:
        return [k for k in self.bucket.keys() if k.startswith(under)]

    def delete(self, rels: list[str]) -> None:
        if rels:
            self.bucket.delete(rels)

    # -- checkpoints ---------------------------------------------------------------------------
    def put_checkpoint(self, path: Path, keep: int) -> None:
        """A checkpoint just written locally, then every bucket checkpoint but the newest `keep`
        deleted (after the new one is up: a crash between keeps one more, never one fewer)."""
        self.put(path, CHECKPOINTS + path.name)
        names = sorted(k for k in self.keys(CHECKPOINTS) if _CHECKPOINT.match(k[len(CHECKPOINTS):]))
        self.delete(names[:-keep])

    def latest_checkpoint(self, folder: Path) -> Optional[Path]:
        """The newest complete checkpoint of the bucket, downloaded into `folder`; older ones are
        tried when the newest fails its check (an object that is not whole is never resumed)."""
        names = sorted((k for k in self.keys(CHECKPOINTS) if _CHECKPOINT.match(k[len(CHECKPOINTS):])),
                       reverse=True)
        folder.mkdir(parents=True, exist_ok=True)
        for rel in names:
            dst = folder / rel[len(CHECKPOINTS):]
            try:
                if self.fetch(rel, dst):
                    return dst
            except S3Error as err:
                log.warning("skipping %s: %s", self.uri(rel), err)
        return None

    # -- the run as a whole ----------------------------------------------------------------------
    def pull(self, run_dir: Path) -> list[str]:
        """An empty runDir (a new machine's, a new pod's) filled with what says which run the home
        holds and where it stopped: report.json, metrics.jsonl and the newest complete checkpoint,
        so the local rerun rules (app/rerun.py) judge the bucket's run as a local one. Returns
        what came."""
        if (run_dir / "report.json").exists() or (run_dir / CHECKPOINTS).is_dir():
            return []
        run_dir.mkdir(parents=True, exist_ok=True)
        got = [n for n in ("report.json", "metrics.jsonl") if self.fetch(n, run_dir / n)]
        ck = self.latest_checkpoint(run_dir / CHECKPOINTS)
        return got + ([f"{CHECKPOINTS}{ck.name}"] if ck else [])

    def clear(self) -> list[str]:
        """Delete the run's objects (start over): only the names a run writes, so a run whose
        prefix lies inside this one's keeps its own."""
        mine = [k for k in self.keys() if k.split("/", 1)[0] + ("/" if "/" in k else "") in RUN_KEYS]
        self.delete(mine)
        return mine

    # -- evaluation's layer rows ---------------------------------------------------------------
    @staticmethod
    def rows_key(layer: int, k: int) -> str:
        return layer_file(Path(EVAL_ROWS), layer, k).as_posix()

    def put_rows(self, path: Path, layer: int, k: int) -> None:
        self.put(path, self.rows_key(layer, k))

    def fetch_rows(self, layer: int, k: int, dst: Path) -> None:
        """Chunk k's rows of `layer`, as its owner uploaded them before the layer's barrier."""
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not self.fetch(self.rows_key(layer, k), dst):
            raise S3Error(f"{self.uri(self.rows_key(layer, k))} is missing: its worker passed the "
                          "layer's barrier without uploading it (or another job deleted it)")

    def drop_rows(self) -> None:
        """Every evaluation row file of the run (the job is over: nobody reads them again)."""
        self.delete(self.keys(EVAL_ROWS))
