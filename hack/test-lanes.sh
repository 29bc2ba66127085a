#!/usr/bin/env bash
# Runs the tests of `make test` in two lanes side by side, after the Makefile
# has built what they need:
#
#   node lane: the packages whose tests start a cluster-mode node (NODE_PKGS,
#     in that order): the first alone (pkg/testenv, whose own tests are about
#     that lock and its turns), then the others two at a time (go test -p 2):
#     they take turns on the machine-wide node lock, so only what a package
#     does before it takes the lock (test/e2e's and clustertest's image
#     builds, the Prometheus server's start, the test binary's start) runs
#     beside the other's tests, and that much comes off the lane's length;
#   rest lane: every other package of PKGS (LONG_PKGS first, so that the lane
#     ends on short packages; go test -p REST_P), then each module of MODULES;
#
# and beside them `make test-late`, the builds that only some later tests
# need (the Prometheus server, the test-only modules' commands).
#
# Both lanes run to their end whatever fails. Their output goes, line by line
# with a "node| ", "rest| " or "late| " prefix, to stdout, and unprefixed to a
# log of each; the summary at the end lists every package's result per lane,
# and the exit status is 1 when either lane or the builds failed.
#
# Environment (the Makefile sets it): GO, MAKE, TESTFLAGS, PKGS, NODE_PKGS,
# LONG_PKGS, MODULES, REST_P; LOGDIR (default: a new directory under /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
MAKE=${MAKE:-make}
REST_P=${REST_P:-2}
read -r -a testflags <<<"${TESTFLAGS:-}"
read -r -a modules <<<"${MODULES:-}"
LOGDIR=${LOGDIR:-$(mktemp -d "${TMPDIR:-/tmp}/handlerkit-test.XXXXXX")}
mkdir -p "$LOGDIR"

# Import paths: what PKGS selects, split into the lanes. A pattern that
# matches nothing, or a listed package that is gone, stops here.
golist() { # patterns...: their import paths, one a line
  [[ $# -eq 0 ]] || $GO list "$@"
}
selected=() nodeall=() long=()
# shellcheck disable=SC2086 # the lists are word lists
{
  out=$(golist ${PKGS:-./...})
  [[ -z $out ]] || mapfile -t selected <<<"$out"
  out=$(golist ${NODE_PKGS:-})
  [[ -z $out ]] || mapfile -t nodeall <<<"$out"
  out=$(golist ${LONG_PKGS:-})
  [[ -z $out ]] || mapfile -t long <<<"$out"
}
declare -A in_selected=() is_node=() taken=()
for p in "${selected[@]}"; do in_selected[$p]=1; done
for p in "${nodeall[@]}"; do is_node[$p]=1; done
node=() rest=()
for p in "${nodeall[@]}"; do [[ -n ${in_selected[$p]:-} ]] && node+=("$p"); done
for p in "${long[@]}" "${selected[@]}"; do
  [[ -n ${in_selected[$p]:-} && -z ${is_node[$p]:-} && -z ${taken[$p]:-} ]] || continue
  taken[$p]=1
  rest+=("$p")
done

node_lane() {
  if [[ ${#node[@]} -eq 0 ]]; then
    echo "no package of PKGS starts a node"
    return 0
  fi
  # With -p 1, go test would build each package's test binary only after the
  # one before has run. So: build the first, then run it while the others
  # build in the background (their compiles land in the build cache; go test
  # below only links them again).
  # (One go test -c per package, each into a directory of its own: two
  # packages named e2e cannot share one.)
  local status=0 bin pid="" i
  bin=$(mktemp -d "${TMPDIR:-/tmp}/handlerkit-node-bin.XXXXXX")
  $GO test "${testflags[@]}" -c -o "$bin/0/" "${node[0]}" || true
  if [[ ${#node[@]} -gt 1 ]]; then
    for ((i = 1; i < ${#node[@]}; i++)); do
      $GO test "${testflags[@]}" -c -o "$bin/$i/" "${node[$i]}" || true
    done >"$LOGDIR/node-prebuild.log" 2>&1 &
    pid=$!
  fi
  $GO test "${testflags[@]}" -p 1 "${node[0]}" || status=1
  if [[ -n $pid ]]; then
    wait "$pid" || true # a build error shows again in go test's own output
    # Two at a time: one holds the node lock while the next builds its
    # images and then waits for the lock (testenv.Start waits as long as its
    # context allows; the tests' -timeout covers the wait).
    $GO test "${testflags[@]}" -p 2 "${node[@]:1}" || status=1
  fi
  rm -rf "$bin"
  return $status
}

rest_lane() {
  local status=0 m
  if [[ ${#rest[@]} -gt 0 ]]; then
    $GO test "${testflags[@]}" -p "$REST_P" "${rest[@]}" || status=1
  fi
  for m in "${modules[@]}"; do
    echo "# $m: a module of its own"
    (cd "$m" && $GO test "${testflags[@]}" ./...) || status=1
  done
  return $status
}

echo "make test: node lane (-p 1, then -p 2): ${#node[@]} packages; rest lane (-p $REST_P): ${#rest[@]} packages and ${modules[*]:-no modules}; logs in $LOGDIR"
start=$SECONDS
set +e
( $MAKE --no-print-directory test-late 2>&1 | tee "$LOGDIR/late.log" | sed -u 's/^/late| /' ) &
late_pid=$!
( node_lane 2>&1 | tee "$LOGDIR/node.log" | sed -u 's/^/node| /' ) &
node_pid=$!
( rest_lane 2>&1 | tee "$LOGDIR/rest.log" | sed -u 's/^/rest| /' ) &
rest_pid=$!
trap 'kill "$late_pid" "$node_pid" "$rest_pid" 2>/dev/null' INT TERM
wait "$late_pid"; late_status=$?
wait "$node_pid"; node_status=$?
wait "$rest_pid"; rest_status=$?
set -e

# The summary: each package's result line (go test prints "ok", "FAIL" or
# "?" per package), and the failed tests.
summary() { # lane status
  local lane=$1 status=$2 verdict=passed
  [[ $status -eq 0 ]] || verdict=FAILED
  echo "== $lane lane $verdict ($LOGDIR/$lane.log)"
  grep -E '^(ok|FAIL|---? FAIL|panic:)' "$LOGDIR/$lane.log" | grep -v '^ok.*\[no test files\]' || true
}
echo
[[ $late_status -eq 0 ]] || echo "== make test-late FAILED ($LOGDIR/late.log)"
summary node "$node_status"
summary rest "$rest_status"
passed=$(cat "$LOGDIR/node.log" "$LOGDIR/rest.log" | grep -cE '^ok[[:space:]]' || true)
failed=$(cat "$LOGDIR/node.log" "$LOGDIR/rest.log" | grep -cE '^FAIL[[:space:]]' || true)
echo "make test: $(( (SECONDS - start) / 60 ))m$(( (SECONDS - start) % 60 ))s for both lanes"
if [[ $late_status -ne 0 || $node_status -ne 0 || $rest_status -ne 0 ]] && [[ $failed -eq 0 ]]; then
  failed=1 # a lane failed without a package's FAIL line (a build or go list error)
fi
echo "packages: $passed passed, $failed failed"
[[ $late_status -eq 0 && $node_status -eq 0 && $rest_status -eq 0 ]]
