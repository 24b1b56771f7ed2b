"""Container-ish launcher: the first thing a pod's process runs, before exec'ing the real command.

It gives the process what a container runtime would, using only a private mount and UTS
namespace (we run as root): the pod's volumes at their `mountPath`s, the service-account files at
/var/run/secrets/kubernetes.io/serviceaccount, a per-pod /etc/hosts and /tmp, the pod's hostname.
The rest of the file system is the host's, bind-mounted read-write, so the product's interpreter and
sources are found at their usual paths. Nothing here writes outside the per-container root folder:
directories that must appear where the host has none are created on a tmpfs that exists only in
this namespace ("shadowing" their parent).

Usage (by the process node): python -m processnode.sandbox SPEC.json
"""

from __future__ import annotations

import ctypes
import json
import os
import stat
import sys
from pathlib import PurePosixPath

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {src} -> {target}")


def _host_resolve(path: str) -> str:
    """Resolve symlinks in the part of `path` that exists on the host (the container sees the
    host's tree, so /var/run/... must land where the host's /var/run points)."""
    return os.path.realpath(path)


def _ancestors(path: str) -> list[str]:
    parts = PurePosixPath(path).parents
    return [str(p) for p in reversed(list(parts))]  # "/", "/a", "/a/b" (not path itself)


def _replicate(host: str, dest: str) -> None:
    """Make `dest` show the host's `host` entry (a bind mount, or a copy of a symlink)."""
    try:
        st = os.lstat(host)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(host), dest)
    elif stat.S_ISDIR(st.st_mode):
        os.mkdir(dest)
        _mount(host, dest, None, MS_BIND | MS_REC)
    else:
        open(dest, "a").close()
        try:
            _mount(host, dest, None, MS_BIND)
        except OSError:  # sockets of other namespaces etc.: an empty placeholder is fine
            pass


def build_root(root: str, mounts: list[dict], need_dirs: list[str]) -> None:
    """Populate `root` (an empty folder) as the container's file-system root."""
    _mount("tmpfs", root, "tmpfs", MS_NOSUID, "mode=755")
    targets = {_host_resolve(m["target"]): m for m in mounts}
    wanted = set(targets) | {_host_resolve(d) for d in need_dirs}
    # A directory is shadowed (rebuilt on our tmpfs, child by child) when something must be
    # created or mounted inside it; anything below a mount target is left to that volume.
    shadow: set[str] = set()
    for t in wanted:
        for a in _ancestors(t):
            if any(a == m or a.startswith(m.rstrip("/") + "/") for m in targets):
                break
            shadow.add(a)

    def populate(d: str) -> None:
        try:
            children = sorted(os.listdir(d))
        except FileNotFoundError:
            children = []
        for name in children:
            host = os.path.join(d, name)
            dest = root + host
            if host in targets:
                continue
            if host in shadow:
                os.mkdir(dest)
                populate(host)
            else:
                _replicate(host, dest)
        # Shadowed or wanted entries the host lacks: plain folders on our tmpfs.
        for s in sorted(shadow | wanted):
            if os.path.dirname(s) == d and s != d and s not in targets and not os.path.lexists(root + s):
                os.makedirs(root + s, exist_ok=True)
                if s in shadow:
                    populate(s)

    populate("/")
    for target in sorted(targets, key=lambda p: p.count("/")):
        m = targets[target]
        src, dest = m["source"], root + target
        if os.path.isdir(src):
            os.makedirs(dest, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if not os.path.exists(dest):
                open(dest, "a").close()
        _mount(src, dest, None, MS_BIND | MS_REC)
        if m.get("readOnly"):
            _mount(None, dest, None, MS_BIND | MS_REMOUNT | MS_RDONLY)


def main(spec_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    try:
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWUTS), "unshare")
        # Private propagation: nothing we mount leaks back to the host's namespace.
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        name = spec["hostname"].encode()
        _check(_libc.sethostname(name, len(name)), "sethostname")
        work = spec.get("workingDir") or "/"
        build_root(spec["root"], spec["mounts"], [work])
        for hidden in spec.get("hide", []):
            # The test bed's own folder (PKI keys, admin kubeconfig, etcd data): a pod must not
            # be able to sidestep RBAC by reading credentials a real pod could never see.
            dest = spec["root"] + _host_resolve(hidden)
            if os.path.isdir(dest):
                _mount("tmpfs", dest, "tmpfs", MS_NOSUID | MS_RDONLY, "size=4k")
        os.chroot(spec["root"])
        os.chdir(work)
    except OSError as e:
        print(f"processnode sandbox: cannot set up the container: {e}", file=sys.stderr, flush=True)
        os._exit(128)
    argv, env = spec["argv"], spec["env"]
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        print(f"processnode sandbox: exec {argv[0]!r}: {e}", file=sys.stderr, flush=True)
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1])
