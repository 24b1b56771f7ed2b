# Each image is two builds (`make images`, hack/images.sh, runs both):
#   this Dockerfile's `operator-runtime` / `trainer-runtime` target: Python and the pinned
#     dependencies (kopf + kubernetes, no torch / torch + the trainer's), rebuilt only when the
#     lock, pyproject, the wheels or this file change;
#   package.Dockerfile on that runtime: the grappa package, one small layer. Its context is the
#     source alone, so a code edit sends the builder a few MB, not the wheels (3 GB offline).
# Both images run as the non-root user 10001 (the pods' securityContext uses the same uid) and work
# with a read-only root filesystem (HOME and caches go to /tmp, an emptyDir in the pods).
# The classic builder is enough (no BuildKit-only syntax).
#
# Dependencies are the exact pins of hack/requirements.lock. Online, pip reads PyPI (PyPI's torch
# is the CUDA build, trimmed to what the CPU needs: the trainer image is ~4 GB). Offline, put wheels
# in ./wheelhouse/ (hack/wheelhouse.sh downloads them; the test bed links them there) and build with
# --build-arg WHEELS=local: pip then installs with --no-index --find-links and the build needs no
# network.
# Stage order matters for the classic builder, which builds every stage above the target: the
# operator's stages come first, so `--target operator-runtime` never installs torch.

ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp
RUN groupadd --gid 10001 grappa \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin grappa

# Requirement lists per image, derived from pyproject's extras and pinned by the lock.
FROM base AS reqs
WORKDIR /reqs
COPY pyproject.toml hack/requirements.lock hack/image-requirements.py hack/slim-torch.sh ./
COPY wheelhouse/ /wheelhouse/
RUN python image-requirements.py pyproject.toml requirements.lock operator >operator.txt \
 && python image-requirements.py pyproject.toml requirements.lock trainer >trainer.txt
ARG WHEELS=pypi
# With WHEELS=local, every pip below reads only /wheelhouse.
RUN if [ "$WHEELS" = local ]; then printf '[global]\nno-index = true\nfind-links = /wheelhouse\n' >/etc/pip.conf; fi

# Each runtime is its base and one layer of dependencies (changes only with the lock); the
# dependency stages are tagged too (hack/images.sh), so a pruned runtime rebuilds from cache.
FROM reqs AS deps-operator
RUN python -m venv /opt/venv && /opt/venv/bin/pip install -r /reqs/operator.txt

FROM base AS operator-runtime
COPY --from=deps-operator /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
RUN ! python -c "import torch" 2>/dev/null
EXPOSE 8080 8081
ENTRYPOINT ["python", "-m", "grappa_operator"]

# PyPI's torch is the CUDA build; the trainer runs on CPU, so what only GPUs use goes (triton,
# the NVIDIA libraries torch does not link against: hack/slim-torch.sh): 5.9 GB -> 3.9 GB.
FROM reqs AS deps-trainer
RUN python -m venv /opt/venv && /opt/venv/bin/pip install -r /reqs/trainer.txt \
 && sh /reqs/slim-torch.sh "$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

FROM base AS trainer-runtime
COPY --from=deps-trainer /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# The operator sets the command per role: python -m grappa prepare|aggregator|worker
CMD ["python", "-m", "grappa", "--help"]
