#!/bin/bash
set -euo pipefail
"$SCENARIO/make-drive.sh" "$SCENARIO/user_data.ign"
