# syntax=docker/dockerfile:1
#
# iceberg-catalog: the Apache Iceberg REST catalog server.
#
#   docker build -t iceberg-catalog .
#   docker run --rm -p 8181:8181 \
#     -e CATALOG_DATABASE_URL=postgresql+psycopg://catalog:catalog@db:5432/catalog \
#     -e CATALOG_WAREHOUSE=s3://warehouse/ -e CATALOG_S3_ENDPOINT=http://minio:9000 \
#     -e CATALOG_S3_PATH_STYLE_ACCESS=true ... iceberg-catalog            # serve
#   docker run --rm -e CATALOG_DATABASE_URL=... iceberg-catalog migrate  # schema to head, then exit
#
# Configuration is environment variables only (CATALOG_*); see README / helm chart.

ARG PYTHON_IMAGE=python:3.11-slim

# ---------------------------------------------------------------------------------------------
# build: a self-contained virtualenv in /opt/venv holding the package and its dependencies.
# All dependencies ship manylinux wheels (psycopg[binary] bundles libpq), so no compiler is needed.
# ---------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /src
# README.md is optional (the [d] glob lets the COPY succeed without it); pyproject names it as readme.
COPY pyproject.toml alembic.ini README.m[d] ./
COPY catalog/ catalog/
COPY alembic/ alembic/
COPY spec/ spec/

RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --upgrade pip \
 && pip install . \
 && pip check \
 && iceberg-catalog --help > /dev/null

# ---------------------------------------------------------------------------------------------
# runtime: the same base image, the virtualenv, an unprivileged user; nothing else.
# ---------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="iceberg-catalog" \
      org.opencontainers.image.description="Apache Iceberg REST catalog server" \
      org.opencontainers.image.licenses="Apache-2.0"

# Numeric uid/gid so Kubernetes' runAsNonRoot can verify the user without /etc/passwd lookups.
ARG UID=10001
ARG GID=10001
RUN groupadd --system --gid "${GID}" catalog \
 && useradd --system --uid "${UID}" --gid "${GID}" --no-create-home --home-dir /var/lib/iceberg-catalog \
        --shell /usr/sbin/nologin catalog \
 && mkdir -p /var/lib/iceberg-catalog \
 && chown "${UID}:${GID}" /var/lib/iceberg-catalog

COPY --from=build /opt/venv /opt/venv

# PYTHONDONTWRITEBYTECODE: the image works with a read-only root filesystem (bytecode was compiled
# at install time). The working directory is the only writable place in the image: the embedded
# defaults (sqlite:///catalog.db, ./warehouse) land there when nothing else is configured.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    CATALOG_HOST=0.0.0.0
WORKDIR /var/lib/iceberg-catalog
USER ${UID}:${GID}

EXPOSE 8181

# Liveness only (the process answers HTTP); readiness (/health/ready) also needs the database and
# storage, which is an orchestrator's concern. urlopen raises on refused connections and non-2xx.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('CATALOG_PORT', '8181') + '/health/live', timeout=4)"]

ENTRYPOINT ["iceberg-catalog"]
CMD ["serve"]
