"""Fetch an OGB node dataset from the URL the ogb package uses, into OGB's own layout.

Runs only with dataset.download: true; tests never call it with a real URL.
"""
from __future__ import annotations

import os
import shutil
import urllib.request
import uuid
import zipfile
from pathlib import Path

from grappa.data.errors import DatasetError
from grappa.data.sources.ogb import OGB_META, dataset_dir


def download_ogb(name: str, root: Path, progress: bool = True, url: str | None = None) -> Path:
    """Download and unzip `name` to <root>/<ogbn_name>; returns that folder. The folder appears
    only once complete (unzipped beside it, then renamed)."""
    from grappa.util.progress_bar import progress_bar

    meta = OGB_META[name]
    target = dataset_dir(root, name)
    if target.exists():
        raise DatasetError(f"{target} exists but is not a complete {name} download; delete it, "
                           "then run again with dataset.download: true")
    root.mkdir(parents=True, exist_ok=True)
    work = root / f".download-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    try:
        archive = work / f"{meta.download_name}.zip"
        try:
            with urllib.request.urlopen(url or meta.url) as resp, open(archive, "wb") as out, \
                    progress_bar(int(resp.headers.get("Content-Length") or 0) or None, f"download {name}",
                                 "B", unit_scale=True, disable=not progress) as bar:
                while chunk := resp.read(1 << 20):
                    out.write(chunk)
                    bar.update(len(chunk))
        except OSError as err:
            raise DatasetError(f"cannot download {name} from {url or meta.url} ({err}); download "
                               f"and unzip it into {root} yourself, folder named {target.name}") from None
        with zipfile.ZipFile(archive) as z:
            z.extractall(work)
        unpacked = work / meta.download_name
        if not unpacked.is_dir():
            raise DatasetError(f"{url or meta.url} did not contain a folder {meta.download_name}/")
        os.replace(unpacked, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target
