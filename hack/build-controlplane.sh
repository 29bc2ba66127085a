#!/usr/bin/env bash
# Builds the control-plane binaries pkg/testenv runs (kube-apiserver, etcd) from
# the Go module proxy into a cache outside the repository, with the recipe
# pkg/testenv itself uses when a binary is missing (cmd/testenv-build; the
# modules are hack/tools and hack/containerd, embedded in pkg/testenv/testbin/buildmod).
# A binary already in the cache is reused; set FORCE=1 to rebuild.
#
# Usage: hack/build-controlplane.sh [binary...]   (default: kube-apiserver etcd)
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run ./cmd/testenv-build ${FORCE:+-force} "$@"
