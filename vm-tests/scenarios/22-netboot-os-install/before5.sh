#!/bin/bash
# Before node-1's second install: its record as its installed system left it (running, with
# its hostname), then ask for the install.
set -euo pipefail
"$AGENT_BIN" machines --server "$ADMIN_URL" show --json mac-52:54:00:41:00:01 >"$WORK/node-1-before5.json"
"$AGENT_BIN" machines --server "$ADMIN_URL" reprovision mac-52:54:00:41:00:01
