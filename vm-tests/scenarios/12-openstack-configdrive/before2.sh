#!/bin/bash
# A config drive without user_data: no user config.
set -euo pipefail
"$SCENARIO/make-drive.sh" -
