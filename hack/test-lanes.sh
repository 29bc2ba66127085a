#!/usr/bin/env bash
# Runs the tests of `make test` in two lanes side by side, after the Makefile
# has built what they need:
#
#   node lane: the packages whose tests start a cluster-mode node (NODE_PKGS,
#     in that order): the first alone (pkg/testenv, whose own tests are about
#     that lock and its turns), then the others at once (clustertest and the
#     memcached e2e with go test -p 2, test/e2e beside them: two packages
#     named e2e cannot share one -o directory): they take turns on the
#     machine-wide node lock, so only what a package does before it takes the
#     lock (test/e2e's and clustertest's image builds, the Prometheus
#     server's start, the test binary's start) runs beside another's tests,
#     and that much comes off the lane's length;
#   rest lane: every other package of PKGS (LONG_PKGS first, so that the lane
#     ends on short packages; go test -p REST_P), then the modules of MODULES
#     side by side;
#
# and beside them `make test-late`, the builds that only some later tests
# need (the Prometheus server, the test-only modules' commands).
#
# Both lanes run to their end whatever fails. Their output goes, line by line
# with a "node| ", "rest| " or "late| " prefix, to stdout, and unprefixed to a
# log of each; the summary at the end lists every package's result per lane,
# and the exit status is 1 when either lane or the builds failed.
#
# Test binaries are kept between runs (go test -o) in TESTBIN, default
# ${XDG_CACHE_HOME:-~/.cache}/handlerkit/testbin: go test links a test
# binary again on every run (about 70 of 2 to 6 CPU seconds each with -race,
# a sixth of a warm run's CPU), and it skips the link when the binary in the
# -o directory already carries the build ID that it would link. A run that
# finds TESTBIN taken by another run (flock) links into a directory of its
# own, removed at the end. go test -o takes one directory per invocation, and
# test binaries are named after the last element of the import path, so each
# package list runs as groups of distinct names, side by side.
#
# Environment (the Makefile sets it): GO, MAKE, TESTFLAGS, PKGS, NODE_PKGS,
# LONG_PKGS, MODULES, REST_P; LOGDIR (default: a new directory under /tmp);
# TESTBIN.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
MAKE=${MAKE:-make}
REST_P=${REST_P:-2}
read -r -a testflags <<<"${TESTFLAGS:-}"
read -r -a modules <<<"${MODULES:-}"
LOGDIR=${LOGDIR:-$(mktemp -d "${TMPDIR:-/tmp}/handlerkit-test.XXXXXX")}
mkdir -p "$LOGDIR"

TESTBIN=${TESTBIN:-${XDG_CACHE_HOME:-${HOME:?set HOME, XDG_CACHE_HOME or TESTBIN}/.cache}/handlerkit/testbin}
mkdir -p "$TESTBIN"
exec {testbin_lock}>"$TESTBIN/lock"
testbin_own=""
if ! flock -n "$testbin_lock"; then
  echo "make test: $TESTBIN is in use by another run; test binaries are linked into a directory of this run's own"
  TESTBIN=$(mktemp -d "${TMPDIR:-/tmp}/handlerkit-testbin.XXXXXX")
  testbin_own=$TESTBIN
fi

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

