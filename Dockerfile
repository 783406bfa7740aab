# One image for the server side (web, worker, beat) and the example agents.
# GPU nodes run the agent from their own Python with their own torch (see README).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends iproute2 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements/ requirements/
# CPU build of torch for the example agents; --no-deps keeps the CUDA packages out.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN pip install --no-cache-dir -r requirements/server.txt -r requirements/torch-cpu.txt \
 && pip install --no-cache-dir --no-deps --index-url "$TORCH_INDEX_URL" torch==2.13.0
COPY manage.py ./
COPY agents/ agents/
COPY cluster_health/ cluster_health/
COPY templates/ templates/
RUN useradd --system --uid 10001 --home-dir /app clusterhealth && mkdir -p /app/var && chown clusterhealth /app/var
USER clusterhealth
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "cluster_health.asgi:application"]
