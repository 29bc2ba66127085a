#!/usr/bin/env bash
# Builds the control-plane binaries pkg/testenv runs (kube-apiserver, etcd) from
# the Go module proxy into a cache outside the repository. A binary already in
# the cache is reused; set FORCE=1 to rebuild.
#
# Usage: hack/build-controlplane.sh [binary...]   (default: kube-apiserver etcd)
set -euo pipefail

KUBE_VERSION=v1.36.3
here=$(cd "$(dirname "$0")" && pwd)
cache=${HANDLERKIT_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/handlerkit/controlplane/$KUBE_VERSION}
mkdir -p "$cache"

pkg="k8s.io/component-base/version"
minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
kube_ldflags="-s -w \
 -X $pkg.gitVersion=$KUBE_VERSION \
 -X $pkg.gitMajor=1 \
 -X $pkg.gitMinor=$minor \
 -X $pkg.gitTreeState=clean \
 -X $pkg.buildDate=1970-01-01T00:00:00Z"

build() { # name package ldflags
  local name=$1 pkgpath=$2 flags=$3 out="$cache/$1"
  if [[ -x $out && -z ${FORCE:-} ]]; then
    echo "controlplane: $name cached at $out"
    return
  fi
  echo "controlplane: building $name ($pkgpath) into $out; a cold build takes minutes"
  local start=$SECONDS
  (cd "$here/tools" && CGO_ENABLED=0 go build -trimpath -ldflags "$flags" -o "$out.tmp" "$pkgpath")
  mv "$out.tmp" "$out"
  echo "controlplane: built $name in $((SECONDS - start))s"
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(kube-apiserver etcd)
for t in "${targets[@]}"; do
  case $t in
    etcd) build etcd ./cmd/etcd "-s -w" ;;
    kube-apiserver|kube-controller-manager|kube-scheduler|kubelet)
      build "$t" "k8s.io/kubernetes/cmd/$t" "$kube_ldflags" ;;
    *) echo "controlplane: unknown binary $t" >&2; exit 2 ;;
  esac
done
