"""Throw-away PKI for the local control plane, made with the `openssl` CLI.

Why the CLI: the test virtualenv does not ship `cryptography`, and `openssl` is present on every
machine that can build Kubernetes. Keys are ECDSA P-256 (fast to generate, accepted by every
component) except the service-account signing key, which is RSA because that is what
kube-apiserver and most token consumers are tested with upstream.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

# Certificates only need to outlive one test session; a short validity limits harm if one leaks.
_DAYS = "7"


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: CertPair
    apiserver: CertPair
    admin: CertPair
    controller_manager: CertPair
    scheduler: CertPair
    sa_private: Path
    sa_public: Path


def _run(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {proc.stderr.strip()}")


def _ec_key(path: Path) -> None:
    _run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path),
         cwd=path.parent)
    path.chmod(0o600)


def _issue(d: Path, name: str, subject: str, ca: CertPair, extensions: str) -> CertPair:
    """Key + CSR + certificate signed by `ca`, with the given x509v3 extension lines."""
    key, csr, crt, ext = (d / f"{name}{s}" for s in (".key", ".csr", ".crt", ".ext"))
    _ec_key(key)
    _run("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr), cwd=d)
    ext.write_text(extensions)
    _run("x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key),
         "-CAcreateserial", "-days", _DAYS, "-sha256", "-extfile", str(ext), "-out", str(crt), cwd=d)
    csr.unlink()
    ext.unlink()
    return CertPair(crt, key)


def _client_ext() -> str:
    return ("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=clientAuth\n")


def generate(d: Path) -> Pki:
    """Create every key and certificate the control plane needs inside `d`."""
    d.mkdir(parents=True, exist_ok=True)
    ca = CertPair(d / "ca.crt", d / "ca.key")
    _ec_key(ca.key)
    _run("req", "-x509", "-new", "-key", str(ca.key), "-subj", "/CN=grappa-e2e-ca", "-days", _DAYS,
         "-sha256", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
         "-out", str(ca.cert), cwd=d)
    # Names a pod would use for the API server, although only 127.0.0.1 is ever dialled.
    sans = ",".join(["IP:127.0.0.1", "DNS:localhost", "DNS:kubernetes", "DNS:kubernetes.default",
                     "DNS:kubernetes.default.svc", "DNS:kubernetes.default.svc.cluster.local"])
    apiserver = _issue(d, "apiserver", "/CN=kube-apiserver", ca,
                       "basicConstraints=critical,CA:FALSE\n"
                       "keyUsage=critical,digitalSignature,keyEncipherment\n"
                       f"extendedKeyUsage=serverAuth\nsubjectAltName={sans}\n")
    # O=system:masters is the bootstrap superuser group: no RBAC object is needed for it.
    admin = _issue(d, "admin", "/O=system:masters/CN=grappa-e2e-admin", ca, _client_ext())
    # The controller manager and scheduler use their upstream identities so the default
    # system:kube-controller-manager / system:kube-scheduler RBAC bindings apply, as in kubeadm.
    kcm = _issue(d, "controller-manager", "/CN=system:kube-controller-manager", ca, _client_ext())
    sched = _issue(d, "scheduler", "/CN=system:kube-scheduler", ca, _client_ext())
    sa_key, sa_pub = d / "sa.key", d / "sa.pub"
    _run("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(sa_key), cwd=d)
    sa_key.chmod(0o600)
    _run("pkey", "-in", str(sa_key), "-pubout", "-out", str(sa_pub), cwd=d)
    return Pki(ca, apiserver, admin, kcm, sched, sa_key, sa_pub)
