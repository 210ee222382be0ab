# The race server (plot-server) on Redis; docker-compose.yml runs it next to Redis 7, behind HAProxy.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY server ./server
COPY client ./client
# The server extra brings redis with hiredis; the test and bench extras stay out of the image.
# PyICU (shared/names.py) builds against the system's ICU: the headers, pkg-config and a compiler
# for the build, the compiler removed after it (the ICU libraries stay: PyICU links them).
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ pkg-config libicu-dev \
    && pip install '.[server]' \
    && apt-get purge -y --auto-remove g++ \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home plot

USER plot
# The WebSocket port; GET /healthz (the store's health) and GET /metrics on the same port.
EXPOSE 8765
# The spectator page (docs/web.md): plot-server serves it on the port after the game port.
EXPOSE 8766
CMD ["plot-server", "--host", "0.0.0.0", "--port", "8765", "--redis", "redis://redis:6379/0"]
