#!/usr/bin/env bash
# The main job, end to end on this machine: validate and render example configs with the
# static binary. (Disk provisioning on loop devices and `agent serve` join as they land.)
set -euo pipefail
agent=${1:-target/x86_64-unknown-linux-gnu/release/agent}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/agent-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "agent info"
"$agent" info

step "validate examples/webserver.ign (valid)"
"$agent" validate "$here/webserver.ign" && echo "valid"

step "validate examples/broken.ign (every error with its JSON path, line and column)"
if "$agent" validate "$here/broken.ign"; then echo "unexpectedly valid"; exit 1; else echo "exit $? (invalid, as expected)"; fi

step "render: fetch stage resolves the merge chain and writes the rendered config"
"$agent" run --stage fetch --config-file "$here/webserver.ign" --state-dir "$work/state"
cat "$work/state/config.json"
