#!/usr/bin/env bash
# Regenerates everything derived from the API types, for the main API
# (pkg/apis) and the memcached example's (examples/memcached-operator/pkg/apis):
#   - zz_generated.deepcopy.go and zz_generated.register.go next to the types,
#   - the clientset, listers and informers in <root>/pkg/generated,
#   - the CRD manifests in <root>/deploy/crds.
# Each API root gets its own generated packages, so the example's clients
# never mix with the main API's.
# The generators are built from the versions go.mod pins (hack/tools.go), out
# of the Go module cache, so a fresh clone needs nothing but Go.
#
# Environment:
#   HANDLERKIT_CODEGEN_BIN  where the generator binaries are cached
#                           (default: ${XDG_CACHE_HOME:-~/.cache}/handlerkit/codegen/<versions>)
#   KUBE_VERBOSE            generator verbosity, passed on by kube_codegen.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$root"

module=$(go list -m)
# A go.work elsewhere on the path must not change which versions are used.
export GOWORK=off

codegen_version=$(go list -m -f '{{.Version}}' k8s.io/code-generator)
controller_tools_version=$(go list -m -f '{{.Version}}' sigs.k8s.io/controller-tools)
codegen_dir=$(go list -m -f '{{.Dir}}' k8s.io/code-generator)
if [[ -z $codegen_dir || ! -f $codegen_dir/kube_codegen.sh ]]; then
  go mod download k8s.io/code-generator sigs.k8s.io/controller-tools
  codegen_dir=$(go list -m -f '{{.Dir}}' k8s.io/code-generator)
fi

# kube_codegen.sh installs its generators into $GOBIN; point that at a cache
# keyed by version instead of the user's bin directory.
bin=${HANDLERKIT_CODEGEN_BIN:-${XDG_CACHE_HOME:-${HOME:?set HOME, XDG_CACHE_HOME or HANDLERKIT_CODEGEN_BIN}/.cache}/handlerkit/codegen/code-generator-${codegen_version}_controller-tools-${controller_tools_version}}
mkdir -p "$bin"
export GOBIN=$bin

boilerplate="$root/hack/boilerplate.go.txt"
# The API roots, relative to the module root: each has pkg/apis, and gets
# pkg/generated and deploy/crds.
api_roots=(. examples/memcached-operator)

# kube_codegen.sh greps these for stale files before it generates them.
for r in "${api_roots[@]}"; do
  mkdir -p "$root/$r/pkg/generated/clientset" "$root/$r/pkg/generated/listers" "$root/$r/pkg/generated/informers"
done

# shellcheck source=/dev/null
source "$codegen_dir/kube_codegen.sh"

for r in "${api_roots[@]}"; do
  # kube_codegen.sh's functions set globals such as dir and pkg; these
  # names keep clear of them.
  api_dir=$root/$r
  if [[ $r == . ]]; then api_pkg=$module; else api_pkg=$module/$r; fi

  kube::codegen::gen_helpers \
    --boilerplate "$boilerplate" \
    "$api_dir/pkg/apis"

  kube::codegen::gen_register \
    --boilerplate "$boilerplate" \
    "$api_dir/pkg/apis"

  kube::codegen::gen_client \
    --with-watch \
    --boilerplate "$boilerplate" \
    --output-dir "$api_dir/pkg/generated" \
    --output-pkg "$api_pkg/pkg/generated" \
    "$api_dir/pkg/apis"
done

# controller-gen comes from the main module so that go.mod pins it; it needs
# the deepcopy and register code above to type-check the API packages.
echo "Generating CRD manifests"
# Build beside the binary and rename over it, so that a concurrent run (two
# verifications at once) never executes a half-written file. With GOBIN set,
# go list says whether the cached binary is what go.mod and this toolchain
# would build; when it is, skip the link (several seconds on every run).
if [[ $(go list -f '{{.Stale}}' sigs.k8s.io/controller-tools/cmd/controller-gen) != false ]]; then
  go build -o "$bin/controller-gen.$$" sigs.k8s.io/controller-tools/cmd/controller-gen
  mv -f "$bin/controller-gen.$$" "$bin/controller-gen"
fi
for r in "${api_roots[@]}"; do
  # A relative path that starts with ./, which controller-gen needs to read
  # it as a directory rather than an import path.
  rel=.; [[ $r == . ]] || rel=./$r
  "$bin/controller-gen" \
    crd:crdVersions=v1 \
    paths="$rel/pkg/apis/..." \
    output:crd:dir="$rel/deploy/crds"
done
# The Helm chart installs and upgrades the same CRD from a template that reads
# files/crds/ (test/deploy and make verify keep it equal). The chart is absent
# from hack/verify-codegen.sh's copy, which skips this.
chart_crds=charts/prometheus-jmx-exporter-operator/files/crds
if [[ -d $chart_crds ]]; then
  cp deploy/crds/jmx.handlerkit.dev_prometheusjmxexporters.yaml "$chart_crds/"
fi
