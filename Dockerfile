# busbar in a container: `docker build -t busbar --build-arg BUSBAR_COMMIT=$(git rev-parse --short=12 HEAD) .`
# then `docker run -p 8280:8280 busbar` serves examples/esb-benchmark.yaml with its embedded
# echo back end. Mount your own config over /etc/busbar/busbar.yaml, or pass its path:
# `docker run -v $PWD/my.yaml:/etc/busbar/my.yaml busbar run /etc/busbar/my.yaml`.

# --- build -------------------------------------------------------------------------------
FROM rust:1.95-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends pkg-config libxml2-dev libxslt1-dev openssl \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
ARG BUSBAR_COMMIT=unknown
RUN BUSBAR_COMMIT="${BUSBAR_COMMIT}" cargo build --release --locked --bin busbar \
 && tests/interop/keys.sh /src/keys

# --- run ---------------------------------------------------------------------------------
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libxml2 libxslt1.1 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin busbar
COPY --from=build /src/target/release/busbar /usr/local/bin/busbar
COPY examples/ /etc/busbar/
# The example's WS-Security proxies need keys: test keys made at build time, for the example
# only. Mount real ones over /etc/busbar/keys (and set SERVER_KEY_PASSWORD) for real use.
COPY --from=build --chown=10001:10001 /src/keys/ /etc/busbar/keys/
RUN cp /etc/busbar/esb-benchmark.yaml /etc/busbar/busbar.yaml
ENV BUSBAR_KEYS=/etc/busbar/keys \
    NO_COLOR=1
USER 10001:10001
WORKDIR /etc/busbar
EXPOSE 8280
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["busbar", "health", "http://127.0.0.1:9901/healthz"]
ENTRYPOINT ["busbar"]
CMD ["run", "/etc/busbar/busbar.yaml"]
