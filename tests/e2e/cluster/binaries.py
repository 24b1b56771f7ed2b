"""The control plane's build stamp (hack/build-controlplane.sh), for the expected server version."""

from __future__ import annotations

from pathlib import Path


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
