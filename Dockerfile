# The Can't Stop API: `cantstop serve` (gunicorn, gthread workers) on port 8000.
# Configuration by environment (README, Configuration): CANTSTOP_DATABASE_URL, CANTSTOP_REDIS_URL,
# CANTSTOP_RATE_LIMITS, CANTSTOP_WORKERS, CANTSTOP_THREADS, CANTSTOP_PG_POOL_SIZE, ...
# Several hosts: deploy/docker-compose.yml and deploy/README.md.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin cantstop
WORKDIR /app

# A regular install: the wheel carries what the service reads at run time (openapi.yaml and the
# gunicorn settings, service/gunicorn_settings.py). var/ holds the default SQLite store.
COPY pyproject.toml README.md openapi.yaml ./
COPY domain ./domain
COPY service ./service
RUN pip install . \
    && mkdir -p /app/var \
    && chown cantstop:cantstop /app/var

USER cantstop
# gunicorn binds 0.0.0.0:8000 (the CMD); the default SQLite store (var/) is for trying it out only:
# give CANTSTOP_DATABASE_URL a PostgreSQL URL in production.
EXPOSE 8000

# python:3.11-slim has no curl: ask /healthz with the standard library. 200 = the database answers
# (Redis being down is reported in the body but is not a reason to restart the API).
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; r = urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4); sys.exit(0 if r.status == 200 else 1)"]

CMD ["cantstop", "serve", "--host", "0.0.0.0", "--port", "8000"]
