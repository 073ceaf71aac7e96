#!/usr/bin/env bash
# Runs one pedrl command as N processes on this machine, as a pod's hosts would:
#
#   bash launch/local.sh 2 python -m pedrl.experiments.uco \
#       --config=experiments/uco.py:tiny --workdir=/tmp/uco_2p
#
# Process I gets JAX_COORDINATOR_ADDRESS=127.0.0.1:PORT, JAX_NUM_PROCESSES=N and
# JAX_PROCESS_ID=I, and a share of the machine's devices: on a host with GPUs, an equal
# slice of them (CUDA_VISIBLE_DEVICES; N must divide the GPU count), on a CPU one JAX
# device each (JAX_NUM_CPU_DEVICES=1 unless set). Process 0's output streams here; the
# others' goes to LOGDIR/process_I.log (LOGDIR: $PEDRL_LOCAL_LOGS or a new temporary
# folder, printed first). The exit status is the worst of the processes'. SIGINT or
# SIGTERM is passed on to every process once (a training job saves and stops at the same
# step on all of them; a second Ctrl-C stops them at once), a hangup as SIGTERM; when a
# process fails, the others end within seconds on their own and are killed after
# $PEDRL_LOCAL_GRACE seconds (default 30) if they have not.
set -uo pipefail
if [[ $# -lt 2 || ! "$1" =~ ^[1-9][0-9]*$ ]]; then
  sed -n '2,17p' "$0" >&2
  exit 2
fi
n=$1
shift
port=${PEDRL_LOCAL_PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
logs=${PEDRL_LOCAL_LOGS:-$(mktemp -d -t pedrl-local-XXXXXX)}
grace=${PEDRL_LOCAL_GRACE:-30}
mkdir -p "$logs"

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
fi
if (( gpus > 0 && gpus % n != 0 )); then
  echo "error: $n processes do not split this host's $gpus GPUs evenly" >&2
  exit 2
fi
echo "launch/local.sh: $n processes, coordinator 127.0.0.1:$port, logs of processes 1-$((n - 1)) in $logs" >&2

# Each process in a process group of its own: a terminal's Ctrl-C reaches the launcher's
# group only, and the traps below pass it on once. In the launcher's group, every process
# would get it twice (from the terminal and from the trap), and a job reads a second SIGINT
# as "stop at once, unsaved".
set -m
pids=()
for ((i = 0; i < n; i++)); do
  env_i=(JAX_COORDINATOR_ADDRESS="127.0.0.1:$port" JAX_NUM_PROCESSES="$n" JAX_PROCESS_ID="$i")
  if (( gpus > 0 )); then
    per=$((gpus / n))
    env_i+=(CUDA_VISIBLE_DEVICES="$(seq -s, $((i * per)) $((i * per + per - 1)))")
  else
    env_i+=(JAX_NUM_CPU_DEVICES="${JAX_NUM_CPU_DEVICES:-1}")
  fi
  if (( i == 0 )); then
    env "${env_i[@]}" "$@" &
  else
    env "${env_i[@]}" "$@" >"$logs/process_$i.log" 2>&1 &
  fi
  pids+=($!)
done
# Job control off again: with it, every foreground command below (the loop's `sleep`) would
# be a job of its own and take the terminal, and Ctrl-C would reach it instead of the traps.
set +m

trap 'kill -TERM "${pids[@]}" 2>/dev/null' TERM HUP
trap 'kill -INT "${pids[@]}" 2>/dev/null' INT

# Waits for every process; once one has failed, the rest get `grace` seconds to end.
worst=0
failed_at=""
declare -A status=()
while (( ${#status[@]} < n )); do
  for ((i = 0; i < n; i++)); do
    [[ -n "${status[$i]:-}" ]] && continue
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then
      wait "${pids[$i]}"
      status[$i]=$?
      (( status[$i] > worst )) && worst=${status[$i]}
      if (( status[$i] != 0 )) && [[ -z "$failed_at" ]]; then
        failed_at=$SECONDS
        (( i > 0 )) && echo "launch/local.sh: process $i exited with status ${status[$i]} (log: $logs/process_$i.log)" >&2
      fi
    fi
  done
  if [[ -n "$failed_at" ]] && (( SECONDS - failed_at > grace )); then
    for ((i = 0; i < n; i++)); do
      [[ -z "${status[$i]:-}" ]] && kill -KILL "${pids[$i]}" 2>/dev/null
    done
  fi
  sleep 0.2
done
exit "$worst"
