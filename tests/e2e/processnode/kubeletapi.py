"""The one piece of the kubelet's HTTPS API worth having here: /containerLogs, so that
`kubectl logs [-f] [--previous] [--tail N]` works against pods of the process node.

The API server reaches it at the Node's InternalIP (127.0.0.1) and daemonEndpoints port. It does
not verify kubelet serving certificates unless told to, so a throw-away self-signed one suffices.
exec/attach/port-forward answer 404.
"""

from __future__ import annotations

import logging
import re
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, unquote, urlsplit

if TYPE_CHECKING:
    from .context import NodeContext

log = logging.getLogger("processnode.kubeletapi")
_PATH = re.compile(r"/containerLogs/([^/]+)/([^/]+)/([^/]+)")


def _attempts(ctx: "NodeContext", ns: str, pod: str, container: str) -> list[Path]:
    """Log files of every attempt of the newest pod of that name, oldest first."""
    dirs = sorted((ctx.workdir / "pods").glob(f"{ns}_{pod}_*"), key=lambda p: p.stat().st_mtime)
    if not dirs:
        return []
    files = (dirs[-1] / "logs" / container).glob("*.log")
    return sorted(files, key=lambda p: int(p.stem) if p.stem.isdigit() else -1)


def _running(ctx: "NodeContext", ns: str, pod: str, container: str) -> bool:
    with ctx.lock:
        workers = [w for w in ctx.workers.values() if w.ns == ns and w.pod_name == pod]
    return any(c.running for w in workers for c in w.inits + w.mains if c.name == container)


def make_handler(ctx: "NodeContext") -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:  # quiet: one line per request
            log.debug(fmt, *args)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            url = urlsplit(self.path)
            m = _PATH.fullmatch(url.path)
            if not m:
                self.send_error(404, "only /containerLogs is served by the process node")
                return
            ns, pod, container = (unquote(g) for g in m.groups())
            q = {k: v[-1] for k, v in parse_qs(url.query).items()}
            files = _attempts(ctx, ns, pod, container)
            if q.get("previous") == "true":
                files = files[:-1]
            if not files:
                self.send_error(404, f"no logs for {ns}/{pod}/{container}")
                return
            path = files[-1]
            data = path.read_bytes()
            if "tailLines" in q:
                lines = data.splitlines(keepends=True)
                data = b"".join(lines[-int(q["tailLines"]):]) if int(q["tailLines"]) > 0 else b""
            if "limitBytes" in q:
                data = data[:int(q["limitBytes"])]
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            try:
                self.wfile.write(data)
                self.wfile.flush()
                if q.get("follow") == "true" and q.get("previous") != "true":
                    self._follow(path, path.stat().st_size, ns, pod, container)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _follow(self, path: Path, offset: int, ns: str, pod: str, container: str) -> None:
            with open(path, "rb") as f:
                f.seek(offset)
                while True:
                    chunk = f.read(65536)
                    if chunk:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                    elif not _running(ctx, ns, pod, container):
                        return
                    else:
                        time.sleep(0.3)

    return Handler


def serve(ctx: "NodeContext") -> int:
    """Start the server on 127.0.0.1 (a free port) in a daemon thread; return the port."""
    cert, key = ctx.workdir / "kubelet.crt", ctx.workdir / "kubelet.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "7",
                    "-subj", f"/CN={ctx.name}", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(ctx))
    server.daemon_threads = True
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(str(cert), str(key))
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True, name="kubelet-api").start()
    return int(server.server_address[1])
