#!/bin/bash
# The fleet benchmark: MACHINES (5,000) machines boot at once against `agent serve`
# on 127.0.0.1, each on fresh connections: the config fetch, then 3 reports (fetch, disks,
# files) — against the embedded store, and against etcd when `etcd` is installed (one member
# on 127.0.0.1, a store of its own). Prints, per request kind, p50 and p99 latency (connect to
# the last byte of the answer), reports lost (sent minus recorded, must be 0), and the
# server's CPU (every thread's run time, /proc/PID/task/*/schedstat) per machine for the whole
# boot next to the CPU of serving the config alone, measured in the same run (a herd of config
# fetches only), and the floor: the same herd asking GET /healthz, a fresh connection answered
# at once (what any request on its own connection costs before doing anything).
#
# The reference, in the same run (when nginx is installed): nginx serving the same config
# bytes as a static file and answering `POST /report` with a fixed 200 (it reads and drops
# the body: a report's HTTP cost without a store), driven by the same client:
# - the herd on fresh connections: server CPU per config fetch and per report POST, agent
#   next to nginx;
# - keep-alive (with wrk, when installed): CONNS (100) connections for DURATION (5s), the
#   config fetch; requests/s and server CPU per request, agent next to nginx.
# Targets: p99 <= 1 s, 0 lost, reports costing no more server CPU than the config fetch, the
# herd no more CPU per connection than nginx's, keep-alive ahead of nginx.
#
# Needs: python3 (etcd, nginx and wrk for the parts that use them). Env: MACHINES (default
# 5000), CONCURRENCY (default 1000 machines in flight), CONNS, DURATION, AGENT_BIN (this
# binary instead of a release build).
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=benches/tools/nginx.sh
. benches/tools/nginx.sh
MACHINES=${MACHINES:-5000}
CONCURRENCY=${CONCURRENCY:-1000}
CONNS=${CONNS:-100}
DURATION=${DURATION:-5s}
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
[ -n "${AGENT_BIN:-}" ] || cargo build --release --quiet
AGENT=${AGENT_BIN:-target/release/agent}

TMP=$(mktemp -d /tmp/agent-bench-fleet.XXXXXX)
chmod 755 "$TMP"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

mkdir -p "$TMP/src/pools"
python3 - "$TMP/src/pools/worker.ign" <<'PY'
import json, sys
files = [{"path": f"/etc/fleet/{i}", "mode": 420, "contents": {"source": "data:," + "x" * 400}} for i in range(100)]
json.dump({"ignition": {"version": "3.4.0"}, "storage": {"files": files}}, open(sys.argv[1], "w"))
PY

# The herd client: asyncio, fresh connections. `herd.py MODE PORT PIDS TAG`: MODE config
# (config fetches only), boot (config fetch + 3 reports per machine), post (3 report POSTs
# per machine, no fetch) or floor (GET /healthz: a fresh connection answered at once with two
# bytes, the least a request on its own connection costs); PIDS: the server's processes
# (comma-separated) whose CPU (every thread's, from schedstat) is counted. Prints one JSON line.
cat >"$TMP/herd.py" <<'PY'
import asyncio, json, os, sys, time, uuid
mode, port, pids, tag = sys.argv[1], int(sys.argv[2]), [int(p) for p in sys.argv[3].split(",")], sys.argv[4]
machines, conc = int(os.environ["MACHINES"]), int(os.environ["CONCURRENCY"])
def cpu():  # seconds run by every thread of the processes (schedstat: nanoseconds, not ticks)
    t = 0
    for pid in pids:
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                t += int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
        except OSError:
            pass
    return t / 1e9
async def request(raw):
    t = time.perf_counter()
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(raw)
    await w.drain()
    data = await r.read()
    w.close()
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
    return time.perf_counter() - t, status
