#!/bin/bash
# After the cut during the image write: no partition table on the disk (the image's first MiB
# is written last), and the server does not count the machine installed.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
[[ -z $(head -c 1048576 "$DISK" | tr -d '\0' | head -c1) ]] ||
    fail "the disk's first MiB is not blank after a cut image write"
sfdisk -d "$DISK" >/dev/null 2>&1 && fail "a partition table after a cut image write"
"$AGENT_BIN" machines --server "$ADMIN_URL" show --json mac-52:54:00:41:00:03 >"$WORK/after-cut.json"
python3 - "$WORK/after-cut.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
assert m.get("installed") is None, m.get("installed")
assert m["state"] != "installed", m["state"]
PY
