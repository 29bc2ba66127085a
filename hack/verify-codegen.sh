#!/usr/bin/env bash
# Fails, printing a unified diff, when the committed generated code or CRD
# manifests differ from what hack/update-codegen.sh produces from the current
# types. It regenerates in a temporary copy, so the working tree is never
# touched, even when it is stale.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
generated=(pkg/apis pkg/generated deploy/crds
  examples/memcached-operator/pkg/apis examples/memcached-operator/pkg/generated examples/memcached-operator/deploy/crds)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/handlerkit-verify-codegen.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The copy holds what the generators read (the module files, the scripts and
# the API types) plus the committed output, so that generated files which
# would no longer be produced show up as a diff as well. It deliberately
# leaves out the rest of the repository: the generators do not read it.
mkdir -p "$tmp/work/hack"
work=$tmp/work
cp "$root/go.mod" "$root/go.sum" "$work/"
cp "$root/hack/update-codegen.sh" "$root/hack/boilerplate.go.txt" "$work/hack/"
for dir in "${generated[@]}"; do
  if [[ -d $root/$dir ]]; then
    mkdir -p "$work/$(dirname "$dir")"
    cp -R "$root/$dir" "$work/$dir"
  fi
done

if ! "$work/hack/update-codegen.sh" >"$tmp/update.log" 2>&1; then
  cat "$tmp/update.log" >&2
  echo "verify-codegen: hack/update-codegen.sh failed" >&2
  exit 1
fi

stale=0
for dir in "${generated[@]}"; do
  # -N shows files that exist on one side only (a removed type's client, a
  # new CRD); the labels make the diff read as one against the repository.
  if ! diff -ruN "$root/$dir" "$work/$dir" >"$tmp/diff" 2>&1; then
    stale=1
    sed -e "s|$root/|a/|g" -e "s|$work/|b/|g" "$tmp/diff"
  fi
done

if [[ $stale -ne 0 ]]; then
  echo >&2
  echo "verify-codegen: generated code is stale (a/ is the working tree, b/ is freshly generated)." >&2
  echo "verify-codegen: run 'make codegen' and commit the result." >&2
  exit 1
fi
echo "verify-codegen: generated code is up to date"
