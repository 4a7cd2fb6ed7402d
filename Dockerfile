# Both baton binaries in one minimal image: the Deployments pick one with `command`.
#   docker build -t baton:0.1.0 .   (the workspace version; deploy/ refers to it)
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p baton-controller -p baton-webhook \
 && cp target/release/baton-controller target/release/baton-webhook /usr/local/bin/

# Debian slim: a shell for debugging in the pod (no hook needs one: the webhook's shutdown delay
# is in-process, see docs/operations.md).
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 baton \
 && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin baton
COPY --from=build /usr/local/bin/baton-controller /usr/local/bin/baton-webhook /usr/local/bin/
USER 65532:65532
EXPOSE 8001 8443
ENTRYPOINT []
CMD ["/usr/local/bin/baton-controller"]
