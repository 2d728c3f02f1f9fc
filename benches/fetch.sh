#!/usr/bin/env bash
# Benchmark: fetch a large file (default 1 GiB) over loopback HTTP with `agent fetch` and
# with `curl -o` from the same server in the same run. Prints the throughput ratio
# (agent / curl, target >= 0.8) and agent's peak RSS (target <= 16 MiB), also with
# sha512 verification on. SIZE_MIB=... and RUNS=... override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."

SIZE_MIB=${SIZE_MIB:-1024}
RUNS=${RUNS:-3}
for tool in curl /usr/bin/time python3 sha512sum; do
    command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install curl time)" >&2; exit 1; }
done

cargo build --release --quiet
BIN=$PWD/target/release/agent

work=$(mktemp -d /var/tmp/agent-bench.XXXXXX)
srv_pid=
cleanup() {
    [ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/srv" "$work/out"
# Random-ish contents (not sparse zeros) so nothing can shortcut; one 1 MiB block repeated.
head -c 1048576 /dev/urandom > "$work/block"
for _ in $(seq "$SIZE_MIB"); do cat "$work/block"; done > "$work/srv/big"
hash=$(sha512sum "$work/srv/big" | cut -d' ' -f1)

python3 -u -m http.server --bind 127.0.0.1 0 --directory "$work/srv" > "$work/srv.log" 2>&1 &
srv_pid=$!
port=
for _ in $(seq 100); do
    port=$(sed -n 's/.*port \([0-9]*\).*/\1/p' "$work/srv.log" | head -1)
    [ -n "$port" ] && break
    sleep 0.1
done
[ -n "$port" ] || { echo "http server did not start" >&2; cat "$work/srv.log" >&2; exit 1; }
url="http://127.0.0.1:$port/big"

now() { date +%s.%N; }
minimum() { awk -v a="$1" -v b="$2" -v m="$3" 'BEGIN { d = b - a; print (d < m) ? d : m }'; }
best_curl=999999; best_curl_hash=999999; best_agent=999999; best_agent_hash=999999; rss=0; rss_hash=0
for i in $(seq "$RUNS"); do
    rm -f "$work/out/"*
    t0=$(now); curl -sS -o "$work/out/curl" "$url"; sync "$work/out/curl"; t1=$(now)
    best_curl=$(minimum "$t0" "$t1" "$best_curl")
    rm -f "$work/out/"*
    # The reference for a verified fetch: curl piped to sha512sum, writing the file too.
    t0=$(now); curl -sS "$url" | tee "$work/out/curl" | sha512sum >/dev/null; sync "$work/out/curl"; t1=$(now)
    best_curl_hash=$(minimum "$t0" "$t1" "$best_curl_hash")
    rm -f "$work/out/"*
    t0=$(now)
    /usr/bin/time -v -o "$work/time.txt" "$BIN" -q fetch "$url" --output "$work/out/agent"
    t1=$(now)
    best_agent=$(minimum "$t0" "$t1" "$best_agent")
    r=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time.txt")
    [ "$r" -gt "$rss" ] && rss=$r
    rm -f "$work/out/"*
    t0=$(now)
    /usr/bin/time -v -o "$work/time.txt" "$BIN" -q fetch "$url" --output "$work/out/agent" --hash "sha512-$hash"
    t1=$(now)
    best_agent_hash=$(minimum "$t0" "$t1" "$best_agent_hash")
    r=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time.txt")
    [ "$r" -gt "$rss_hash" ] && rss_hash=$r
done

awk -v s="$SIZE_MIB" -v c="$best_curl" -v ch="$best_curl_hash" -v a="$best_agent" -v h="$best_agent_hash" \
    -v r="$rss" -v rh="$rss_hash" 'BEGIN {
    printf "size: %d MiB, best of runs\n", s
    printf "curl -o:                 %6.2f s  %7.1f MiB/s (reference)\n", c, s / c
    printf "agent fetch:             %6.2f s  %7.1f MiB/s  ratio %.2f (target >= 0.8)\n", a, s / a, c / a
    printf "curl | tee | sha512sum:  %6.2f s  %7.1f MiB/s (reference for verified fetches)\n", ch, s / ch
    printf "agent fetch --hash sha512: %4.2f s  %7.1f MiB/s  ratio %.2f (target >= 1)\n", h, s / h, ch / h
    printf "agent peak RSS:          %6.1f MiB (target <= 16), with sha512 %.1f MiB\n", r / 1024, rh / 1024
}'
