"""Finding the control-plane binaries built by hack/build-controlplane.sh."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
NEEDED = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "helm")


def locate() -> Path:
    """$GRAPPA_CONTROLPLANE_BIN, else whatever the build script prints on its last line.

    The script is a no-op when its stamp exists, so calling it on every session is cheap; on a
    fresh machine it performs the (long) cold build, and its progress goes to our stderr.
    """
    env_bin = os.environ.get("GRAPPA_CONTROLPLANE_BIN")
    if env_bin:
        bin_dir = Path(env_bin)
    else:
        script = REPO / "hack" / "build-controlplane.sh"
        proc = subprocess.run([str(script)], stdout=subprocess.PIPE, text=True, cwd=REPO)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"{script} failed (exit {proc.returncode}); see its stderr above")
        bin_dir = Path(lines[-1].strip())
    missing = [b for b in NEEDED if not os.access(bin_dir / b, os.X_OK)]
    if missing:
        raise RuntimeError(f"control-plane bin folder {bin_dir} lacks {', '.join(missing)}")
    return bin_dir


def stamped_versions(bin_dir: Path) -> dict[str, str]:
    """key=value lines of the build stamp next to the bin folder (empty if there is none)."""
    stamp = bin_dir.parent / ".stamp"
    out: dict[str, str] = {}
    if stamp.is_file():
        for line in stamp.read_text().splitlines():
            k, sep, v = line.partition("=")
            if sep:
                out[k.strip()] = v.strip()
    return out
