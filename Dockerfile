# worker-chart-export: the CloudEvent function served on $PORT (Cloud Run).
# Build from the repo root:  docker build -t worker-chart-export .
# BASE_IMAGE: any Debian-like image with python3.11 and pip (scripts/build_image.sh makes one
# from Debian packages where no container registry is reachable).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PORT=8080

WORKDIR /app

# Pinned runtime dependencies (no test tools) first: this layer is rebuilt only when the lock changes.
# Each downloaded file must match one of the lock's hashes; the package below has none, so it
# is installed by its own command.
COPY requirements.prod.lock ./
RUN pip install --require-hashes -r requirements.prod.lock

# The package is installed as a wheel (not editable): contracts/, chart-templates/ and
# fixtures/ travel inside it as package data, so nothing at run time reads /app or the repo
# layout. The sources are built in a scratch folder that is removed afterwards.
COPY pyproject.toml README.md /tmp/build/
COPY src/ /tmp/build/src/
COPY contracts/ /tmp/build/contracts/
COPY chart-templates/ /tmp/build/chart-templates/
COPY fixtures/ /tmp/build/fixtures/
# Bytecode is compiled at install time (pip's default for wheels): the non-root user cannot
# write it at run time, and cold starts should not pay for it.
RUN pip install --no-deps --compile /tmp/build \
    && rm -rf /tmp/build \
    && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin app

USER 10001
# gunicorn writes its control socket under $HOME; the system user's home does not exist
ENV HOME=/tmp
EXPOSE 8080

# `serve` runs the CloudEvent function worker_chart_export.functions.main:on_flow_run_updated
# (functions-framework under gunicorn) on $PORT, which Cloud Run sets.
CMD ["worker-chart-export", "serve"]
