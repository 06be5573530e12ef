# upgradeplan-controller: a static (musl) release binary on distroless, as a non-root user.
# No container engine runs on this project's build machines; this file is conventional and
# untested here: docker build -t upgradeplan-controller:v0.1.0 .
FROM rust:1.95-alpine AS build
RUN apk add --no-cache musl-dev
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p upgradeplan-controller \
 && cp target/release/upgradeplan-controller /upgradeplan-controller

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="upgradeplan-controller" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/upgradeplan/upgradeplan" \
      org.opencontainers.image.licenses="MIT"
COPY --from=build /upgradeplan-controller /upgradeplan-controller
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/upgradeplan-controller"]
