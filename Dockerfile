# Lacuna operator app: Streamlit UI + local Spark (Java 17) on Debian bookworm.
#   docker build -t lacuna .
#   docker run --rm -p 8501:8501 -v lacuna-data:/home/lacuna/.lacuna lacuna
FROM python:3.11-slim-bookworm

# Java 17 runs Spark in local mode; curl serves the health check.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps curl \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    OPENBLAS_NUM_THREADS=1 \
    LACUNA_HOME=/home/lacuna/.lacuna

RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin lacuna
WORKDIR /app

COPY requirements.txt ./
RUN pip install -r requirements.txt

COPY --chown=lacuna:lacuna app.py pyproject.toml ./
COPY --chown=lacuna:lacuna .streamlit ./.streamlit
COPY --chown=lacuna:lacuna engine ./engine
COPY --chown=lacuna:lacuna ui ./ui
COPY --chown=lacuna:lacuna pages ./pages
COPY --chown=lacuna:lacuna sample_data ./sample_data

USER lacuna
RUN mkdir -p "$LACUNA_HOME"
VOLUME ["/home/lacuna/.lacuna"]
EXPOSE 8501

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD curl --fail --silent http://127.0.0.1:8501/_stcore/health || exit 1

CMD ["streamlit", "run", "app.py", "--server.port=8501", "--server.address=0.0.0.0", "--server.headless=true"]
