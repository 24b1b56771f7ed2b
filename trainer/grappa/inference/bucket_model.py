"""`grappa predict` / `evaluate` on a model in a bucket: `--model s3://BUCKET/KEY.pt`.

A run whose home is a bucket (storage.s3.runPrefix) leaves its model there, and a GrappaJob
without a volume leaves nothing anywhere else; the status names it `s3://...`, so that URI is what
a user gives. The endpoint and region are the command's `--set storage.s3.endpoint=URL` (and
`.region`), else boto3's own (AWS_ENDPOINT_URL); a `storage.s3.bucket` that is not the URI's is
refused as ambiguous.

The model is downloaded whole and checked (its sha256, data/s3/run_home.py) into a temporary
folder, the store it was trained on into a temporary mirror beside it; the command then runs as
on a local model, its outputs in `--out` (default: a temporary folder). The outputs go into the
bucket next to the model, under `predictions/` (or `evaluation/`), as they would go next to a
local model, by the output folder's rules (out_folder.py): a prefix holding anything else is
refused; the same finished job is not run again; another job's outputs are replaced only with
--start-over, their manifest deleted first. Every file goes up, then manifest.json: a cut upload
has no manifest, which no reader takes for outputs, and the next run replaces it.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

from grappa.config import ConfigError, S3Config
from grappa.inference.out_folder import (
    MANIFEST, OUTPUT_FILES, START_OVER_FLAG, command_of, differences, is_ours)

SCHEME = "s3://"


def is_bucket_model(model: str) -> bool:
    return model.startswith(SCHEME)


class BucketModel:
    """The model at an s3:// URI, and the prefix its outputs go under."""

    def __init__(self, uri: str, s3: Optional[S3Config], command: str) -> None:
        from grappa.data.s3.run_home import RunHome
        bucket, _, key = uri[len(SCHEME):].partition("/")
        if not bucket or not key or key.endswith("/") or not key.endswith(".pt"):
            raise ConfigError(f"--model {uri}: name a model file in a bucket, s3://BUCKET/KEY.pt "
                              "(a training job's status.artifacts.model)")
        if s3 is not None and s3.bucket and s3.bucket != bucket:
            raise ConfigError(f"--model {uri} is in bucket {bucket!r} but storage.s3.bucket is "
                              f"{s3.bucket!r}: which one is meant is a guess; drop --set storage.s3.bucket")
        base = (s3 or S3Config()).model_copy(update={"bucket": bucket, "run_prefix": None})
        folder, _, self.name = key.rpartition("/")
        self.home = RunHome(base, f"{folder}/" if folder else "")
        self.uri = uri
        self.out = manifest_home(uri, command).rpartition("/")[2] + "/"
        self.local_out = False  # the user asked for the outputs in a local folder too (--out)

    def download(self, folder: Path) -> Path:
        self.home.bucket.check()
        path = folder / self.name
        if not self.home.fetch(self.name, path):
            raise ConfigError(f"--model {self.uri}: no such object in {self.home.where}; give a "
                              "training job's status.artifacts.model")
        return path

    # -- the outputs in the bucket --------------------------------------------------------------
    def claim(self, command: str, job, start_over: bool) -> Optional[dict]:
        """out_folder.claim for the prefix: this job's finished manifest (nothing to do), or None
        when the job may run and upload (nothing there, a cut upload, or --start-over)."""
        where = self.home.uri(self.out)
        keys = [k[len(self.out):] for k in self.home.keys(self.out)]
        foreign = sorted(k for k in keys if k not in OUTPUT_FILES)
        if foreign:
            raise ConfigError(f"{where} holds objects that are not predict/evaluate outputs "
                              f"({', '.join(foreign[:6])}): predict and evaluate write only under a "
                              "prefix that is empty or holds their own outputs; move them")
        if MANIFEST not in keys:
            self.home.delete([self.out + k for k in keys])  # a cut upload: outputs nobody reads
            return None
        manifest = json.loads(self.home.bucket.get(self.out + MANIFEST))
        if not is_ours(manifest) or command_of(manifest) != command:
            raise ConfigError(f"{where} holds the outputs of another command than `grappa {command}`: "
                              "move them")
        diffs = differences(manifest.get("job"), job)
        if not diffs:
            return manifest
        if not start_over:
            raise ConfigError(f"{where} holds the finished outputs of another {command} job:\n  "
                              + "\n  ".join(diffs) + f"\nadd {START_OVER_FLAG} to replace them")
        self.home.delete([self.out + MANIFEST])  # first: what is left until the upload is no output
        self.home.delete([self.out + k for k in keys if k != MANIFEST])
        return None

    def download_outputs(self, out: Path) -> None:
        """The bucket's finished outputs into `out` (a local --out asked for them), manifest last."""
        out.mkdir(parents=True, exist_ok=True)
        names = sorted((k[len(self.out):] for k in self.home.keys(self.out)), key=lambda n: n == MANIFEST)
        for name in names:
            self.home.fetch(self.out + name, out / name)

    def upload(self, out: Path) -> None:
        files = [f for f in OUTPUT_FILES if f != MANIFEST and (out / f).is_file()]
        for f in files:
            self.home.put(out / f, self.out + f)
        self.home.put(out / MANIFEST, self.out + MANIFEST)
        print(f"grappa: outputs uploaded to {self.home.uri(self.out)}", file=sys.stderr)


def manifest_home(uri: str, command: str) -> str:
    """Where the outputs of the model at `uri` go in its bucket."""
    return uri.rpartition("/")[0] + "/" + ("predictions" if command == "predict" else "evaluation")
