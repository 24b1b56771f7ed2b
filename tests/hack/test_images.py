"""`make images`: both images built from the Dockerfile and tagged <REGISTRY>/grappa-<target>:<VERSION>,
pushed only once both built, and the chart packaged with that version pointing at them; without
REGISTRY only built (the kind bed's path). `docker` is a stand-in that records its calls (no
registry is reachable here); helm is the real one when found, since the packaged chart is the
product."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "hack"))
from manifests import find_helm  # noqa: E402

HELM = find_helm()
REGISTRY = "127.0.0.1:5000/team"
APP_VERSION = yaml.safe_load((REPO / "charts" / "grappa" / "Chart.yaml").read_text())["appVersion"]


@pytest.fixture
def fake_docker(tmp_path: Path) -> tuple[Path, Path]:
    """A `docker` that appends its arguments to calls.txt; FAIL_ON=<word> makes a call with that
    word fail (e.g. 'push', or a target name)."""
    calls = tmp_path / "calls.txt"
    docker = tmp_path / "docker"
    docker.write_text('#!/bin/sh\necho "$*" >>"$CALLS"\n'
                      'case " $* " in *" $FAIL_ON "*) echo "docker: $FAIL_ON failed" >&2; exit 1;; esac\n')
    docker.chmod(0o755)
    return docker, calls


def make_images(docker: Path, calls: Path, tmp_path: Path, *args: str, fail_on: str = "-",
                helm: str | None = HELM) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CALLS": str(calls), "FAIL_ON": fail_on}
    return subprocess.run(["make", "-s", "-C", str(REPO), "images", f"DOCKER={docker}", f"DIST={tmp_path / 'dist'}",
                           f"HELM={helm or '/nonexistent/helm'}", *args],
                          capture_output=True, text=True, env=env, timeout=120)


def rendered_images(chart: Path, tmp_path: Path, *sets: str) -> tuple[str, str]:
    """(operator image, default trainer image) of the chart as helm renders it."""
    args = [HELM, "template", "grappa", str(chart), "-n", "grappa-system"]
    for setting in sets:
        args += ["--set", setting]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "HELM_CACHE_HOME": str(tmp_path / "h")})
    assert out.returncode == 0, out.stderr
    dep = next(d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "Deployment")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    return container["image"], env["GRAPPA_TRAINER_IMAGE"]


def lines(calls: Path) -> list[str]:
    return calls.read_text().splitlines() if calls.exists() else []


def source_copy(tmp_path: Path) -> Path:
    """What the bed's context holds (hack/kind/images.sh), the wheels aside."""
    ctx = tmp_path / "ctx"
    for rel in ("Dockerfile", "package.Dockerfile", "pyproject.toml", "README.md", "hack/requirements.lock",
                "hack/image-requirements.py", "hack/slim-torch.sh", "trainer", "operator"):
        (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
        copy = shutil.copytree if (REPO / rel).is_dir() else shutil.copy
        copy(REPO / rel, ctx / rel)
    return ctx


def builds(calls: Path) -> list[str]:
    return [c for c in lines(calls) if c.startswith("build ")]


def runtime_builds(got: list[str]) -> list[str]:
    return [c for c in got if "--target " in c]


def test_bed_build_builds_both_images_and_pushes_nothing(fake_docker, tmp_path):
    docker, calls = fake_docker
    ctx = source_copy(tmp_path)
    out = make_images(docker, calls, tmp_path, "VERSION=bed", f"IMAGE_CONTEXT={ctx}",
                      "DOCKER_BUILD_FLAGS=--network none --label grappa.bed.key=abc")
    assert out.returncode == 0, out.stderr
    got = builds(calls)
    flags = "build --network none --label grappa.bed.key=abc"
    for target, (deps, runtime, package) in zip(("operator", "trainer"), (got[:3], got[3:])):
        assert deps == f"{flags} --target deps-{target} -t grappa-deps-{target}:bed {ctx}"
        assert runtime.startswith(f"{flags} --label grappa.runtime.key=") and runtime.endswith(
            f"--target {target}-runtime -t grappa-{target}-runtime:bed {ctx}")
        # the package on that runtime, from a context of the source alone
        assert package.startswith(f"{flags} --build-arg RUNTIME=grappa-{target}-runtime:bed -f ")
        assert package.split()[-3:-1] == ["-t", f"grappa-{target}:bed"] and str(ctx) not in package
    assert len(got) == 6 and not (tmp_path / "dist").exists()


def test_a_current_runtime_is_not_rebuilt_and_the_key_ignores_labels(fake_docker, tmp_path):
    """The runtime build sends the whole context (3 GB of wheels offline): skipped while the
    runtime image carries the key of the Dockerfile, lock, pyproject and wheels; a changed lock
    or build argument rebuilds it, a changed label (the bed's per-commit key) does not."""
    docker, calls = fake_docker
    ctx = source_copy(tmp_path)

    def run(label: str, *extra: str) -> list[str]:
        calls.unlink(missing_ok=True)
        out = make_images(docker, calls, tmp_path, "VERSION=bed", f"IMAGE_CONTEXT={ctx}",
                          f"DOCKER_BUILD_FLAGS=--network none --label grappa.bed.key={label} {' '.join(extra)}")
        assert out.returncode == 0, out.stderr
        return builds(calls)

    first = runtime_builds(run("abc"))
    key = first[1].split("grappa.runtime.key=")[1].split()[0]
    docker.write_text(docker.read_text().replace(
        'echo "$*" >>"$CALLS"\n', f'echo "$*" >>"$CALLS"\n[ "$1" = image ] && echo {key}\n'))
    again = run("def")
    assert runtime_builds(again) == [] and len(again) == 2, again
    (ctx / "hack" / "requirements.lock").write_text((ctx / "hack" / "requirements.lock").read_text() + "\n")
    assert len(runtime_builds(run("def"))) == 4
    (ctx / "hack" / "requirements.lock").write_text((REPO / "hack" / "requirements.lock").read_text())
    assert len(runtime_builds(run("def", "--build-arg", "WHEELS=local"))) == 4


def test_the_tag_defaults_to_the_charts_app_version(fake_docker, tmp_path):
    docker, calls = fake_docker
    out = make_images(docker, calls, tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"-t grappa-trainer:{APP_VERSION} " in lines(calls)[-1]


def test_bed_uses_the_make_target():
    bed = (REPO / "hack" / "kind" / "images.sh").read_text()
    assert "make -s -C \"$REPO\" images REGISTRY= VERSION=bed" in bed and "docker build" not in bed


@pytest.mark.skipif(HELM is None, reason="no helm binary: `make controlplane` builds one")
def test_registry_build_pushes_and_packages_the_chart(fake_docker, tmp_path):
    docker, calls = fake_docker
    out = make_images(docker, calls, tmp_path, f"REGISTRY={REGISTRY}", "VERSION=1.2.3")
    assert out.returncode == 0, out.stderr
    got = [c for c in lines(calls) if not c.startswith("image ")]
    assert [c.split()[0] for c in got] == ["build"] * 6 + ["push"] * 2
    assert f"-t {REGISTRY}/grappa-operator-runtime:1.2.3 {REPO}" in got[1]
    assert f"--build-arg RUNTIME={REGISTRY}/grappa-operator-runtime:1.2.3 " in got[2]
    assert f"-t {REGISTRY}/grappa-operator:1.2.3 " in got[2] and f"-t {REGISTRY}/grappa-trainer:1.2.3 " in got[5]
    assert got[6:] == [f"push {REGISTRY}/grappa-operator:1.2.3", f"push {REGISTRY}/grappa-trainer:1.2.3"]
    chart = tmp_path / "dist" / "grappa-1.2.3.tgz"
    assert f"helm install grappa {chart}" in out.stdout
    with tarfile.open(chart) as tar:
        meta = yaml.safe_load(tar.extractfile("grappa/Chart.yaml").read())
    assert meta["version"] == "1.2.3" and meta["appVersion"] == "1.2.3"
    assert rendered_images(chart, tmp_path) == (f"{REGISTRY}/grappa-operator:1.2.3", f"{REGISTRY}/grappa-trainer:1.2.3")


@pytest.mark.parametrize("fail_on", ["trainer-runtime", "push"])
def test_a_failed_build_or_push_leaves_no_chart(fake_docker, tmp_path, fail_on):
    docker, calls = fake_docker
    out = make_images(docker, calls, tmp_path, f"REGISTRY={REGISTRY}", "VERSION=1.2.3", fail_on=fail_on,
                      helm=HELM or "/bin/true")
    assert out.returncode != 0 and f"docker: {fail_on} failed" in out.stderr
    if fail_on == "trainer-runtime":
        assert not [c for c in lines(calls) if c.startswith("push")], "nothing pushed before both images built"
    assert not (tmp_path / "dist").exists()


@pytest.mark.parametrize("args,named", [
    (("REGISTRY=https://registry.example.com/team", "VERSION=1.2.3"), "REGISTRY=https://registry.example.com/team"),
    ((f"REGISTRY={REGISTRY}/", "VERSION=1.2.3"), f"REGISTRY={REGISTRY}/"),
    ((f"REGISTRY={REGISTRY}", "VERSION=latest"), "VERSION=latest is not SemVer"),
    (("VERSION=a b",), "VERSION=a b is not a valid image tag"),
])
def test_bad_settings_stop_before_anything_is_built(fake_docker, tmp_path, args, named):
    docker, calls = fake_docker
    out = make_images(docker, calls, tmp_path, *args, helm=HELM or "/bin/true")
    assert out.returncode != 0 and named in out.stderr, out.stderr
    assert lines(calls) == [] and not (tmp_path / "dist").exists()


@pytest.mark.skipif(HELM is None, reason="no helm binary: `make controlplane` builds one")
def test_one_value_points_the_chart_at_a_registry(tmp_path):
    assert rendered_images(REPO / "charts" / "grappa", tmp_path, f"imageRegistry={REGISTRY}") == (
        f"{REGISTRY}/grappa-operator:{APP_VERSION}", f"{REGISTRY}/grappa-trainer:{APP_VERSION}")
