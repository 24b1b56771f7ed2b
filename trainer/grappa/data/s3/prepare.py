"""`grappa prepare` with storage.s3: the store is prepared in storeDir (the staging folder, then
the bucket's local mirror) and uploaded, or found in the bucket already and not prepared again.

Order: the bucket is checked first (one HEAD: endpoint, bucket, credentials), so a wrong setting
fails within seconds with nothing written anywhere. A store in the bucket is checked like a
local one (the job's dataset, chunks and seed; the user's files unchanged since) and never
replaced: another job's store there is refused naming the field.
"""
from __future__ import annotations

import json

from grappa.config import TrainConfig
from grappa.data.errors import ChunkStoreError
from grappa.data.s3.bucket import Bucket
from grappa.data.s3.mirror import open_mirror
from grappa.data.s3.upload import upload_store
from grappa.data.store.fingerprint import changes, fingerprint, input_files
from grappa.data.store.manifest import MANIFEST, check_identity
from grappa.data.store.preparation import Purpose, check_labelled, prepare_local, store_source


def prepare_in_bucket(cfg: TrainConfig, progress: bool, reprepare: bool, purpose: Purpose) -> dict:
    bucket = Bucket(cfg.storage.s3)
    bucket.check()
    fix = (f"give storage.s3.prefix another value, or delete the objects under {bucket.where} "
           "(a store in a bucket is never replaced)")
    if bucket.exists(MANIFEST):
        manifest = json.loads(bucket.get(MANIFEST))
        check_identity(manifest, store_source(cfg), cfg.num_chunks, cfg.grappa.partition_seed,
                       f"the chunk store {bucket.where}", fix[0].upper() + fix[1:])
        folder, files = input_files(cfg.dataset)
        changed = changes(manifest.get("source_files"), fingerprint(folder, files), folder)
        if changed:
            raise ChunkStoreError(f"the chunk store {bucket.where} was prepared from other data: "
                                  + "; ".join(changed) + f"; {fix}")
        check_labelled(cfg, manifest, purpose, bucket.where, fix)
        return open_mirror(bucket, cfg.store_path)
    manifest = prepare_local(cfg, progress, reprepare, purpose)
    upload_store(cfg.store_path, bucket, progress)
    return manifest
