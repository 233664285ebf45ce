# syntax=docker/dockerfile:1
# hivegate container image: a multi-stage build with a dependency layer cached apart from the source,
# and a small runtime image that runs as an unprivileged user.
#
#   docker build -t hivegate:0.1.0 --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" .
#
# Configuration comes from the environment (HIVEGATE_LISTEN, HIVEGATE_DATABASE_URL, HIVEGATE_ADMIN_TOKEN and
# HIVEGATE_<SECTION>__<KEY> for every key of config/hivegate.toml); see docs/operations.md and deploy/.
# deploy/validate lints this file and checks its build context and runtime settings without a Docker engine.

FROM rust:1.95-bookworm AS build
WORKDIR /src
# Dependencies first: this layer is rebuilt only when Cargo.toml or Cargo.lock change. The placeholder crate
# has the same targets as the real one (a library and the `hivegate` binary), so every dependency is built
# here. The [[test]] target's sources are absent, which `cargo build` does not mind.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && cargo build --release --locked \
    && rm -rf src
# The crate itself. The migrations are embedded into the binary at compile time (sqlx::migrate!), so they
# must be here for this build; the runtime image needs no copy of them.
COPY src ./src
COPY migrations ./migrations
# COPY keeps the files' own modification times, which can be older than the placeholder's build: touch the
# crate roots so cargo rebuilds the library and the binary instead of reusing the placeholders.
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked --bin hivegate

FROM debian:bookworm-slim AS runtime
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="hivegate" \
      org.opencontainers.image.description="A multi-tenant MCP gateway" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
# No packages are added: the binary needs only the C library, and PostgreSQL connections use no TLS
# library (terminate TLS in front of the database's network, or keep it on a private network).
# The data directory holds the SQLite database when no PostgreSQL URL is given; mount a volume there.
RUN groupadd --system --gid 10001 hivegate \
    && useradd --system --uid 10001 --gid hivegate --home-dir /var/lib/hivegate --create-home \
       --shell /usr/sbin/nologin hivegate
COPY --from=build /src/target/release/hivegate /usr/local/bin/hivegate
COPY config/hivegate.toml /etc/hivegate/hivegate.toml
WORKDIR /var/lib/hivegate
# Numeric, so that Kubernetes' runAsNonRoot can check it.
USER 10001:10001
ENV HIVEGATE_CONFIG=/etc/hivegate/hivegate.toml \
    HIVEGATE_LISTEN=0.0.0.0:8080 \
    HIVEGATE_DATABASE_URL=sqlite:///var/lib/hivegate/hivegate.db?mode=rwc \
    HIVEGATE_LOG__FORMAT=json
EXPOSE 8080
# `hivegate healthcheck` asks this instance's /readyz (on loopback when listening on 0.0.0.0), so the image
# needs no curl. The start period covers the database start-up retries.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["hivegate", "healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["hivegate"]
CMD ["serve"]
