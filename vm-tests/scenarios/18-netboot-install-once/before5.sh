#!/bin/bash
# Before node-1's third boot: remember its root filesystem, then ask for a reinstall.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
fs_get 1 UUID >"$WORK/root1.uuid"
"$AGENT_BIN" machines --server "$ADMIN_URL" reprovision 29000000-0000-4000-8000-000000000001
