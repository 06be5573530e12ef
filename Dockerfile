# upgradeplan-controller: a static release binary on a minimal base, run as a non-root user.
#
#   docker build -t upgradeplan-controller:v0.1.0 .
#
# builds it from source on the Rust image (musl: static) and ships it on distroless. The bases are
# arguments so that a machine that can reach no registry builds this same file: `make image`
# passes BINARY=prebuilt (the static binary the host built into target/image/, instead of a build
# stage that needs the Rust image) and RUNTIME_BASE=scratch (the user is numeric: no /etc/passwd
# needed). It needs BuildKit (DOCKER_BUILDKIT=1, the default of current Docker), which builds only
# the stages the result uses.
ARG RUST_IMAGE=rust:1.95-alpine
ARG RUNTIME_BASE=gcr.io/distroless/static-debian12:nonroot
ARG BINARY=source

FROM ${RUST_IMAGE} AS source
RUN apk add --no-cache musl-dev
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p upgradeplan-controller \
 && cp target/release/upgradeplan-controller /upgradeplan-controller

FROM scratch AS prebuilt
COPY target/image/upgradeplan-controller /upgradeplan-controller

FROM ${BINARY} AS binary

FROM ${RUNTIME_BASE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="upgradeplan-controller" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/upgradeplan/upgradeplan" \
      org.opencontainers.image.licenses="MIT"
COPY --from=binary /upgradeplan-controller /upgradeplan-controller
# deploy/core/deployment.yaml: runAsUser/runAsGroup 65532, ports https 8443 (metrics) and health 8081.
USER 65532:65532
EXPOSE 8443 8081
ENTRYPOINT ["/upgradeplan-controller"]
