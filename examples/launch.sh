#!/usr/bin/env bash
# examples/launch.sh N PROGRAM [ARGS...] — starts N ranks of PROGRAM on this host, torchrun-style, and waits
# for all of them.
#
# Each rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR (default 127.0.0.1) and
# MASTER_PORT (default: a free port; rank 0 serves a c10d TCPStore there, and flopmeter serves its own at
# MASTER_PORT + its port_offset). If a rank fails, the others are stopped and the launcher exits with that
# rank's status; Ctrl-C stops them all.
set -u

if [[ $# -lt 2 || ! "$1" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 N PROGRAM [ARGS...]   (N >= 1 ranks on this host)" >&2
  exit 2
fi
world=$1
shift

port_free() {  # true when nothing listens on TCP port $1 (bash's /dev/tcp: a refused connect means free)
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

export MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
if [[ -z "${MASTER_PORT:-}" ]]; then
  for _ in $(seq 1 50); do
    candidate=$((20000 + RANDOM % 30000))
    if port_free "$candidate" && port_free $((candidate + 1)) && port_free $((candidate + 2)); then
      MASTER_PORT=$candidate
      break
    fi
  done
  if [[ -z "${MASTER_PORT:-}" ]]; then
    echo "$0: found no free port; set MASTER_PORT" >&2
    exit 1
  fi
fi
export MASTER_PORT
export WORLD_SIZE=$world LOCAL_WORLD_SIZE=$world

pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
}
trap 'stop_all; exit 130' INT TERM

for ((rank = 0; rank < world; rank++)); do
  RANK=$rank LOCAL_RANK=$rank "$@" &
  pids+=($!)
done

# Wait for whichever rank ends first; on a failure stop the rest and report it.
status=0
remaining=$world
while ((remaining > 0)); do
  wait -n -p done_pid
  code=$?
  remaining=$((remaining - 1))
  if ((code != 0 && status == 0)); then
    status=$code
    for ((r = 0; r < world; r++)); do
      if [[ "${pids[$r]}" == "$done_pid" ]]; then
        echo "$0: rank $r (pid $done_pid) exited with status $code; stopping the other ranks" >&2
      fi
    done
    stop_all
  fi
done
exit "$status"
