#!/bin/bash
# Before the second boot: the canary's failure halts the rollout (evaluated every second).
set -euo pipefail
for _ in $(seq 1 100); do
    state=$(curl -sf "$SERVER_URL/status" | python3 -c '
import json, sys
r = [r for r in json.load(sys.stdin)["rollouts"] if r["pool"] == "worker"]
print(r[0]["state"] if r else "none")')
    [[ $state == halted ]] && exit 0
    sleep 0.2
done
echo "the rollout did not halt (state $state)"; exit 1
