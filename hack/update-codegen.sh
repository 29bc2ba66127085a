#!/usr/bin/env bash
# Regenerates everything derived from the API types in pkg/apis:
#   - zz_generated.deepcopy.go and zz_generated.register.go next to the types,
#   - the clientset, listers and informers in pkg/generated,
#   - the CRD manifests in deploy/crds.
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
# kube_codegen.sh greps these for stale files before it generates them.
mkdir -p "$root/pkg/generated/clientset" "$root/pkg/generated/listers" "$root/pkg/generated/informers"

# shellcheck source=/dev/null
source "$codegen_dir/kube_codegen.sh"

kube::codegen::gen_helpers \
  --boilerplate "$boilerplate" \
  "$root/pkg/apis"

kube::codegen::gen_register \
  --boilerplate "$boilerplate" \
  "$root/pkg/apis"

kube::codegen::gen_client \
  --with-watch \
  --boilerplate "$boilerplate" \
  --output-dir "$root/pkg/generated" \
  --output-pkg "$module/pkg/generated" \
  "$root/pkg/apis"

# controller-gen comes from the main module so that go.mod pins it; it needs
# the deepcopy and register code above to type-check the API packages.
echo "Generating CRD manifests"
# Build beside the binary and rename over it, so that a concurrent run (two
# verifications at once) never executes a half-written file.
go build -o "$bin/controller-gen.$$" sigs.k8s.io/controller-tools/cmd/controller-gen
mv -f "$bin/controller-gen.$$" "$bin/controller-gen"
"$bin/controller-gen" \
  crd:crdVersions=v1 \
  paths=./pkg/apis/... \
  output:crd:dir=./deploy/crds
