#!/usr/bin/env bash
# A Spark standalone cluster on this machine for trying the Spark engine as a cluster runs it
# (docs/spark.md "On a cluster"; tests/test_spark_cluster.py uses these same commands):
# a master and N workers as separate JVMs, started with the spark-class that pip's pyspark ships,
# bound to loopback, on free ports, logs and work directories under STATE_DIR.
#
#   scripts/spark-cluster.sh start STATE_DIR [WORKERS=2] [CORES=1] [MEMORY=1g]
#       prints MASTER=spark://127.0.0.1:PORT, MASTER_UI=http://127.0.0.1:PORT, WORKER_PIDS, SPARK_HOME
#       (also written to STATE_DIR/cluster.env) once every worker has registered
#   scripts/spark-cluster.sh stop STATE_DIR
#       kills every process the start left (each JVM was started in a session of its own, so an
#       executor and its Python workers go with their worker)
#
# Needs Java 17+ (scripts/install-java.sh) and pyspark in PYTHON's environment (default: .venv's,
# else python3). SPARK_LOCAL_IP=127.0.0.1 keeps the JVMs (and a driver started with the same
# environment) off the machine's other addresses.
set -euo pipefail
cmd=${1:-}
state=${2:-}
[[ -n "$cmd" && -n "$state" ]] || { sed -n '2,14p' "$0" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)

stop() {
  local f pid
  for f in "$state"/*.pid; do
    [[ -e "$f" ]] || continue
    pid=$(cat "$f")
    # the process group: the JVM and whatever it started (executors, Python workers)
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    rm -f "$f"
  done
}

case "$cmd" in
  stop) stop; exit 0 ;;
  start) ;;
  *) echo "error: unknown command '$cmd' (start or stop)" >&2; exit 2 ;;
esac

workers=${3:-2}
cores=${4:-1}
memory=${5:-1g}
python=${PYTHON:-}
if [[ -z "$python" ]]; then
  if [[ -x "$root/.venv/bin/python" ]]; then python="$root/.venv/bin/python"; else python=python3; fi
fi
spark_home=$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))') || {
  echo "error: pyspark is not installed in $python (pip install 'tailscope[spark]')" >&2; exit 1; }
mkdir -p "$state"
state=$(cd "$state" && pwd)
export SPARK_HOME=$spark_home SPARK_LOCAL_IP=127.0.0.1 SPARK_LOG_DIR=$state SPARK_NO_DAEMONIZE=1

# 2 + 2 * workers free ports (the OS picks them; a race with another process is possible but rare)
read -r -a ports <<<"$("$python" - "$((2 + 2 * workers))" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
)"
master_port=${ports[0]} master_ui=${ports[1]}
master="spark://127.0.0.1:$master_port"

launch() {  # NAME ARGS...: a JVM in a session of its own (its pid is its process group)
  local name=$1; shift
  setsid "$spark_home/bin/spark-class" "$@" >"$state/$name.log" 2>&1 </dev/null &
  echo $! >"$state/$name.pid"
}
trap 'stop' ERR
launch master org.apache.spark.deploy.master.Master --host 127.0.0.1 --port "$master_port" --webui-port "$master_ui"
worker_pids=()
for i in $(seq 1 "$workers"); do
  mkdir -p "$state/work-$i"
  launch "worker-$i" org.apache.spark.deploy.worker.Worker --host 127.0.0.1 \
    --port "${ports[$((2 * i))]}" --webui-port "${ports[$((2 * i + 1))]}" \
    --cores "$cores" --memory "$memory" --work-dir "$state/work-$i" "$master"
  worker_pids+=("$(cat "$state/worker-$i.pid")")
done

# Ready when the master's JSON lists every worker ALIVE (JVM start-up: seconds; 120 s at most).
alive=0
for _ in $(seq 1 600); do
  alive=$("$python" - "http://127.0.0.1:$master_ui/json/" <<'EOF' 2>/dev/null || echo 0
import json, sys, urllib.request
doc = json.load(urllib.request.urlopen(sys.argv[1], timeout=2))
print(sum(w["state"] == "ALIVE" for w in doc.get("workers", [])))
EOF
)
  [[ "$alive" -ge "$workers" ]] && break
  for f in "$state"/*.pid; do
    kill -0 "$(cat "$f")" 2>/dev/null || { echo "error: $(basename "$f" .pid) exited; see $state/$(basename "$f" .pid).log" >&2; stop; exit 1; }
  done
  sleep 0.2
done
if [[ "$alive" -lt "$workers" ]]; then
  echo "error: $alive of $workers workers registered with $master in 120 s; logs in $state" >&2
  stop
  exit 1
fi
{
  echo "MASTER=$master"
  echo "MASTER_UI=http://127.0.0.1:$master_ui"
  echo "WORKER_PIDS=\"${worker_pids[*]}\""
  echo "SPARK_HOME=$spark_home"
} | tee "$state/cluster.env"
