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
COPY requirements.prod.lock ./
RUN pip install -r requirements.prod.lock

# The code finds contracts/, chart-templates/ and fixtures/ from the repo root
# (config.REPO_ROOT = parents[2] of config.py), so the repo layout is kept under /app and
# the package is installed editable: REPO_ROOT then resolves to /app.
COPY pyproject.toml README.md ./
COPY src/ src/
COPY contracts/ contracts/
COPY chart-templates/ chart-templates/
COPY fixtures/ fixtures/
# Bytecode is compiled at build time: the non-root user cannot write it at run time, and
# cold starts should not pay for it.
RUN pip install --no-deps -e . \
    && python -m compileall -q src \
    && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin app

USER 10001
EXPOSE 8080

# `serve` runs the CloudEvent function worker_chart_export.main:on_flow_run_updated
# (functions-framework under gunicorn) on $PORT, which Cloud Run sets.
CMD ["worker-chart-export", "serve"]
