# syntax=docker/dockerfile:1
#
# The agent image: the PrometheusJmxExporter operator, jmx-attach and the
# project's JMX exporter java agent (agent/, docs/agent.md), at the paths the
# manifests, the CRD's defaults and the image built without Docker for the
# tests and the demo (make images, pkg/images/testimages) use:
#
#   /usr/local/bin/prometheus-jmx-exporter-operator   the operator (deploy/operator/operator.yaml)
#   /usr/local/bin/jmx-attach                         the entrypoint of the ephemeral container
#   /opt/handlerkit/jmx-agent.jar                     the java agent
#
# Build it with `make image` (needs a Docker engine). test/deploy checks these
# paths against pkg/images/testimages.

ARG GO_VERSION=1.26
# Maven 3.9 on a JDK 17 (the agent compiles with --release 8).
ARG MAVEN_IMAGE_TAG=3.9.9-eclipse-temurin-17

# Both commands, static (no cgo: the final image has no libc).
FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY pkg/ pkg/
COPY internal/ internal/
# The version --version and the build_info metric report (make image passes
# them; .git is not in the build context).
ARG VERSION=dev
ARG COMMIT=unknown
ARG DATE=unknown
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w \
      -X github.com/handlerkit/handlerkit/internal/buildinfo.version=${VERSION} \
      -X github.com/handlerkit/handlerkit/internal/buildinfo.commit=${COMMIT} \
      -X github.com/handlerkit/handlerkit/internal/buildinfo.date=${DATE}" -o /out/ \
      ./cmd/prometheus-jmx-exporter-operator ./cmd/jmx-attach

# The java agent, built from agent/ as `make agent` and the tests build it:
# agent/pom.xml pins every dependency and plugin version, and the Maven image
# is pinned by tag.
FROM maven:${MAVEN_IMAGE_TAG} AS agent
WORKDIR /src/agent
COPY agent/pom.xml ./
COPY agent/src/ src/
RUN --mount=type=cache,target=/root/.m2 \
    mvn -q -B package -DbuildDirectory=/build \
 && cp /build/handlerkit-jmx-agent.jar /handlerkit-jmx-agent.jar

# Nothing but the three files: no shell, no libc, no package manager.
FROM scratch
COPY --from=build /out/prometheus-jmx-exporter-operator /usr/local/bin/prometheus-jmx-exporter-operator
COPY --from=build /out/jmx-attach /usr/local/bin/jmx-attach
COPY --from=agent --chmod=0644 /handlerkit-jmx-agent.jar /opt/handlerkit/jmx-agent.jar
LABEL org.opencontainers.image.source="https://github.com/handlerkit/handlerkit"
# Non-root by default. The operator sets the ephemeral container's user to the
# JVM's (pkg/inject SecurityContext), and its own Deployment runs as 65532.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/jmx-attach"]
