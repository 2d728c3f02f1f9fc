#!/bin/bash
# Before the first boot: once the good config is lastKnownGood, push the broken one with a
# rollout policy (one canary, halt after one failure), and wait until it is served.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
roles() {
    curl -sf "$SERVER_URL/status" | python3 -c '
import json, sys
s = json.load(sys.stdin)["sources"][0]
print((s["active"] or {}).get("generation"), (s["lastKnownGood"] or {}).get("generation"))'
}
for _ in $(seq 1 100); do
    read -r active lkg < <(roles)
    [[ $active != None && $active == "$lkg" ]] && break
    sleep 0.2
done
[[ $active == "$lkg" ]] || { echo "the good config never became lastKnownGood"; exit 1; }
pools=$WORK/serve/pools
printf '{"steps": [1], "haltAfter": 1}\n' >"$pools/.policy" && mv "$pools/.policy" "$pools/worker.rollout.json"
cp "$SCENARIO/broken.ign" "$pools/.worker" && mv "$pools/.worker" "$pools/worker.ign"
for _ in $(seq 1 100); do
    read -r now _ < <(roles)
    [[ $now != "$active" ]] && exit 0
    sleep 0.2
done
echo "the broken config was never served"; exit 1