GET = b"GET /config/worker HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
FLOOR = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
def report(mid, boot, stage, last):
    body = json.dumps({"format": 1, "id": uuid.uuid4().hex, "bootId": boot, "machine": {"id": mid},
        "agent": "bench", "config": {"pool": "worker"}, "stage": stage, "outcome": "ok", "final": last,
        "durationMs": 1000, "changes": {"paths": [f"/etc/fleet/{i}" for i in range(100)] if stage == "files" else []}}).encode()
    return (b"POST /report HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
lat = {"config": [], "report": []}
bad = {"config": 0, "report": 0}
async def machine(sem, i):
    async with sem:
        if mode == "floor":
            d, s = await request(FLOOR)
            lat["config"].append(d); bad["config"] += s != 200
            return
        if mode != "post":
            d, s = await request(GET)
            lat["config"].append(d); bad["config"] += s != 200
        if mode != "config":
            mid = f"bench-{tag}-{i}"
            for stage, last in (("fetch", False), ("disks", False), ("files", True)):
                d, s = await request(report(mid, f"boot-{tag}-{i}", stage, last))
                lat["report"].append(d); bad["report"] += s != 200
async def herd():
    sem = asyncio.Semaphore(conc)
    await asyncio.gather(*(machine(sem, i) for i in range(machines)))
def pct(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(len(v) * p))] if v else float("nan")
c0 = cpu(); t0 = time.perf_counter(); asyncio.run(herd()); wall = time.perf_counter() - t0; c1 = cpu()
print(json.dumps({"cpu_us": (c1 - c0) * 1e6, "wall": wall,
    "p50": {k: pct(v, .5) for k, v in lat.items()}, "p99": {k: pct(v, .99) for k, v in lat.items()}, "bad": bad}))
PY
export MACHINES CONCURRENCY

# CPU of process $1 and its children (nginx's workers), comma-separated pids.
pids_of() { echo "$1$(for c in $(pgrep -P "$1" || true); do echo -n ",$c"; done)"; }

# Nanoseconds run by every thread of the processes PIDS (comma-separated): herd.py's measure.
cpu_ns() {
    python3 - "$1" <<'PY'
import os, sys
t = 0
for pid in sys.argv[1].split(","):
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            t += int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
    except OSError:
        pass
print(t)
PY
}

# wrk keep-alive: "req/s server_cpu_us_per_request"
keepalive() { # URL PIDS
    local c0 c1 out
    c0=$(cpu_ns "$2")
    out=$(wrk -t2 -c"$CONNS" -d"$DURATION" --timeout 10s "$1")
    c1=$(cpu_ns "$2")
    python3 - "$out" "$((c1 - c0))" <<'PY'
import re, sys
o = sys.argv[1]
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", o).group(1))
reqs = int(re.search(r"(\d+) requests in", o).group(1))
print(f"{rps:.0f} {int(sys.argv[2]) / 1e3 / max(reqs, 1):.1f}")
PY
}

NGINX_PORT=""
start_nginx() { # serves the config fetched from agent at $1
    command -v nginx >/dev/null || return 0
    mkdir -p "$TMP/www/config"
    python3 -c "import sys, urllib.request; open(sys.argv[2], 'wb').write(urllib.request.urlopen(f'http://{sys.argv[1]}/config/worker').read())" \
        "$1" "$TMP/www/config/worker"
    NGINX_PORT=$(free_port)
    nginx_conf "$TMP" "$NGINX_PORT" "access_log off;" \
        "location = /report { default_type application/json; return 200 '{\"recorded\": \"new\"}\\n'; } location = /healthz { default_type text/plain; return 200 ok; }" \
        >"$TMP/nginx.conf"
    nginx -c "$TMP/nginx.conf" -e "$TMP/nginx-error.log" &
    NGINX_PID=$!
    PIDS+=("$NGINX_PID")
    for _ in $(seq 50); do python3 -c "import socket; socket.create_connection(('127.0.0.1',$NGINX_PORT))" 2>/dev/null && break; sleep 0.1; done
}

