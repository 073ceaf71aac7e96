#!/usr/bin/env bash
# Runs a pedrl job on every host of a Cloud TPU VM slice (one process per host).
#
#   launch/tpu_pod.sh setup TPU_NAME ZONE        # copy this checkout to ~/pedrl on all hosts, install
#   launch/tpu_pod.sh run TPU_NAME ZONE python -m pedrl.experiments.uco \
#       --config=experiments/uco.py:paper --workdir=/mnt/runs/uco --config.tutor.path=/mnt/models/...
#
# Every host runs the same command with --multihost=on: jax.distributed.initialize()
# finds the slice's hosts from the TPU metadata. The workdir, checkpoints and
# problems must be paths every host sees alike (a gcsfuse or NFS mount); only
# process 0 writes metrics and samples, all of them write their checkpoint shards.
# Only process 0 calls API judges: set their key variable on worker 0.
set -euo pipefail

usage() { sed -n '2,12p' "$0"; exit 2; }
[[ $# -ge 3 ]] || usage
action=$1 name=$2 zone=$3
shift 3
ssh_all() { gcloud compute tpus tpu-vm ssh "$name" --zone="$zone" --worker=all --command="$1"; }

case "$action" in
  setup)
    root=$(cd "$(dirname "$0")/.." && pwd)
    gcloud compute tpus tpu-vm scp --recurse "$root" "$name":~/pedrl --zone="$zone" --worker=all
    ssh_all 'pip install -U "jax[tpu]" && pip install -e ~/pedrl'
    ;;
  run)
    [[ $# -ge 1 ]] || usage
    ssh_all "cd ~/pedrl && $(printf '%q ' "$@") --multihost=on"
    ;;
  *) usage ;;
esac
