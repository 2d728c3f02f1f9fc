#!/bin/bash
# A config drive with a broken config.
set -euo pipefail
printf '{"ignition": {"version": "3.4.0"}, "storage": {"files": [' >"$WORK/broken.ign"
"$SCENARIO/make-drive.sh" "$WORK/broken.ign"
sha256sum "$DISK" | cut -d' ' -f1 >"$WORK/sum3"
