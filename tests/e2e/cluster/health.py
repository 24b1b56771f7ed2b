"""Waiting for a component's health endpoint, with the log tail in the error."""

from __future__ import annotations

import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

from .procs import Component, tail


class ComponentNotReady(RuntimeError):
    pass


def tls_context(ca: Path | None, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    """Client TLS context; `ca=None` skips verification (for self-signed component certs)."""
    if ca is None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None and key is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


def wait_healthy(comp: Component, url: str, timeout: float, ctx: ssl.SSLContext | None = None) -> None:
    """Poll `url` until it answers 200 `ok`; fail early if the process exits."""
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        rc = comp.exited()
        if rc is not None:
            raise ComponentNotReady(
                f"{comp.name} exited with code {rc} before {url} was healthy; "
                f"last lines of {comp.log}:\n{tail(comp.log)}")
        try:
            with urllib.request.urlopen(url, timeout=5, context=ctx) as resp:
                body = resp.read().decode(errors="replace")
                if resp.status == 200:
                    return
                last = f"HTTP {resp.status}: {body[:300]}"
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code}: {e.read().decode(errors='replace')[:500]}"
        except (urllib.error.URLError, OSError) as e:
            last = repr(e)
        time.sleep(0.5)
    raise ComponentNotReady(
        f"{comp.name} not healthy at {url} after {timeout:.0f}s (last: {last}); "
        f"last lines of {comp.log}:\n{tail(comp.log)}")
