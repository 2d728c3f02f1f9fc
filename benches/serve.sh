#!/bin/bash
# Benchmark `agent serve` against nginx serving the same bytes as a static file (sendfile), in
# one run, for /config/<pool> (~50 KiB config):
# - keep-alive: requests/s and p99 latency with wrk at CONNS (100) keep-alive connections;
#   the ratio agent/nginx (target >= 1.2) and each side's p99 (target <= 50 ms);
# - the thundering herd: HERD (5,000) concurrent FRESH connections, each connects, sends one
#   request, reads the answer and closes (benches/tools/herd.rs, a one-thread epoll client
#   built here with rustc); p50/p99/max latency from connect to the last byte, and errors
#   (target: p99 <= 500 ms, no errors). The same herd runs against nginx as the reference.
# - the floor: benches/tools/floor.rs, the agent's send path with nothing else (one recv and
#   one splice per request, no HTTP), measured in the same keep-alive rounds. wrk shares the
#   machine's cores with the server, so the kernel's TCP path and wrk's own work bound what
#   any server can reach here: the floor's ratio to nginx is that bound, and agent/floor is
#   what the agent's own code costs.
#
# The machine is shared, so nginx and agent are measured in alternating rounds; the summary
# gives each side's best keep-alive round, the median of the per-round ratios, and each side's
# median herd round. Each line also gives the server's CPU time per request or connection
# (user+system), which depends far less on what else the machine runs.
#
# Needs: wrk, nginx (apt-get install wrk nginx-light), python3, rustc. Env: DURATION (default
# 5s), ROUNDS (default 3), HERD_ROUNDS (default 3), AGENT_BIN (benchmark this binary instead
# of building one), CONNS (default 100), HERD (default 5000), ACCESS_LOG=1 to keep agent's
# JSON access log on (written to /dev/null; nginx then logs too).
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=benches/tools/nginx.sh
. benches/tools/nginx.sh
DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-100}
HERD_ROUNDS=${HERD_ROUNDS:-3}
HERD=${HERD:-5000}
ACCESS_LOG=${ACCESS_LOG:-0}

for t in wrk nginx python3 rustc; do
    command -v "$t" >/dev/null || { echo "missing $t (apt-get install wrk nginx-light python3)" >&2; exit 2; }
done
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

