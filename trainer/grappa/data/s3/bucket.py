"""A store's bucket: keys under storage.s3.prefix, and errors that name the field to fix.

Every failure a user can cause (an endpoint nothing answers at, a bucket that does not exist,
credentials missing or refused) is an S3Error naming `storage.s3.<field>` and the fix; `check()`
finds them with one HEAD request before anything is written or read, within seconds (short
connect and read timeouts, one retry: a check must not hang on a wrong address).
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Iterator, Optional

from grappa.config import S3Config
from grappa.data.errors import ChunkStoreError

_CONNECT_S, _READ_S = 3, 60


class S3Error(ChunkStoreError):
    """The store's bucket cannot be used; the message names the storage.s3 field and the fix."""


class Bucket:
    """The bucket and prefix of storage.s3. Thread-safe: boto3's clients are."""

    def __init__(self, cfg: S3Config) -> None:
        import boto3
        from botocore.config import Config
        self.cfg = cfg
        self.name, self.prefix = cfg.bucket, cfg.prefix
        self.where = f"s3://{cfg.bucket}/{cfg.prefix}" + (f" at {cfg.endpoint}" if cfg.endpoint else "")
        self.client = boto3.session.Session().client(
            "s3", endpoint_url=cfg.endpoint, region_name=cfg.region,
            config=Config(connect_timeout=_CONNECT_S, read_timeout=_READ_S,
                          retries={"max_attempts": 2, "mode": "standard"},
                          s3={"addressing_style": "path"}, max_pool_connections=16))
        self._lock = threading.Lock()
        self.bytes_received = 0  # body bytes of every GET, for the fetch path's counts
        self._packed: Optional[dict[str, int]] = None

    def packed(self) -> dict[str, int]:
        """The store's files the bucket also holds packed (s3/packed.py): key -> the packed
        object's bytes; read once ({}: none, as in a store uploaded before packing)."""
        if self._packed is None:
            from grappa.data.s3 import packed
            blob = self.get(packed.INDEX) if self.exists(packed.INDEX) else None
            self._packed = packed.read_index(blob, self.where)
        return self._packed

    def key(self, rel: str) -> str:
        return self.prefix + rel

    # -- errors ------------------------------------------------------------------------------------
    def error(self, err: BaseException, doing: str) -> S3Error:
        """err (from boto3) as an S3Error naming the field a user fixes."""
        from botocore.exceptions import (
            ClientError, ConnectTimeoutError, EndpointConnectionError, NoCredentialsError,
            PartialCredentialsError, ReadTimeoutError)
        if isinstance(err, (EndpointConnectionError, ConnectTimeoutError)):
            return S3Error(f"storage.s3.endpoint: nothing answers at {self.cfg.endpoint or 'AWS S3'} "
                           f"({doing}: {err}); give the object store's URL (http://host:port)")
        if isinstance(err, ReadTimeoutError):
            return S3Error(f"storage.s3.endpoint: {self.cfg.endpoint} stopped answering ({doing}: {err})")
        if isinstance(err, (NoCredentialsError, PartialCredentialsError)):
            return S3Error(f"storage.s3.secretName: no credentials for {self.where} ({doing}): set "
                           "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (in a pod: the Secret "
                           "storage.s3.secretName with keys accessKeyIdKey and secretAccessKeyKey)")
        if isinstance(err, ClientError):
            code = str(err.response.get("Error", {}).get("Code", ""))
            status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("NoSuchBucket",) or (code in ("404", "NotFound") and doing.startswith("checking")):
                return S3Error(f"storage.s3.bucket: bucket {self.name!r} does not exist at "
                               f"{self.cfg.endpoint or 'AWS S3'}; create it (prepare never does) "
                               "or name an existing one")
            if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                        "AllAccessDisabled") or status == 403:
                return S3Error(f"storage.s3.secretName: the credentials were refused for {self.where} "
                               f"({doing}: {code or status}); give credentials that may read and "
                               "write the bucket (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or the "
                               "Secret storage.s3.secretName)")
            return S3Error(f"{doing} {self.where} failed: {code or status} ({err})")
        return S3Error(f"{doing} {self.where} failed: {err!r}")

    def _call(self, doing: str, fn, **kw):
        from botocore.exceptions import BotoCoreError, ClientError
        try:
            return fn(**kw)
        except (BotoCoreError, ClientError) as err:
            raise self.error(err, doing) from None

    # -- requests ----------------------------------------------------------------------------------
    def check(self) -> None:
        """One HEAD of the bucket: the endpoint answers, the bucket exists, the credentials count."""
        self._call("checking the bucket", self.client.head_bucket, Bucket=self.name)

    def exists(self, rel: str) -> bool:
        from botocore.exceptions import ClientError
        try:
            self.client.head_object(Bucket=self.name, Key=self.key(rel))
            return True
        except ClientError as err:
            if str(err.response.get("Error", {}).get("Code")) in ("404", "NoSuchKey", "NotFound"):
                return False
            raise self.error(err, f"reading {rel}") from None
        except Exception as err:  # noqa: BLE001 - botocore's transport errors
            raise self.error(err, f"reading {rel}") from None

    def get(self, rel: str, start: Optional[int] = None, length: Optional[int] = None,
            exact: bool = True) -> bytes:
        """The object's bytes, or `length` of them from `start` (one ranged GET; fewer only where
        the object ends first and not `exact`)."""
        kw = {"Bucket": self.name, "Key": self.key(rel)}
        if start is not None:
            if length == 0:
                return b""
            kw["Range"] = f"bytes={start}-{start + length - 1}" if length is not None else f"bytes={start}-"
        body = self._call(f"reading {rel}", self.client.get_object, **kw)["Body"]
        data = body.read()
        if exact and length is not None and len(data) != length:
            raise S3Error(f"reading {rel} from {self.where}: {len(data)} bytes came for a range of "
                          f"{length}; the object is shorter than the store's manifest says: "
                          "prepare the store again")
        with self._lock:
            self.bytes_received += len(data)
        return data

    def stream(self, rel: str, block: int) -> Iterator[bytes]:
        """The object's bytes, a block at a time (one GET)."""
        body = self._call(f"reading {rel}", self.client.get_object, Bucket=self.name, Key=self.key(rel))["Body"]
        for chunk in body.iter_chunks(block):
            with self._lock:
                self.bytes_received += len(chunk)
            yield chunk

    def put_file(self, path: Path, rel: str) -> None:
        """Upload a file (s3transfer: parallel parts when large)."""
        self._call(f"writing {rel}", self.client.upload_file, Filename=str(path), Bucket=self.name,
                   Key=self.key(rel))

    def keys(self) -> list[str]:
        """Every key under the prefix, relative to it."""
        out: list[str] = []
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=self.prefix)
        try:
            for page in pages:
                out += [o["Key"][len(self.prefix):] for o in page.get("Contents", [])]
        except Exception as err:  # noqa: BLE001 - boto3's errors, named by error()
            raise self.error(err, "listing the store") from None
        return out

    def delete(self, rels: list[str]) -> None:
        for lo in range(0, len(rels), 1000):  # DeleteObjects takes 1,000 keys a request
            objs = [{"Key": self.key(r)} for r in rels[lo:lo + 1000]]
            self._call("deleting a cut upload", self.client.delete_objects, Bucket=self.name,
                       Delete={"Objects": objs, "Quiet": True})
