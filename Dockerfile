# syntax=docker/dockerfile:1
# Two images from one tree:
#   docker build --target operator -t grappa-operator .   # kopf + kubernetes + grappa.config, no torch
#   docker build --target trainer  -t grappa-trainer  .   # torch (CPU wheels) + torch-geometric
# Both run as the non-root user 10001 (the pods' securityContext uses the same uid) and work
# with a read-only root filesystem (HOME and caches go to /tmp, an emptyDir in the pods).

ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp
RUN groupadd --gid 10001 grappa \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin grappa

FROM base AS source
WORKDIR /src
COPY pyproject.toml README.md* ./
COPY trainer ./trainer
COPY operator ./operator
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

FROM source AS build-operator
RUN pip install ".[operator]" \
 && ! python -c "import torch" 2>/dev/null

FROM source AS build-trainer
# CPU wheels keep the image at ~1 GB instead of ~6 GB; swap the index for CUDA builds.
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install --extra-index-url "${TORCH_INDEX}" ".[trainer]"

FROM base AS operator
COPY --from=build-operator /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
USER 10001:10001
EXPOSE 8080 8081
ENTRYPOINT ["python", "-m", "grappa_operator"]

FROM base AS trainer
COPY --from=build-trainer /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
USER 10001:10001
# The operator sets the command per role: python -m grappa prepare|aggregator|worker
CMD ["python", "-m", "grappa", "--help"]