[ -n "${AGENT_BIN:-}" ] || cargo build --release --quiet
TMP=$(mktemp -d /tmp/agent-bench-serve.XXXXXX)
chmod 755 "$TMP"
# A private copy: the target directory may be shared and rebuilt while the benchmark runs.
cp "${AGENT_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/agent}" "$TMP/agent"
AGENT=$TMP/agent
rustc -O --edition 2024 benches/tools/herd.rs -o "$TMP/herd"
rustc -O --edition 2024 benches/tools/floor.rs -o "$TMP/floor"
AGENT_PID=""
NGINX_PID=""
FLOOR_PID=""
cleanup() {
    [ -n "$AGENT_PID" ] && kill "$AGENT_PID" 2>/dev/null && wait "$AGENT_PID" 2>/dev/null || true
    [ -n "$FLOOR_PID" ] && kill "$FLOOR_PID" 2>/dev/null && wait "$FLOOR_PID" 2>/dev/null || true
    [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null && wait "$NGINX_PID" 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

# A ~50 KiB worker config: files with inline data and a few units.
mkdir -p "$TMP/src/pools"
python3 - "$TMP/src/pools/worker.ign" <<'PY'
import json, sys, base64, random
random.seed(1)
files = []
for i in range(36):
    data = "".join(random.choice("abcdefghijklmnopqrstuvwxyz0123456789 \n") for _ in range(1000))
    files.append({"path": f"/etc/bench/file-{i:03}.conf", "mode": 420,
                  "contents": {"source": "data:;base64," + base64.b64encode(data.encode()).decode()}})
units = [{"name": f"bench-{i}.service", "enabled": True,
          "contents": "[Unit]\nDescription=bench %d\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n" % i}
         for i in range(20)]
cfg = {"ignition": {"version": "3.0.0"}, "storage": {"files": files}, "systemd": {"units": units}}
open(sys.argv[1], "w").write(json.dumps(cfg))
PY

LOGFLAG=--no-access-log
[ "$ACCESS_LOG" = 1 ] && LOGFLAG=""
"$AGENT" serve --source "$TMP/src" --token-dir "$TMP/tokens" --listen-http 127.0.0.1:0 \
    --max-connections 20000 $LOGFLAG >"$TMP/agent.out" 2>/dev/null &
AGENT_PID=$!
for _ in $(seq 100); do grep -q listening "$TMP/agent.out" 2>/dev/null && break; sleep 0.1; done
AGENT_ADDR=$(sed -n 's|^listening http://||p' "$TMP/agent.out" | head -1)
[ -n "$AGENT_ADDR" ] || { echo "agent serve did not start" >&2; exit 1; }

mkdir -p "$TMP/www/config"
python3 - "$AGENT_ADDR" "$TMP/www/config/worker" <<'PY'
import sys, urllib.request
body = urllib.request.urlopen(f"http://{sys.argv[1]}/config/worker").read()
open(sys.argv[2], "wb").write(body)
PY
SIZE=$(stat -c %s "$TMP/www/config/worker")

NGINX_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
NGINX_LOG="access_log off;"
[ "$ACCESS_LOG" = 1 ] && NGINX_LOG="access_log /dev/null;"
nginx_conf "$TMP" "$NGINX_PORT" "$NGINX_LOG" >"$TMP/nginx.conf"
nginx -c "$TMP/nginx.conf" -e "$TMP/nginx-error.log" &
NGINX_PID=$!
for _ in $(seq 50); do python3 -c "import socket; socket.create_connection(('127.0.0.1',$NGINX_PORT))" 2>/dev/null && break; sleep 0.1; done

cmp <(python3 -c "import urllib.request,sys; sys.stdout.buffer.write(urllib.request.urlopen('http://127.0.0.1:$NGINX_PORT/config/worker').read())") \
    "$TMP/www/config/worker" || { echo "nginx does not serve the same bytes" >&2; exit 1; }

FLOOR_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$TMP/floor" "127.0.0.1:$FLOOR_PORT" "$TMP/www/config/worker" application/vnd.coreos.ignition+json >"$TMP/floor.out" &
FLOOR_PID=$!
for _ in $(seq 50); do grep -q listening "$TMP/floor.out" 2>/dev/null && break; sleep 0.1; done
cmp <(python3 -c "import urllib.request,sys; sys.stdout.buffer.write(urllib.request.urlopen('http://127.0.0.1:$FLOOR_PORT/config/worker').read())") \
    "$TMP/www/config/worker" || { echo "the floor server does not serve the same bytes" >&2; exit 1; }

# CPU time (user+system, in clock ticks) used so far by process $1 and its children
# (nginx's workers). On a shared machine this is steadier than req/s.
cpu_ticks() {
    local t=0 p
    for p in "$1" $(pgrep -P "$1" || true); do
        t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
    done
    echo "$t"
}

# wrk output → "rps p99_ms errors server_cpu_us_per_request"
measure() {
    local url=$1 conns=$2 pid=$3 out c0 c1
    c0=$(cpu_ticks "$pid")
    out=$(wrk -t2 -c"$conns" -d"$DURATION" --timeout 10s --latency "$url")
    c1=$(cpu_ticks "$pid")
    echo "$out" >>"$TMP/wrk.log"
    python3 - "$out" "$((c1 - c0))" "$(getconf CLK_TCK)" <<'PY'
import re, sys
o = sys.argv[1]
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", o).group(1))
m = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", o)
p99 = float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]
errs = 0
e = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", o)
if e: errs += sum(int(x) for x in e.groups())
n = re.search(r"Non-2xx or 3xx responses: (\d+)", o)
if n: errs += int(n.group(1))
reqs = int(re.search(r"(\d+) requests in", o).group(1))
cpu_us = int(sys.argv[2]) / int(sys.argv[3]) * 1e6 / max(reqs, 1)
print(f"{rps:.0f} {p99:.3f} {errs} {cpu_us:.1f}")
PY
}

# herd output → "p50_ms p99_ms max_ms errors server_cpu_us_per_connection"
herd() {
    local addr=$1 pid=$2 out c0 c1 p50 p99 max errs _ok _wall
    c0=$(cpu_ticks "$pid")
    out=$("$TMP/herd" "$addr" "$HERD" /config/worker)
    c1=$(cpu_ticks "$pid")
    read -r p50 p99 max errs _ok _wall <<<"$out"
    echo "$p50 $p99 $max $errs $(python3 -c "print(f'{$((c1 - c0)) / $(getconf CLK_TCK) * 1e6 / $HERD:.1f}')")"
}

echo "config size: $SIZE bytes; wrk -t2 -c$CONNS -d$DURATION, $ROUNDS alternating rounds; access log: $([ "$ACCESS_LOG" = 1 ] && echo on || echo off)"
N_BEST="0 0 0 0"; A_BEST="0 0 0 0"; F_BEST="0 0 0 0"; RATIOS=""; F_RATIOS=""; AF_RATIOS=""
best() { # keeps the round with the higher req/s
    python3 -c "import sys; a=sys.argv[1].split(); b=sys.argv[2].split(); print(' '.join(a if float(a[0])>=float(b[0]) else b))" "$1" "$2"
}
median() { python3 -c "import sys, statistics; print(statistics.median_low([float(x) for x in sys.argv[1:]]))" "$@"; }
for r in $(seq "$ROUNDS"); do
    N=$(measure "http://127.0.0.1:$NGINX_PORT/config/worker" "$CONNS" "$NGINX_PID")
    F=$(measure "http://127.0.0.1:$FLOOR_PORT/config/worker" "$CONNS" "$FLOOR_PID")
    A=$(measure "http://$AGENT_ADDR/config/worker" "$CONNS" "$AGENT_PID")
    echo "  round $r: nginx $N | floor $F | agent $A   (req/s p99_ms errors server_cpu_us/req)"
    N_BEST=$(best "$N_BEST" "$N"); A_BEST=$(best "$A_BEST" "$A"); F_BEST=$(best "$F_BEST" "$F")
    RATIOS="$RATIOS $(python3 -c "print(${A%% *}/max(${N%% *},1))")"
    F_RATIOS="$F_RATIOS $(python3 -c "print(${F%% *}/max(${N%% *},1))")"
    AF_RATIOS="$AF_RATIOS $(python3 -c "print(${A%% *}/max(${F%% *},1))")"
done
read -r N_RPS N_P99 N_ERR N_CPU <<<"$N_BEST"
read -r F_RPS F_P99 F_ERR F_CPU <<<"$F_BEST"
read -r A_RPS A_P99 A_ERR A_CPU <<<"$A_BEST"
printf 'nginx (static file): %8s req/s  p99 %8s ms  errors %s  server CPU %s us/req\n' "$N_RPS" "$N_P99" "$N_ERR" "$N_CPU"
printf 'floor (recv+splice): %8s req/s  p99 %8s ms  errors %s  server CPU %s us/req\n' "$F_RPS" "$F_P99" "$F_ERR" "$F_CPU"
printf 'agent serve:         %8s req/s  p99 %8s ms  errors %s  server CPU %s us/req\n' "$A_RPS" "$A_P99" "$A_ERR" "$A_CPU"
# shellcheck disable=SC2086
echo "throughput ratio agent/nginx: best rounds $(python3 -c "print(f'{$A_RPS/$N_RPS:.2f}')"), median of rounds $(python3 -c "print(f'{$(median $RATIOS):.2f}')") (target >= 1.2); p99 at $CONNS keep-alive connections: agent $A_P99 ms, nginx $N_P99 ms (target <= 50 ms)"
# shellcheck disable=SC2086
echo "the machine's bound: floor/nginx median of rounds $(python3 -c "print(f'{$(median $F_RATIOS):.2f}')"); agent/floor median of rounds $(python3 -c "print(f'{$(median $AF_RATIOS):.2f}')")"

echo "thundering herd: $HERD concurrent fresh connections (connect, one request, read, close), $HERD_ROUNDS alternating rounds"
NH=(); AH=(); H_ERR=0
for r in $(seq "$HERD_ROUNDS"); do
    sleep 1
    N=$(herd "127.0.0.1:$NGINX_PORT" "$NGINX_PID")
    sleep 1
    A=$(herd "$AGENT_ADDR" "$AGENT_PID")
    echo "  round $r: nginx $N | agent $A   (p50_ms p99_ms max_ms errors server_cpu_us/conn)"
    NH+=("$N"); AH+=("$A")
    H_ERR=$((H_ERR + $(echo "$A" | cut -d' ' -f4)))
done
mid() { # the round with the median p99
    python3 -c "import sys; r=sorted(sys.argv[1:], key=lambda x: float(x.split()[1])); print(r[(len(r)-1)//2])" "$@"
}
read -r NP50 NP99 NMAX NERR NCPU <<<"$(mid "${NH[@]}")"
read -r AP50 AP99 AMAX AERR ACPU <<<"$(mid "${AH[@]}")"
printf 'nginx, herd (median round): p50 %7s ms  p99 %7s ms  max %7s ms  errors %s  server CPU %s us/conn\n' "$NP50" "$NP99" "$NMAX" "$NERR" "$NCPU"
printf 'agent, herd (median round): p50 %7s ms  p99 %7s ms  max %7s ms  errors %s  server CPU %s us/conn\n' "$AP50" "$AP99" "$AMAX" "$AERR" "$ACPU"
echo "herd p99 agent/nginx: $(python3 -c "print(f'{$AP99/max($NP99,0.1):.2f}')") (target: agent p99 <= 500 ms)"
if [ "$H_ERR" != 0 ] || [ "$A_ERR" != 0 ]; then
    echo "FAIL: agent errors (wrk output in $TMP/wrk.log)" >&2
    trap - EXIT
    exit 1
fi
echo "agent: no errors"
