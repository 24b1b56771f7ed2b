# One entry point for users and CI. The virtualenv lives outside the clone, keyed by the hash of
# hack/requirements.lock and the Python version, so a fresh clone reuses it and torch (~2.6 GB) is
# downloaded once per pin set, never per run.
SHELL := /bin/bash
PYTHON ?= python3
GRAPPA_CACHE ?= $(HOME)/.cache/grappa
ENV_KEY := $(shell cat hack/requirements.lock | $(PYTHON) -c "import sys,hashlib;print(hashlib.sha256((sys.version.split()[0]+sys.stdin.read()).encode()).hexdigest()[:16])")
VENV ?= $(GRAPPA_CACHE)/venv-$(ENV_KEY)
PY := $(VENV)/bin/python
export PYTHONPATH := $(CURDIR)/trainer:$(CURDIR)/operator
export GRAPPA_DATA_ROOT ?= $(CURDIR)/.data

.PHONY: venv demo test test-unit crd manifests images bench-accuracy bench-network bench-strategies bench-scale bench-tables bench-inference bench-models bench-link bench-shard bench-peer bench-peer-store peer-env loop-figures clean-data

venv: $(VENV)/.ready

$(VENV)/.ready: hack/requirements.lock
	PYTHON=$(PYTHON) hack/ensure-venv.sh $(VENV)

demo: venv
	$(PY) -m grappa train --dataset csbm --partitions 4 --run-dir runs/demo

# Everything, the e2e suite on a kind cluster built offline (hack/kind/README.md: needs root and
# Docker's engine), by hack/test.sh: the virtualenv and the peer's environment beside the bed's
# build (each product cached by version), pytest as soon as the virtualenv is there (its unit
# tests beside the build, its e2e tests once the cluster is up), teardown always (it fails the
# run if anything left the bed's bridges or is left behind), and at the end every phase's time.
# TEST_LANES parallel lanes (tests/lanes.py): the unit tests in UNIT_LANES of them, whole files in
# order, dealt out by tests/unit_weights.json; the e2e tests in the others (and in a unit lane
# once it is done); TEST_LANES=0 runs everything in one process.
TEST_LANES ?= 4
UNIT_LANES ?= 2
test:
	GRAPPA_CACHE=$(GRAPPA_CACHE) PYTHON=$(PYTHON) GRAPPA_UNIT_LANES=$(UNIT_LANES) hack/test.sh $(VENV) -q --durations=15 \
	    --junitxml=$(GRAPPA_CACHE)/kind-bed/logs/tests.xml \
	    -n $(TEST_LANES) --dist loadgroup tests

