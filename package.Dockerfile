# The grappa package on a runtime from the Dockerfile (`make images`, hack/images.sh, builds both):
#   docker build -f package.Dockerfile --build-arg RUNTIME=grappa-trainer-runtime:0.1.0 \
#       -t grappa-trainer:0.1.0 <a folder holding only pyproject.toml, README.md, trainer/, operator/>
# A file of its own so that its context is the source alone: a code edit sends a few MB.
ARG RUNTIME
FROM ${RUNTIME}
COPY pyproject.toml README.md /tmp/src/
COPY trainer /tmp/src/trainer
COPY operator /tmp/src/operator
# built with the runtime's own setuptools: no index needed
RUN pip install --no-index --no-build-isolation --no-deps /tmp/src && rm -rf /tmp/src /tmp/.cache
USER 10001:10001
