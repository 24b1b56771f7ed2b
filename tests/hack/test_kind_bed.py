"""The kind bed's pure parts: the leftover check teardown relies on, the image requirement lists
the Dockerfile installs, and the quirk detection reading the real machine."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_"), path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


hoststate = _load(REPO / "hack" / "kind" / "hoststate.py")

BEFORE = {"interfaces": ["eth0", "lo"], "iptables chains": ["filter:DOCKER-USER"],
          "iptables policies": ["filter:FORWARD ACCEPT"], "processes": ["dockerd"], "mounts": []}


def test_nothing_left_behind_when_the_host_is_as_before() -> None:
    assert hoststate.left_behind(BEFORE, dict(BEFORE)) == []


@pytest.mark.parametrize("kind, extra", [("interfaces", "grappa-kind0"), ("iptables chains", "filter:GRAPPA-BED-GUARD"),
                                         ("mounts", "/root/.cache/grappa/kind-bed/docker/overlay2/x/merged")])
def test_each_new_interface_chain_or_mount_is_reported(kind: str, extra: str) -> None:
    after = {k: list(v) for k, v in BEFORE.items()}
    after[kind].append(extra)
    assert hoststate.left_behind(BEFORE, after) == [f"{kind}: {extra}"]


def test_a_second_dockerd_beside_the_machines_own_is_reported() -> None:
    after = {k: list(v) for k, v in BEFORE.items()}
    after["processes"] = ["dockerd", "dockerd", "containerd"]
    assert hoststate.left_behind(BEFORE, after) == ["processes: containerd", "processes: dockerd"]


def test_a_forward_policy_left_at_drop_is_reported() -> None:
    after = {k: list(v) for k, v in BEFORE.items()}
    after["iptables policies"] = ["filter:FORWARD DROP"]
    assert hoststate.left_behind(BEFORE, after) == ["iptables policies: filter:FORWARD DROP",
                                                    "iptables policies: filter:FORWARD ACCEPT not restored"]


def test_snapshot_reads_this_machine() -> None:
    snap = hoststate.snapshot("/nonexistent-bed")
    assert "lo" in snap["interfaces"]
    assert snap["mounts"] == []


def _image_requirements(extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "hack" / "image-requirements.py"), str(REPO / "pyproject.toml"),
                           str(REPO / "hack" / "requirements.lock"), extra], capture_output=True, text=True)


def test_operator_image_requirements_are_pinned_and_have_no_torch() -> None:
    out = _image_requirements("operator")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    assert all("==" in line for line in lines), lines
    names = {line.split("==")[0] for line in lines}
    assert {"kopf", "kubernetes", "pydantic"} <= names and "torch" not in names, names
    assert "pyarrow" not in names and "pandas" not in names, names


def test_trainer_image_requirements_pin_torch_as_the_lock_does() -> None:
    out = _image_requirements("trainer")
    lock = (REPO / "hack" / "requirements.lock").read_text()
    torch = next(line for line in out.stdout.split() if line.startswith("torch=="))
    assert torch in lock.split()
    pyarrow = next(line for line in out.stdout.split() if line.startswith("pyarrow=="))  # dataset: tables
    assert pyarrow in lock.split()


def test_an_unknown_extra_names_the_choices() -> None:
    out = _image_requirements("gpu")
    assert out.returncode != 0 and "no extra [gpu]" in out.stderr and "operator" in out.stderr
