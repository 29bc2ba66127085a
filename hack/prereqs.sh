#!/usr/bin/env bash
# Installs the Debian packages the tests need when they are missing, so that
# `make test` works on a fresh machine. Needs root (or sudo) only when
# something is actually missing.
set -euo pipefail

need=()
command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)
command -v git   >/dev/null 2>&1 || need+=(git)
# Maven builds the project's java agent (agent/, make agent, jvmtest.AgentJar) and fetches the real
# jmx_exporter agent 1.0.1 for the tests that need it (jvmtest.JMXExporterJar).
command -v mvn   >/dev/null 2>&1 || need+=(maven)
# Cluster mode of pkg/testenv (a real node) and `make images`.
command -v runc        >/dev/null 2>&1 || [[ -x /usr/sbin/runc ]] || need+=(runc)
[[ -x /usr/lib/cni/bridge || -x /opt/cni/bin/bridge ]] || need+=(containernetworking-plugins)
command -v debootstrap >/dev/null 2>&1 || [[ -x /usr/sbin/debootstrap ]] || need+=(debootstrap)
command -v ip          >/dev/null 2>&1 || [[ -x /usr/sbin/ip ]] || need+=(iproute2)
# kube-proxy of testenv.WithServiceProxy (iptables mode: iptables, -save, -restore).
command -v iptables-restore >/dev/null 2>&1 || [[ -x /usr/sbin/iptables-restore ]] || need+=(iptables)
# Further packages are added by the parts of the test suite that need them.
for pkg in ${HANDLERKIT_EXTRA_PACKAGES:-}; do need+=("$pkg"); done

if [[ ${#need[@]} -eq 0 ]]; then
  exit 0
fi
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
echo "prereqs: installing ${need[*]} with apt-get"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
