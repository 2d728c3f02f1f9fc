#!/bin/bash
# Two builds of the agent side by side: the server CPU each spends per fresh connection (a
# herd of HERD fresh connections, each one GET /config/worker, then closed) and per keep-alive
# request (wrk), both servers up at once and measured in alternating rounds, so whatever else
# the machine runs weighs on both alike. Prints each round, each side's median and the ratio
# new / old (1.00: the same cost; the target for a change that should not cost anything is
# within 5 %).
#   benches/builds.sh OLD_BIN NEW_BIN
# Env: ROUNDS (default 6), HERD (default 5000), DURATION (wrk, default 3s), CONNS (default 100).
# Needs: perf (task-clock of the server's process), wrk, python3, rustc.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: benches/builds.sh OLD_BIN NEW_BIN" >&2; exit 2; }
ROUNDS=${ROUNDS:-6}
HERD=${HERD:-5000}
DURATION=${DURATION:-3s}
CONNS=${CONNS:-100}
for t in perf wrk python3 rustc; do
    command -v "$t" >/dev/null || { echo "missing $t" >&2; exit 2; }
done
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
TMP=$(mktemp -d /tmp/agent-bench-builds.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT
rustc -O --edition 2024 benches/tools/herd.rs -o "$TMP/herd"
mkdir -p "$TMP/src/pools"
python3 - "$TMP/src/pools/worker.ign" <<'PY'
import json, sys, base64, random
random.seed(1)
files = [{"path": f"/etc/bench/file-{i:03}.conf", "mode": 420,
          "contents": {"source": "data:;base64," + base64.b64encode("".join(
              random.choice("abcdefghijklmnopqrstuvwxyz0123456789 \n") for _ in range(1000)).encode()).decode()}}
         for i in range(36)]
json.dump({"ignition": {"version": "3.0.0"}, "storage": {"files": files}}, open(sys.argv[1], "w"))
PY
declare -A PID ADDR
for v in old new; do
    bin=$1
    [ $v = new ] && bin=$2
    cp "$bin" "$TMP/agent-$v"
    "$TMP/agent-$v" serve --source "$TMP/src" --state-dir "$TMP/state-$v" --listen-http 127.0.0.1:0 \
        --max-connections 20000 --no-access-log >"$TMP/$v.out" 2>"$TMP/$v.err" &
    PID[$v]=$!
    PIDS+=("$!")
done
for v in old new; do
    for _ in $(seq 100); do grep -q listening "$TMP/$v.out" 2>/dev/null && break; sleep 0.1; done
    ADDR[$v]=$(sed -n 's|^listening http://||p' "$TMP/$v.out" | head -1)
    [ -n "${ADDR[$v]}" ] || { echo "$v: agent serve did not start: $(tail -3 "$TMP/$v.err")" >&2; exit 1; }
done
# task-clock (ms) of process $1 while the rest of the arguments run.
clock() {
    local pid=$1
    shift
    perf stat -x, -e task-clock -p "$pid" -o "$TMP/perf" -- "$@" >"$TMP/run.out" 2>&1
    grep task-clock "$TMP/perf" | cut -d, -f1
}
for r in $(seq "$ROUNDS"); do
    for v in old new; do
        ms=$(clock "${PID[$v]}" "$TMP/herd" "${ADDR[$v]}" "$HERD" /config/worker)
        errs=$(awk '{print $4}' "$TMP/run.out")
        echo "$v herd $r: $(python3 -c "print(f'{$ms * 1000 / $HERD:.1f}')") us/conn, errors $errs" | tee -a "$TMP/herd.log"
        ms=$(clock "${PID[$v]}" wrk -t2 -c"$CONNS" -d"$DURATION" "http://${ADDR[$v]}/config/worker")
        n=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$TMP/run.out")
        echo "$v keep-alive $r: $(python3 -c "print(f'{$ms * 1000 / $n:.2f}')") us/req" | tee -a "$TMP/herd.log"
    done
done
python3 - "$TMP/herd.log" <<'PY'
import re, statistics, sys
v = {}
for line in open(sys.argv[1]):
    m = re.match(r"(old|new) (herd|keep-alive) \d+: ([\d.]+)", line)
    v.setdefault((m[1], m[2]), []).append(float(m[3]))
for kind, unit in (("herd", "us/conn"), ("keep-alive", "us/req")):
    o, n = statistics.median(v["old", kind]), statistics.median(v["new", kind])
    print(f"{kind}: old median {o:.2f} {unit}, new median {n:.2f} {unit}, new/old {n / o:.2f}")
PY
