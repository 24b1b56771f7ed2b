#!/usr/bin/env bash
# Runs the end-to-end suite (tests/e2e, marker `e2e`) against a kind cluster.
#
# For a workstation with internet, Docker (or podman via KIND_EXPERIMENTAL_PROVIDER=podman) and
# kind: kind's own node image, images built online from the Dockerfile, no quirks. `make test`
# runs the same suite on a kind cluster built entirely offline instead (hack/kind/README.md).
#
# What it does:
#   1. builds the operator and trainer images from the Dockerfile (`make images`, no push);
#   2. creates a kind cluster (unless KIND_CLUSTER already exists) and `kind load`s both images;
#   3. exports KUBECONFIG and GRAPPA_E2E_USE_KUBECONFIG=1 (the suite then starts nothing locally)
#      plus the image variables the tests read (GRAPPA_E2E_OPERATOR_IMAGE, GRAPPA_E2E_TRAINER_IMAGE,
#      GRAPPA_E2E_PULL_POLICY=Never);
#   4. installs Prometheus for the dashboard test (hack/install-prometheus.sh, Debian/Ubuntu;
#      elsewhere put a `prometheus` binary at GRAPPA_PROMETHEUS_BIN) and runs
#      `python -m pytest -m e2e tests/e2e` with the repo's virtualenv (make venv).
#
# Environment:
#   KIND_CLUSTER      cluster name (default grappa-e2e); KEEP_CLUSTER=1 keeps it afterwards
#   KIND_NODE_IMAGE   kindest/node image (default: kind's default for your kind version)
#   IMAGE_TAG         tag of the built images (default e2e)
#   PYTHON            interpreter with the test dependencies (default: the Makefile's venv)
#   extra arguments are passed to pytest, e.g.  hack/kind-e2e.sh -k grappajob -x
#
# Pods pull nothing (images are loaded, pullPolicy Never); the job's storage is a ReadWriteOnce
# claim served by kind's local-path provisioner; Prometheus on the host scrapes the pods through
# the API server's pod proxy (pod IPs are not routable from the host). Keep this script in sync
# with hack/kind/bed.sh (the same variables), tests/e2e/helpers.py and docs/testing.md.
set -euo pipefail

cd "$(dirname "$0")/.."
REPO=$PWD
KIND_CLUSTER=${KIND_CLUSTER:-grappa-e2e}
IMAGE_TAG=${IMAGE_TAG:-e2e}
OPERATOR_IMAGE=grappa-operator:${IMAGE_TAG}
TRAINER_IMAGE=grappa-trainer:${IMAGE_TAG}

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "kind-e2e: $tool not found on PATH" >&2; exit 1; }
done
docker info >/dev/null 2>&1 || { echo "kind-e2e: no Docker engine reachable (this script needs one)" >&2; exit 1; }

if [[ -z "${PYTHON:-}" ]]; then
  make -s venv >&2
  PYTHON=$(make -s -f - <<<'include Makefile
print-py: ; @echo $(PY)' print-py)
fi

echo ">> building images $OPERATOR_IMAGE and $TRAINER_IMAGE" >&2
make -s images REGISTRY= VERSION="$IMAGE_TAG"  # the user's build, without the push

created=0
if ! kind get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
  echo ">> creating kind cluster $KIND_CLUSTER" >&2
  kind create cluster --name "$KIND_CLUSTER" ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 120s
  created=1
fi
cleanup() {
  if [[ $created -eq 1 && "${KEEP_CLUSTER:-0}" != 1 ]]; then
    kind delete cluster --name "$KIND_CLUSTER" || true
  fi
  rm -f "$KUBECONFIG_FILE"
}
KUBECONFIG_FILE=$(mktemp -t kind-grappa-e2e.XXXXXX)
trap cleanup EXIT
trap 'exit 130' INT TERM
kind get kubeconfig --name "$KIND_CLUSTER" >"$KUBECONFIG_FILE"

echo ">> loading images into $KIND_CLUSTER" >&2
kind load docker-image --name "$KIND_CLUSTER" "$OPERATOR_IMAGE" "$TRAINER_IMAGE"

if prom=$(hack/install-prometheus.sh); then
  export GRAPPA_PROMETHEUS_BIN=$prom
else
  echo "kind-e2e: warning: no Prometheus binary (set GRAPPA_PROMETHEUS_BIN); test_prometheus.py will fail" >&2
fi

export KUBECONFIG=$KUBECONFIG_FILE
export GRAPPA_E2E_USE_KUBECONFIG=1
export GRAPPA_E2E_OPERATOR_IMAGE=$OPERATOR_IMAGE
export GRAPPA_E2E_TRAINER_IMAGE=$TRAINER_IMAGE
export GRAPPA_E2E_PULL_POLICY=Never
export PYTHONPATH=$REPO/trainer:$REPO/operator
echo ">> running the e2e suite against kind-$KIND_CLUSTER" >&2
"$PYTHON" -m pytest -m e2e tests/e2e "$@"
