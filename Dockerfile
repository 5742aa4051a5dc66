# SMD Lab image, used by both the `api` and the `worker` services of docker-compose.yml.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MPLBACKEND=Agg

# torch is pinned and installed before the project (as the Makefile does).
# In the image use the CUDA build of torch matching the GPU hosts' driver: the default PyPI
# wheel for Linux x86_64 is a CUDA build; to pick a specific one pass e.g.
#   docker compose build --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=
RUN if [ -n "$TORCH_INDEX_URL" ]; then \
        pip install --index-url "$TORCH_INDEX_URL" "torch==${TORCH_VERSION}"; \
    else \
        pip install "torch==${TORCH_VERSION}"; \
    fi

WORKDIR /app
COPY . /app
RUN pip install /app

RUN useradd --create-home --uid 1000 --shell /usr/sbin/nologin smd
USER smd

EXPOSE 8000
CMD ["smd", "api"]
