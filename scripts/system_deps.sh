#!/usr/bin/env bash
# System packages the cluster tests use: Debian's Slurm (controller, node daemon, srun) and
# munge. Installed only where it can be (root with apt-get) and only when missing; elsewhere the
# Slurm test skips and says why. `make test` runs this first.
set -euo pipefail
if command -v srun >/dev/null && command -v slurmctld >/dev/null && command -v munged >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "system_deps: not root or no apt-get: Slurm not installed, its test will skip" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
