#!/bin/bash
# make-drive.sh USER_DATA_FILE|-: builds $WORK/configdrive.iso, OpenStack's config drive layout
# (ISO9660 + Joliet + Rock Ridge, label config-2), with that user_data (none for "-").
set -euo pipefail
src=$WORK/drive-src
rm -rf "$src"
mkdir -p "$src/openstack/latest"
echo '{"uuid": "0b7c9d4e-1c7a-4a53-9c65-4d2c9e1f0a11", "hostname": "vm-openstack"}' \
    >"$src/openstack/latest/meta_data.json"
if [[ $1 != - ]]; then cp "$1" "$src/openstack/latest/user_data"; fi
xorriso -as mkisofs -quiet -V config-2 -J -R -o "$WORK/configdrive.iso" "$src"
blkid -p -c /dev/null -o value -s LABEL "$WORK/configdrive.iso" | grep -qx config-2
