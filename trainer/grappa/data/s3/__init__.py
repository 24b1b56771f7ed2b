"""The chunk store in S3-compatible object storage (storage.s3).

Why boto3: it is the reference S3 client (AWS maintains it), signs requests (SigV4) for any
S3-compatible service given an endpoint, retries what is retryable, and its ranged GET is one
call (`Range: bytes=a-b`), which is all a worker's fetch needs; s3transfer (its dependency)
uploads large files in parallel parts. fsspec/s3fs would add aiobotocore and aiohttp for an
async file-like layer the store does not use: it reads byte ranges it knows in advance.

    bucket.py   Bucket: the client, the store's keys under a prefix, errors naming storage.s3.*
    upload.py   upload_store: a prepared local store into the bucket, manifest last
    packed.py   a chunk's structure files byte-shuffled and deflated for the wire, beside them
    source.py   S3Source: what LocalCopy reads of a store, by ranged GETs (counted)
    mirror.py   Mirror: a local folder filled with the store's files as they are first read
"""
from grappa.data.s3.bucket import Bucket, S3Error

__all__ = ["Bucket", "S3Error"]
