#!/bin/bash
# The fleet benchmark (issue 28): MACHINES (5,000) machines boot at once against `agent serve`
# on 127.0.0.1, each on fresh connections: the config fetch, then 3 reports (fetch, disks,
# files) — against the embedded store, and against etcd when `etcd` is installed (one member
# on 127.0.0.1, a store of its own). Prints, per request kind, p50 and p99 latency (connect to
# the last byte of the answer), reports lost (sent minus recorded, must be 0), and the
# server's CPU (user+system, /proc) per machine for the whole boot next to the CPU of serving
# the config alone, measured in the same run (a herd of config fetches only).
# Targets: p99 <= 1 s, 0 lost, reports costing no more server CPU than the config fetch.
#
# Needs: python3 (and etcd for the second store). Env: MACHINES (default 5000), CONCURRENCY
# (default 1000 machines in flight), AGENT_BIN (this binary instead of a release build).
set -euo pipefail

cd "$(dirname "$0")/.."
MACHINES=${MACHINES:-5000}
CONCURRENCY=${CONCURRENCY:-1000}
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
[ -n "${AGENT_BIN:-}" ] || cargo build --release --quiet
AGENT=${AGENT_BIN:-target/release/agent}

TMP=$(mktemp -d)
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

run_store() { # NAME EXTRA_ARGS...
    local name=$1; shift
    local port aport
    port=$(free_port); aport=$(free_port)
    "$AGENT" serve --source "$TMP/src" --state-dir "$TMP/state-$name" --listen-http "127.0.0.1:$port" \
        --admin-listen "127.0.0.1:$aport" --no-access-log --max-connections 20000 "$@" \
        >"$TMP/serve-$name.out" 2>"$TMP/serve-$name.log" &
    local pid=$!
    PIDS+=("$pid")
    for _ in $(seq 100); do grep -q "source loaded" "$TMP/serve-$name.out" 2>/dev/null && break; sleep 0.1; done
    python3 - "$name" "$pid" "$port" "$aport" "$MACHINES" "$CONCURRENCY" <<'PY'
import asyncio, json, os, sys, time, uuid, urllib.request
name, pid, port, aport, machines, conc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
tick = os.sysconf("SC_CLK_TCK")
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick
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
def report(mid, boot, stage, last):
    body = json.dumps({"format": 1, "id": uuid.uuid4().hex, "boot_id": boot, "machine": {"id": mid},
        "agent": "bench", "config": {"pool": "worker"}, "stage": stage, "outcome": "ok", "final": last,
        "duration_ms": 1000, "changes": {"paths": [f"/etc/fleet/{i}" for i in range(100)] if stage == "files" else []}}).encode()
    return (b"POST /report HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
lat = {"config": [], "report": []}
bad = {"config": 0, "report": 0}
async def machine(sem, i, with_reports, tag):
    async with sem:
        d, s = await request(GET)
        lat["config"].append(d); bad["config"] += s != 200
        if with_reports:
            mid = f"bench-{tag}-{i}"
            for stage, last in (("fetch", False), ("disks", False), ("files", True)):
                d, s = await request(report(mid, f"boot-{tag}-{i}", stage, last))
                lat["report"].append(d); bad["report"] += s != 200
async def herd(with_reports, tag):
    sem = asyncio.Semaphore(conc)
    await asyncio.gather(*(machine(sem, i, with_reports, tag) for i in range(machines)))
def pct(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(len(v) * p))] if v else float("nan")
c0 = cpu(); asyncio.run(herd(False, "a")); c1 = cpu()
config_only = (c1 - c0) / machines
lat = {"config": [], "report": []}; bad = {"config": 0, "report": 0}
c0 = cpu(); t0 = time.perf_counter(); asyncio.run(herd(True, "b")); wall = time.perf_counter() - t0; c1 = cpu()
whole = (c1 - c0) / machines
m = urllib.request.urlopen(f"http://127.0.0.1:{aport}/machines?state=provisioned").read()
provisioned = sum(1 for x in json.loads(m)["machines"] if x["id"].startswith("bench-b-"))
metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
recorded = next((int(float(l.split()[-1])) for l in metrics.splitlines() if l.startswith('agent_serve_reports_total{result="recorded"}')), 0)
print(f"== {name} store: {machines} machines at once ({conc} in flight), {wall:.1f} s")
for k in ("config", "report"):
    print(f"  {k:7s} p50 {pct(lat[k], .5)*1000:8.1f} ms   p99 {pct(lat[k], .99)*1000:8.1f} ms   errors {bad[k]}")
print(f"  reports lost: {3 * machines - recorded} (sent {3 * machines}, recorded {recorded}); machines provisioned: {provisioned}/{machines}")
print(f"  server CPU per machine: config fetch alone {config_only*1e6:.0f} us; fetch + 3 reports {whole*1e6:.0f} us; reports / config fetch = {(whole - config_only) / config_only:.2f} (target <= 1)")
PY
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

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
