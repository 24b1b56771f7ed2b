# Two images from one tree (the classic builder is enough: no BuildKit-only syntax):
#   docker build --target operator -t grappa-operator .   # kopf + kubernetes + grappa.config, no torch
#   docker build --target trainer  -t grappa-trainer  .   # torch + the trainer
# Both run as the non-root user 10001 (the pods' securityContext uses the same uid) and work
# with a read-only root filesystem (HOME and caches go to /tmp, an emptyDir in the pods).
#
# Dependencies are the exact pins of hack/requirements.lock, installed before the source is copied,
# so a code edit rebuilds only the last small layer. Online, pip reads PyPI (PyPI's torch is the
# CUDA build, trimmed to what the CPU needs: the trainer image is ~4 GB). Offline, put wheels in
# ./wheelhouse/ (hack/wheelhouse.sh downloads them; the test bed links them there) and build with
# --build-arg WHEELS=local: pip then installs with --no-index --find-links and the build needs no
# network.
# Stage order matters for the classic builder, which builds every stage above the target: the
# operator's stages come first, so `--target operator` never installs torch.

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

# Each image is its base, one layer of dependencies (changes only with the lock) and one small
# layer with the package itself (built with the venv's own setuptools: no index needed).
FROM reqs AS deps-operator
RUN python -m venv /opt/venv && /opt/venv/bin/pip install -r /reqs/operator.txt

FROM base AS operator
COPY --from=deps-operator /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY pyproject.toml README.md /tmp/src/
COPY trainer /tmp/src/trainer
COPY operator /tmp/src/operator
RUN pip install --no-index --no-build-isolation --no-deps /tmp/src && rm -rf /tmp/src /tmp/.cache \
 && ! python -c "import torch" 2>/dev/null
USER 10001:10001
EXPOSE 8080 8081
ENTRYPOINT ["python", "-m", "grappa_operator"]

# PyPI's torch is the CUDA build; the trainer runs on CPU, so what only GPUs use goes (triton,
# the NVIDIA libraries torch does not link against: hack/slim-torch.sh): 5.9 GB -> 3.9 GB.
FROM reqs AS deps-trainer
RUN python -m venv /opt/venv && /opt/venv/bin/pip install -r /reqs/trainer.txt \
 && sh /reqs/slim-torch.sh "$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

# The trainer image without the package: its layers are the trainer's own, so a cluster that
# already holds them (the test bed pre-loads them into its node) receives only the source layer.
FROM base AS trainer-runtime
COPY --from=deps-trainer /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

FROM trainer-runtime AS trainer
COPY pyproject.toml README.md /tmp/src/
COPY trainer /tmp/src/trainer
COPY operator /tmp/src/operator
RUN pip install --no-index --no-build-isolation --no-deps /tmp/src && rm -rf /tmp/src /tmp/.cache
USER 10001:10001
# The operator sets the command per role: python -m grappa prepare|aggregator|worker
CMD ["python", "-m", "grappa", "--help"]
