#!/usr/bin/env bash
# Builds the binaries that pkg/testenv's cluster mode runs: the control plane,
# kubelet, kube-controller-manager and kube-scheduler (v1.36.3, from the module
# in hack/tools) and containerd 2.x with its runc shim and ctr (from the module
# in hack/containerd, CGO off), with the recipe pkg/testenv itself uses
# (cmd/testenv-build). Everything goes into a cache outside the repository; a
# binary already there is reused. Set FORCE=1 to rebuild.
#
# runc and the CNI plugins come from Debian (hack/prereqs.sh installs them).
#
# Usage: hack/build-node.sh
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run ./cmd/testenv-build -node ${FORCE:+-force}