# docs/results/test-loop.md from the recorded runs' phases files (docs/testing.md: how to record one)
loop-figures:
	python3 hack/phases.py --markdown docs/results/test-loop/*.txt >docs/results/test-loop.md

test-unit: venv
	$(PY) -m pytest -q tests -m "not e2e"

crd: venv
	$(PY) -m grappa_operator.crdgen --write

# manifests/operator.yaml: the chart rendered with its defaults (needs helm; tests/hack/test_manifests.py).
manifests: venv
	$(PY) hack/manifests.py --write

# Both images from the Dockerfile, tagged $(REGISTRY)/grappa-{operator,trainer}:$(VERSION); with
# REGISTRY set, pushed there and the chart packaged as dist/grappa-$(VERSION).tgz pointing at them
# (hack/images.sh). Without REGISTRY only built: the kind bed's build (hack/kind/images.sh).
REGISTRY ?=
VERSION ?= $(shell sed -n 's/^appVersion: *"*\([^"]*\)"*$$/\1/p' charts/grappa/Chart.yaml)
IMAGE_CONTEXT ?= $(CURDIR)
DOCKER_BUILD_FLAGS ?=
images:
	REGISTRY='$(REGISTRY)' VERSION='$(VERSION)' IMAGE_CONTEXT='$(IMAGE_CONTEXT)' \
	    DOCKER_BUILD_FLAGS='$(DOCKER_BUILD_FLAGS)' hack/images.sh

# The published runs; docs/results/benchmarks.md explains the choices (Physics stops at P = 4 for
# memory, 10 Gbit/s and the scaling series are cut short for time). Each line resumes.
bench-network: venv
	$(PY) bench/network.py --datasets rmat --partitions 2,4,8 --layers 2,3,4 --presets 1gbit,100mbit --epochs 4 --repeats 1
	$(PY) bench/network.py --datasets rmat --partitions 2,4,8 --layers 3 --presets 10gbit --epochs 4 --repeats 1
	$(PY) bench/network.py --datasets rmat --partitions 8 --layers 3 --presets 1gbit,100mbit --epochs 4 --repeats 3
	$(PY) bench/network.py --datasets rmat --partitions 8,4,2 --layers 2,3,4 --presets 1gbit --epochs 4 --repeats 3 --strategies grappa,full
	$(PY) bench/network.py --datasets coauthor-physics --partitions 2,4 --layers 2,3,4 --presets 1gbit --epochs 3 --repeats 1
	$(PY) bench/network.py --datasets coauthor-physics --partitions 4,2 --layers 2,3,4 --presets 1gbit --epochs 3 --repeats 3 --strategies grappa,full
	$(PY) bench/network.py --datasets coauthor-physics --partitions 4 --layers 2,3 --presets 10gbit --epochs 3 --repeats 1 --strategies grappa,full
	$(PY) bench/network.py --datasets coauthor-physics --partitions 4 --layers 3 --presets 100mbit --epochs 3 --repeats 1 --strategies grappa,full
	$(PY) bench/network.py --experiment scaling --scales 18,19,20 --partitions 8 --layers 3 --presets 1gbit --epochs 3 --strategies grappa,full

# Also feeds the accuracy section of benchmarks.md, hence the re-render at the end.
bench-strategies: venv
	$(PY) bench/strategies.py --dataset citeseer --layers 2,3,4 --preset 1gbit --epochs 60
	$(PY) bench/strategies.py --dataset citeseer --layers 2 --preset 100mbit --epochs 60 --variants grappa,full,varco-rmin1,retexo
	$(PY) bench/strategies.py --dataset citeseer --layers 2,3 --preset 100mbit --epochs 60 --variants grappa,full,retexo
	$(PY) bench/network.py --render-only

bench-accuracy: venv
	$(PY) bench/accuracy.py --epochs 100

# Each scale checks the free disk first and deletes its store once measured (RMAT-26 needs ~40 GB
# at its peak); the in-memory design is the previous commit's code, exported with git archive.
bench-scale: venv
	$(PY) bench/scale.py --design in-memory --scales 17,18,19
	$(PY) bench/scale.py --design streaming --feature-dtype float32 --scales 17,18,19,20,22
	$(PY) bench/scale.py --design streaming --feature-dtype float16 --scales 17,18,19,20,22,24,26
	$(PY) bench/train_scale.py --design previous --scales 10,17,18 --archs sage --modes mini-batch,full-graph
	$(PY) bench/train_scale.py --design previous --scales 19 --archs sage --modes mini-batch
	$(PY) bench/train_scale.py --scales 17,18 --archs sage --modes mini-batch,full-graph
	$(PY) bench/train_scale.py --scales 10,19,20,22,24 --archs sage,gcn --modes mini-batch
	$(PY) bench/train_scale.py --scales 10,19,20 --archs sage,gcn --modes full-graph
	$(PY) bench/train_scale.py --scales 10,19,20 --archs gat,gin --modes mini-batch
	$(PY) bench/layers.py

# docs/results/scale.md, "prepare from tables": Parquet with string ids vs the arrays format on the
# same graph, 10M and 100M edges, 500M where the disk allows (resumes from scale-tables-runs.json).
bench-tables: venv
	$(PY) bench/tables_scale.py --edges 10M,100M,500M

# docs/results/inference.md: grappa predict at P = 8 on RMAT-20/22/24 (resumes from its JSON file).
bench-inference: venv
	$(PY) bench/inference.py --scales 20,22,24 --partitions 8

# docs/results/models.md: PyG's layers vs the built-in models under Grappa at P = 8, mini-batch
# (resumes from models-runs.json; --force re-measures).
bench-models: venv
	$(PY) bench/models.py --datasets coauthor-physics --epochs 3 --eval-fraction 0.1 --profile
	$(PY) bench/models.py --datasets rmat-20 --epochs 2 --max-steps 100 --eval-fraction 0.01 --profile

# docs/results/link.md: link prediction, single-process PyG vs full communication vs Grappa (P = 4, 8;
# with and without correction, rounds on and off) on Cora, Coauthor-Physics and Amazon-Photo, 2 and 3
# layers, each at the learning rate of --lrs with single-process's best validation MRR, then RMAT-22
# at P = 8 (resumes from link-runs.json; --force re-measures).
bench-link: venv
	$(PY) bench/link.py --datasets cora,amazon-photo,coauthor-physics --partitions 4,8 --layers 2,3 --epochs 100 --eval-every 10 --lrs 0.01,0.001 --no-rmat
	$(PY) bench/link.py --rmat-only --rmat-scale 22 --rmat-epochs 2 --rmat-steps 100
	$(PY) bench/link.py --rmat-only --rmat-scale 22 --rmat-epochs 2 --rmat-steps 100 --rmat-halo cut

# docs/results/shard.md: one rank's optimizer CPU per step and memory, whole and sharded
# (training.shardOptimizer), for the Physics model (2.19 M parameters) and two narrower ones, M = 3, 5, 9.
bench-shard: venv
	$(PY) bench/shard.py

# DistDGL's own environment (dgl 2.1.0, torch 2.1, numpy < 2), cached by its lock's hash like ours.
peer-env:
	hack/peer-env.sh

# docs/results/peer.md: Grappa vs DistDGL vs the full-communication mode (bench/peer.py). Needs root
# for `ip netns`, and the datasets under $$GRAPPA_DATA_ROOT (coauthor/Physics/raw). Each line resumes.
bench-peer: venv peer-env
	$(PY) bench/peer.py --datasets rmat,coauthor-physics --partitions 4,8 --presets 1gbit --layers 3 --repeats 3 --systems grappa,distdgl --epochs 3
	$(PY) bench/peer.py --datasets rmat,coauthor-physics --partitions 2 --presets 1gbit --layers 3 --repeats 1 --systems grappa,distdgl --epochs 3
	$(PY) bench/peer.py --datasets rmat,coauthor-physics --partitions 4,8 --presets 100mbit --layers 3 --repeats 1 --systems grappa,distdgl --epochs 3
	$(PY) bench/peer.py --datasets rmat --partitions 4,8 --presets 1gbit --layers 3 --repeats 1 --systems full --epochs 3
	$(PY) bench/peer.py --datasets coauthor-physics --partitions 4 --presets 1gbit --layers 3 --repeats 1 --systems full --epochs 3
	$(PY) bench/peer.py --datasets rmat --partitions 8 --presets 1gbit --layers 3 --repeats 1 --systems distdgl-random --epochs 3
	$(PY) bench/peer.py --experiment accuracy --datasets rmat --partitions 4 --presets 1gbit --layers 2,3,4 --repeats 1 --systems grappa,distdgl --epochs 8
	$(PY) bench/peer.py --experiment accuracy --datasets coauthor-physics --partitions 4 --presets 1gbit --layers 2,3,4 --repeats 1 --systems grappa,distdgl --epochs 30

# docs/results/peer-store.md: the same comparison with rounds inside the measured window and Grappa's
# chunk store on a storage machine (SeaweedFS's S3 gateway behind a shaped link; bench/peer_store.py):
# rounds every 2 over 5 epochs (boundaries at epochs 2 and 4) and every 10 over 21; the halo-row variants
# (storage.haloRows as-read, reachable) on Physics' sparse store at P = 8, every 10. Needs root and
# hack/seaweedfs.sh's weed (built by the first line if missing: Go and the module proxy). Each line resumes.
bench-peer-store: venv peer-env
	$(PY) bench/peer.py --store s3 --rounds-every 2 --epochs 5 --datasets coauthor-physics,coauthor-physics-auto,coauthor-physics-sparse,rmat,rmat-20 --partitions 8,4 --presets 1gbit --layers 3 --repeats 1 --systems grappa,distdgl
	$(PY) bench/peer.py --store s3 --rounds-every 10 --epochs 21 --datasets coauthor-physics,coauthor-physics-auto,coauthor-physics-sparse,rmat,rmat-20 --partitions 8,4 --presets 1gbit --layers 3 --repeats 1 --systems grappa,distdgl
	$(PY) bench/peer.py --store s3 --rounds-every 10 --epochs 21 --datasets coauthor-physics-sparse-as-read,coauthor-physics-sparse-reach --partitions 8 --presets 1gbit --layers 3 --repeats 1 --systems grappa,distdgl

clean-data:
	rm -rf .data runs

# Builds helm, then kube-apiserver/controller-manager/scheduler, kubectl and etcd from source into
# versioned folders under $(GRAPPA_CACHE) (first run ~tens of minutes, then instant); prints their bin/.
.PHONY: controlplane kind-images
controlplane:
	GRAPPA_CACHE=$(GRAPPA_CACHE) hack/build-controlplane.sh --helm
	GRAPPA_CACHE=$(GRAPPA_CACHE) hack/build-controlplane.sh

# The kind bed's cached images only (base, operator, trainer, node), without a cluster.
kind-images: venv
	GRAPPA_CACHE=$(GRAPPA_CACHE) hack/kind/bed.sh build
