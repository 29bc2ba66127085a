#!/usr/bin/env bash
# Checks what `make verify` promises: gofmt, go vet, tidy go.mod files and
# fresh generated code. Exits non-zero with the reason on the first failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

echo "verify: gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [[ -n $unformatted ]]; then
  echo "gofmt would change:" >&2; echo "$unformatted" >&2; exit 1
fi

echo "verify: go vet"
go vet ./...
# bench/, test/monitoring/ and test/helm/ are modules of their own
# (controller-runtime, Prometheus Operator, Prometheus and Helm stay out of ours).
(cd bench && go vet ./...)
(cd test/monitoring && go vet ./...)
(cd test/helm && go vet ./...)

echo "verify: go mod tidy"
for dir in . bench test/monitoring test/helm $(dirname hack/*/go.mod); do
  tmp=$(mktemp -d)
  cp "$dir/go.mod" "$dir/go.sum" "$tmp/"
  (cd "$dir" && go mod tidy)
  if ! diff -u "$tmp/go.mod" "$dir/go.mod" || ! diff -u "$tmp/go.sum" "$dir/go.sum"; then
    cp "$tmp/go.mod" "$tmp/go.sum" "$dir/"
    rm -rf "$tmp"
    echo "verify: $dir/go.mod is not tidy; run 'go mod tidy' there" >&2; exit 1
  fi
  rm -rf "$tmp"
done

if [[ -x hack/verify-codegen.sh ]]; then
  echo "verify: codegen"
  hack/verify-codegen.sh
fi
echo "verify: chart"
chart=charts/prometheus-jmx-exporter-operator
# The chart's copies (hack/update-codegen.sh writes the CRD's, make chart the
# dashboard's) and its README.md, which hack/chartdoc writes from values.yaml.
for pair in "deploy/crds/jmx.handlerkit.dev_prometheusjmxexporters.yaml $chart/files/crds/jmx.handlerkit.dev_prometheusjmxexporters.yaml" \
  "deploy/grafana/prometheus-jmx-exporter.json $chart/files/dashboards/prometheus-jmx-exporter.json"; do
  set -- $pair
  if ! cmp -s "$1" "$2"; then
    echo "verify: $2 differs from $1; run 'make codegen' (the CRD) or 'make chart' (the dashboard)" >&2; exit 1
  fi
done
go run ./hack/chartdoc -check "$chart"
echo "verify: ok"
