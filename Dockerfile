# Lacuna operator app: Streamlit UI + local Spark (Java 17) on Debian bookworm.
#   docker build -t lacuna .
#   export LACUNA_TOKEN="$(openssl rand -hex 16)"; echo "sign in with $LACUNA_TOKEN"
#   docker run --rm --hostname lacuna -p 127.0.0.1:8501:8501 -e LACUNA_TOKEN \
#       -v lacuna-data:/home/lacuna/.lacuna lacuna
# Without LACUNA_TOKEN (or [auth] in a .streamlit/secrets.toml mounted at
# /app/.streamlit/secrets.toml) the container refuses to start: it listens on 0.0.0.0.
# A fixed --hostname lets a new container take over the pipeline lock a crashed one
# left in the volume (a lock naming another host is never taken over). A bind mount
# instead of the volume must be writable by uid 10001. Publish the port on the
# host's loopback (as above) and put a TLS reverse proxy in front for remote users
# (docs/OPERATIONS.md, "Docker and who may act").
#
# Base image pinned by tag and digest. The digest is the one public Dockerfiles pin
# for this tag and has not been verified against Docker Hub: check it before a
# release:  docker buildx imagetools inspect python:3.11.14-slim-bookworm
FROM python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

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

# Every transitive package pinned (constraints.txt), installed as root.
COPY requirements.txt constraints.txt ./
RUN pip install -r requirements.txt -c constraints.txt

# The code stays owned by root and read-only to the runtime user: a compromised
# app process cannot rewrite the app. Only LACUNA_HOME is writable.
COPY app.py pyproject.toml ./
# config.toml only: a developer's secrets.toml ([auth] client and cookie secrets) is
# mounted at run time, never baked into the image
COPY .streamlit/config.toml ./.streamlit/config.toml
COPY engine ./engine
COPY ui ./ui
COPY pages ./pages
COPY sample_data ./sample_data
RUN chmod -R a+rX,go-w /app

USER lacuna
RUN mkdir -p "$LACUNA_HOME"
VOLUME ["/home/lacuna/.lacuna"]
EXPOSE 8501

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD curl --fail --silent http://127.0.0.1:8501/_stcore/health || exit 1

# 0.0.0.0 inside the container is what a published port reaches; which host
# interface is exposed is chosen by `docker run -p` (loopback above). A port that
# others can reach needs credentials: without LACUNA_TOKEN (or [auth] in a mounted
# .streamlit/secrets.toml) the container refuses to start, in one line (ui/access.py).
CMD ["sh", "-c", "python -m ui.access 0.0.0.0 && exec streamlit run app.py --server.port=8501 --server.address=0.0.0.0 --server.headless=true"]
