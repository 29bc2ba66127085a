#!/usr/bin/env bash
# Builds the node binaries that pkg/testenv's cluster mode runs: kubelet,
# kube-controller-manager and kube-scheduler (v1.36.3, from hack/tools, via
# hack/build-controlplane.sh so the version ldflags are identical) and
# containerd 2.x with its runc shim and ctr (from hack/containerd, CGO off).
# Everything goes into a cache outside the repository; a binary already there
# is reused. Set FORCE=1 to rebuild.
#
# runc and the CNI plugins come from Debian (hack/prereqs.sh installs them).
#
# Usage: hack/build-node.sh
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
base=${XDG_CACHE_HOME:-$HOME/.cache}/handlerkit

"$here/build-controlplane.sh" kube-apiserver etcd kube-controller-manager kube-scheduler kubelet

containerd_version=$(cd "$here/containerd" && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)
cache=${HANDLERKIT_CONTAINERD_DIR:-$base/containerd/$containerd_version}
mkdir -p "$cache"
pkg=github.com/containerd/containerd/v2
ldflags="-s -w -X $pkg/version.Version=$containerd_version -X $pkg/version.Package=$pkg"
for name in containerd containerd-shim-runc-v2 ctr; do
  out="$cache/$name"
  if [[ -x $out && -z ${FORCE:-} ]]; then
    echo "node: $name cached at $out"
    continue
  fi
  echo "node: building $name $containerd_version into $out"
  start=$SECONDS
  (cd "$here/containerd" && CGO_ENABLED=0 go build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
    -ldflags "$ldflags" -o "$out.tmp" "$pkg/cmd/$name")
  mv "$out.tmp" "$out"
  echo "node: built $name in $((SECONDS - start))s"
done
