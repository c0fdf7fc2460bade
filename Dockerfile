# The taskfleet worker image (used by docker-compose.yml). Not built in taskfleet's CI: no Docker engine there.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY taskfleet ./taskfleet
COPY workflows ./workflows
COPY activities ./activities
COPY examples ./examples
RUN pip install --no-cache-dir '.[s3]'  # s3: a payload store that every pod sees
# Connection comes from TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE / TEMPORAL_API_KEY / TEMPORAL_TLS_* at run time.
STOPSIGNAL SIGTERM
CMD ["taskfleet-worker"]