run_store() { # NAME EXTRA_ARGS...
    local name=$1; shift
    local port aport pid
    port=$(free_port); aport=$(free_port)
    "$AGENT" serve --source "$TMP/src" --state-dir "$TMP/state-$name" --listen-http "127.0.0.1:$port" \
        --admin-listen "127.0.0.1:$aport" --no-access-log --max-connections 20000 "$@" \
        >"$TMP/serve-$name.out" 2>"$TMP/serve-$name.log" &
    pid=$!
    PIDS+=("$pid")
    for _ in $(seq 100); do grep -q "source loaded" "$TMP/serve-$name.out" 2>/dev/null && break; sleep 0.1; done
    local conf boot floor
    conf=$(python3 "$TMP/herd.py" config "$port" "$pid" "a-$name")
    sleep 1
    floor=$(python3 "$TMP/herd.py" floor "$port" "$pid" "f-$name")
    sleep 1
    boot=$(python3 "$TMP/herd.py" boot "$port" "$pid" "b-$name")
    python3 - "$name" "$port" "$aport" "$conf" "$boot" "$floor" <<'PY'
import json, os, sys, urllib.request
name, port, aport = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
conf, boot, floor = json.loads(sys.argv[4]), json.loads(sys.argv[5]), json.loads(sys.argv[6])
machines = int(os.environ["MACHINES"])
provisioned, after = 0, ""
while True:  # /machines answers a page at a time
    m = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{aport}/machines?state=provisioned&limit=10000{after}").read())
    provisioned += sum(1 for x in m["machines"] if x["id"].startswith(f"bench-b-{name}-"))
    if not m.get("next"):  # null on the last page
        break
    after = "&after=" + m["next"]
metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
recorded = next((int(float(l.split()[-1])) for l in metrics.splitlines() if l.startswith('agent_serve_reports_total{result="recorded"}')), 0)
config_only = conf["cpu_us"] / machines
whole = boot["cpu_us"] / machines
print(f"== {name} store: {machines} machines at once ({os.environ['CONCURRENCY']} in flight), {boot['wall']:.1f} s")
for k in ("config", "report"):
    print(f"  {k:7s} p50 {boot['p50'][k]*1000:8.1f} ms   p99 {boot['p99'][k]*1000:8.1f} ms   errors {boot['bad'][k]}")
print(f"  reports lost: {3 * machines - recorded} (sent {3 * machines}, recorded {recorded}); machines provisioned: {provisioned}/{machines}")
per_report = (whole - config_only) / 3
least = floor["cpu_us"] / machines
print(f"  server CPU per machine: config fetch alone {config_only:.0f} us; fetch + 3 reports {whole:.0f} us; reports / config fetch = {(whole - config_only) / config_only:.2f} (target <= 1)")
print(f"  server CPU per request: config fetch {config_only:.0f} us, report {per_report:.0f} us; a report / a config fetch = {per_report / config_only:.2f}")
# The floor: what a request on a connection of its own costs before any work of its own
# (accept, read, a two-byte answer, close; errors {floor['bad']['config']}).
print(f"  floor, a fresh connection answered at once (GET /healthz): {least:.1f} us = {least / config_only:.2f} of a config fetch;"
      f" 3 reports on their own connections cost at least {3 * least / config_only:.2f}x the fetch before any work;"
      f" a report's own work (body read and checked, hand-off, store) {per_report - least:.1f} us")
open(os.environ["RESULTS"] + f"/{name}", "w").write(f"{config_only:.1f} {per_report:.1f}\n")
PY
    if [ "$name" = embedded ] && [ -z "$NGINX_PORT" ]; then
        start_nginx "127.0.0.1:$port"
        if [ -n "$NGINX_PORT" ]; then
            sleep 1
            local nconf npost nginx_pids
            nginx_pids=$(pids_of "$NGINX_PID")
            nconf=$(python3 "$TMP/herd.py" config "$NGINX_PORT" "$nginx_pids" n)
            sleep 1
            local nfloor
            nfloor=$(python3 "$TMP/herd.py" floor "$NGINX_PORT" "$nginx_pids" n)
            sleep 1
            npost=$(python3 "$TMP/herd.py" post "$NGINX_PORT" "$nginx_pids" n)
            sleep 1
            local apost
            apost=$(python3 "$TMP/herd.py" post "$port" "$pid" "p-$name")
            python3 - "$nconf" "$npost" "$apost" "$nfloor" <<'PY'
import json, os, sys
nconf, npost, apost, nfloor = (json.loads(a) for a in sys.argv[1:5])
machines = int(os.environ["MACHINES"])
agent_conf, _ = (float(x) for x in open(os.environ["RESULTS"] + "/embedded").read().split())
n_conf = nconf["cpu_us"] / machines
n_post = npost["cpu_us"] / (3 * machines)
a_post = apost["cpu_us"] / (3 * machines)
print(f"== the same herd against nginx (the config as a static file, POST /report answered 200 without a store)")
print(f"  config fetch, fresh connections: server CPU per connection agent {agent_conf:.0f} us, nginx {n_conf:.0f} us: agent/nginx = {agent_conf / n_conf:.2f} (target <= 1); nginx p99 {nconf['p99']['config']*1000:.1f} ms")
print(f"  floor (GET /healthz answered \"ok\"), fresh connections: nginx {nfloor['cpu_us'] / machines:.1f} us = {nfloor['cpu_us'] / nconf['cpu_us']:.2f} of its config fetch")
print(f"  report POST alone, fresh connections: server CPU per connection agent {a_post:.0f} us (recorded in the embedded store), nginx {n_post:.0f} us (nothing stored): agent/nginx = {a_post / n_post:.2f}; p99 agent {apost['p99']['report']*1000:.1f} ms, nginx {npost['p99']['report']*1000:.1f} ms")
PY
            if command -v wrk >/dev/null; then
                local ka na
                na=$(keepalive "http://127.0.0.1:$NGINX_PORT/config/worker" "$nginx_pids")
                ka=$(keepalive "http://127.0.0.1:$port/config/worker" "$pid")
                python3 - "$ka" "$na" <<'PY'
import sys
(ar, ac), (nr, nc) = (map(float, a.split()) for a in sys.argv[1:3])
print(f"  keep-alive config fetch (wrk, $CONNS connections): agent {ar:.0f} req/s {ac:.1f} us/req, nginx {nr:.0f} req/s {nc:.1f} us/req: CPU per request agent/nginx = {ac / nc:.2f} (target < 1)".replace("$CONNS", __import__("os").environ.get("CONNS", "100")))
PY
            else
                echo "  keep-alive: skipped (no wrk; apt-get install wrk)"
            fi
        else
            echo "== nginx: skipped (no nginx; apt-get install nginx-light)"
        fi
    fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

RESULTS=$TMP/results
mkdir -p "$RESULTS"
export RESULTS CONNS
run_store embedded
if command -v etcd >/dev/null; then
    cport=$(free_port); pport=$(free_port)
    etcd --name b --data-dir "$TMP/etcd" --listen-client-urls "http://127.0.0.1:$cport" \
        --advertise-client-urls "http://127.0.0.1:$cport" --listen-peer-urls "http://127.0.0.1:$pport" \
        --initial-advertise-peer-urls "http://127.0.0.1:$pport" --initial-cluster "b=http://127.0.0.1:$pport" \
        >"$TMP/etcd.log" 2>&1 &
    PIDS+=("$!")
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$cport/health" >/dev/null 2>&1 && break; sleep 0.1; done
    run_store etcd --inventory-store etcd --etcd-endpoints "http://127.0.0.1:$cport"
else
    echo "== etcd store: skipped (no etcd; .ci/install-packages all installs etcd-server)"
fi
