# syntax=docker/dockerfile:1
#
# The agent image: the PrometheusJmxExporter operator, jmx-attach and the
# jmx_exporter java agent, at the paths the manifests, the CRD's defaults and
# the image built without Docker for the tests and the demo (make images,
# pkg/images/testimages) use:
#
#   /usr/local/bin/prometheus-jmx-exporter-operator   the operator (deploy/operator/operator.yaml)
#   /usr/local/bin/jmx-attach                         the entrypoint of the ephemeral container
#   /opt/handlerkit/jmx_prometheus_javaagent.jar      the java agent
#
# Build it with `make image` (needs a Docker engine). test/deploy checks these
# paths against pkg/images/testimages.

ARG GO_VERSION=1.26

# Both commands, static (no cgo: the final image has no libc).
FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY pkg/ pkg/
COPY internal/ internal/
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ \
      ./cmd/prometheus-jmx-exporter-operator ./cmd/jmx-attach

# The java agent from its GitHub release, checked against the pinned digest:
# a changed or corrupted download fails the build.
FROM golang:${GO_VERSION} AS agent
ARG JMX_EXPORTER_VERSION=1.6.0
ARG JMX_EXPORTER_SHA256=a95983fd96e865d2bcdf911cc500e7c82808c27ab9fd226bf96732b6c3d8c46e
RUN curl -fsSL --retry 3 -o /jmx_prometheus_javaagent.jar \
      "https://github.com/prometheus/jmx_exporter/releases/download/${JMX_EXPORTER_VERSION}/jmx_prometheus_javaagent-${JMX_EXPORTER_VERSION}.jar" \
 && echo "${JMX_EXPORTER_SHA256}  /jmx_prometheus_javaagent.jar" | sha256sum -c -

# Nothing but the three files: no shell, no libc, no package manager.
FROM scratch
COPY --from=build /out/prometheus-jmx-exporter-operator /usr/local/bin/prometheus-jmx-exporter-operator
COPY --from=build /out/jmx-attach /usr/local/bin/jmx-attach
COPY --from=agent --chmod=0644 /jmx_prometheus_javaagent.jar /opt/handlerkit/jmx_prometheus_javaagent.jar
LABEL org.opencontainers.image.source="https://github.com/handlerkit/handlerkit"
# Non-root by default. The operator sets the ephemeral container's user to the
# JVM's (pkg/inject SecurityContext), and its own Deployment runs as 65532.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/jmx-attach"]
