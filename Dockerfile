# syntax=docker/dockerfile:1
#
# Fleetwright image: one binary, every role. The default command runs the
# panel with its embedded Postgres and Redis under /var/lib/fleetwright; the
# same image runs an agent with
#   docker run ... fleetwright --role=agent --panel=wss://panel.example.com/agent/ws \
#     --token-file=/run/secrets/agent_token --state-dir=/var/lib/fleetwright/agent
# Pin the two base images by digest in release builds (FROM image:tag@sha256:...).

ARG GO_VERSION=1.26

# ---- build ----
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Dependencies first: this layer is reused until go.mod or go.sum changes.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# templ output is committed, so a plain go build is enough.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/fleetwright .

# ---- runtime ----
FROM debian:bookworm-slim AS runtime
# postgresql-common would otherwise create and start a "main" cluster at
# install time; the panel runs its own cluster under its data dir.
RUN mkdir -p /etc/postgresql-common/createcluster.d \
 && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.d/fleetwright.conf \
 && apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates \
      chromium \
      curl \
      postgresql \
      redis-server \
      tini \
 && rm -rf /var/lib/apt/lists/*

# A dedicated non-root user. The embedded Postgres runs as this user too
# (initdb only refuses root).
RUN groupadd --system --gid 10001 fleetwright \
 && useradd --system --uid 10001 --gid fleetwright --home-dir /var/lib/fleetwright \
      --shell /usr/sbin/nologin fleetwright \
 && mkdir -p /var/lib/fleetwright \
 && chown fleetwright:fleetwright /var/lib/fleetwright \
 && chmod 0700 /var/lib/fleetwright

COPY --from=build /out/fleetwright /usr/local/bin/fleetwright

# Chromium (agent role) writes its profile and caches under HOME and XDG. It
# runs as this non-root user with its sandbox (user namespaces; see
# docs/DEPLOY.md for the seccomp profile), driven over a pipe, no port.
ENV HOME=/var/lib/fleetwright \
    XDG_CONFIG_HOME=/var/lib/fleetwright/.config \
    XDG_CACHE_HOME=/var/lib/fleetwright/.cache

USER fleetwright:fleetwright
WORKDIR /var/lib/fleetwright
VOLUME ["/var/lib/fleetwright"]
EXPOSE 8080

# /healthz says the process is alive (readiness is /readyz and belongs to the
# load balancer). The agent role serves no HTTP: run it with --no-healthcheck.
HEALTHCHECK --interval=30s --timeout=3s --start-period=60s --retries=3 \
  CMD curl -fsS --max-time 2 "${HEALTHCHECK_URL:-http://127.0.0.1:8080/healthz}" > /dev/null || exit 1

# tini is PID 1: it reaps Chromium's and Postgres's orphans and forwards
# SIGTERM to the panel alone (no -g), which then stops its embedded Postgres
# and Redis in order. Give it time: docker stop --time=60.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/fleetwright"]
CMD ["--role=panel", "--listen=0.0.0.0:8080", "--data-dir=/var/lib/fleetwright"]