# go_test_groups DIR P PKG...: go test -p P the packages, the binaries kept
# in DIR-1/, DIR-2/, ...: a package with tests goes to the first group where
# no other has its binary's name; the packages without tests (go test builds
# and vets them, and links nothing) go in one more group without -o; the
# groups run side by side. Status 1 when any failed.
declare -A group_of=()
group_packages() { # DIR PKG...: sets group_of[PKG] to its -o directory
  local dir=$1 p name k
  shift
  declare -A count=()
  for p in "$@"; do
    name=${p##*/}
    k=$(( ${count[$name]:-0} + 1 ))
    count[$name]=$k
    group_of[$p]=$dir-$k
  done
}
go_test_groups() { # DIR P PKG...
  local dir=$1 p=$2 status=0 pids=() g pid tested=() untested=()
  shift 2
  declare -A has_tests=()
  while read -r pkg; do [[ -z $pkg ]] || has_tests[$pkg]=1; done < <(
    $GO list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' "$@")
  for pkg in "$@"; do
    if [[ -n ${has_tests[$pkg]:-} ]]; then tested+=("$pkg"); else untested+=("$pkg"); fi
  done
  group_packages "$dir" "${tested[@]}"
  declare -A members=()
  for pkg in "${tested[@]}"; do members[${group_of[$pkg]}]+=" $pkg"; done
  for g in "${!members[@]}"; do
    mkdir -p "$g"
    # shellcheck disable=SC2086 # a word list of import paths
    $GO test "${testflags[@]}" -p "$p" -o "$g/" ${members[$g]} &
    pids+=($!)
  done
  if [[ ${#untested[@]} -gt 0 ]]; then
    $GO test "${testflags[@]}" -p "$p" "${untested[@]}" &
    pids+=($!)
  fi
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  return $status
}

node_lane() {
  if [[ ${#node[@]} -eq 0 ]]; then
    echo "no package of PKGS starts a node"
    return 0
  fi
  # With -p 1, go test would build each package's test binary only after the
  # one before has run. So: build the first, then run it while the others
  # build in the background into the directories go test runs them from (go
  # test then finds them linked).
  local status=0 pid="" p
  group_packages "$TESTBIN/node0" "${node[0]}"
  group_packages "$TESTBIN/node" "${node[@]:1}"
  for p in "${node[@]}"; do mkdir -p "${group_of[$p]}"; done
  $GO test "${testflags[@]}" -c -o "${group_of[${node[0]}]}/" "${node[0]}" || true
  if [[ ${#node[@]} -gt 1 ]]; then
    for p in "${node[@]:1}"; do
      $GO test "${testflags[@]}" -c -o "${group_of[$p]}/" "$p" || true
    done >"$LOGDIR/node-prebuild.log" 2>&1 &
    pid=$!
  fi
  go_test_groups "$TESTBIN/node0" 1 "${node[0]}" || status=1
  if [[ -n $pid ]]; then
    wait "$pid" || true # a build error shows again in go test's own output
    # At once: one holds the node lock while the others build their images
    # and then wait for the lock (testenv.Start waits as long as its
    # context allows; the tests' -timeout covers the wait).
    go_test_groups "$TESTBIN/node" 2 "${node[@]:1}" || status=1
  fi
  return $status
}

rest_lane() {
  local status=0 m pids=() pid
  if [[ ${#rest[@]} -gt 0 ]]; then
    go_test_groups "$TESTBIN/rest" "$REST_P" "${rest[@]}" || status=1
  fi
  # The modules side by side: the lane's packages have ended, the machine's
  # second core is mostly idle by then, and the longest module (bench's
  # smoke test, about 30 s) alone is the lane's tail rather than the sum.
  if [[ ${#modules[@]} -gt 0 ]]; then
    echo "# ${modules[*]}: modules of their own, side by side"
  fi
  for m in "${modules[@]}"; do
    (cd "$m" && mapfile -t mpkgs < <($GO list ./...) &&
      go_test_groups "$TESTBIN/module-${m//\//-}" "$REST_P" "${mpkgs[@]}") &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  return $status
}

echo "make test: node lane (one, then the others at once): ${#node[@]} packages; rest lane (-p $REST_P): ${#rest[@]} packages and ${modules[*]:-no modules}; logs in $LOGDIR"
start=$SECONDS
set +e
# The lanes close the lock's descriptor: this shell holds the lock, and a
# process a test leaves behind must not keep it (the next run would then
# link every binary into a directory of its own).
( exec {testbin_lock}>&-; $MAKE --no-print-directory test-late 2>&1 | tee "$LOGDIR/late.log" | sed -u 's/^/late| /' ) &
late_pid=$!
( exec {testbin_lock}>&-; node_lane 2>&1 | tee "$LOGDIR/node.log" | sed -u 's/^/node| /' ) &
node_pid=$!
( exec {testbin_lock}>&-; rest_lane 2>&1 | tee "$LOGDIR/rest.log" | sed -u 's/^/rest| /' ) &
rest_pid=$!
trap 'kill "$late_pid" "$node_pid" "$rest_pid" 2>/dev/null; [[ -z $testbin_own ]] || rm -rf "$testbin_own"' INT TERM
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
[[ -z $testbin_own ]] || rm -rf "$testbin_own"
[[ $late_status -eq 0 && $node_status -eq 0 && $rest_status -eq 0 ]]
