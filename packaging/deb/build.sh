#!/usr/bin/env bash
# Builds the Debian package from a tree `make install` filled (`make deb` runs both):
#   packaging/deb/build.sh ROOT OUT_DIR VERSION MAINTAINER
# ROOT holds the installed files (PREFIX=/usr); this adds what a binary package carries
# besides (compressed man pages, copyright, changelog, lintian overrides, control files,
# md5sums) and writes OUT_DIR/agent_VERSION_amd64.deb with dpkg-deb, files owned by root.
# No debhelper: the tree is already what the package installs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
root=$1 out=$2 version=$3 maintainer=$4
# Dates in the package (changelog, file times): the last commit's, else now.
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$top" log -1 --format=%ct 2>/dev/null || date +%s)}

doc=$root/usr/share/doc/agent
install -d -m 0755 "$doc" "$root/usr/share/lintian/overrides"
# Man pages gzipped (-n: no name or time in the header, the same bytes every build).
find "$root/usr/share/man" -type f -name '*.[1-8]' -exec gzip -9nf {} +
install -m 0644 "$here/copyright" "$doc/copyright"
# A native package's changelog, in the Debian format; the project's own is CHANGELOG.md.
{
    echo "agent ($version) unstable; urgency=medium"
    echo
    echo "  * Release $version (CHANGELOG.md.gz in this directory)."
    echo
    echo " -- $maintainer  $(date -u -R -d "@$epoch")"
} | gzip -9n > "$doc/changelog.gz"
gzip -9n < "$top/CHANGELOG.md" > "$doc/CHANGELOG.md.gz"
install -m 0644 "$top/docs/install.md" "$doc/install.md"
install -m 0644 "$here/lintian-overrides" "$root/usr/share/lintian/overrides/agent"
chmod 0644 "$doc"/*.gz

rm -rf "$root/DEBIAN"
install -d -m 0755 "$root/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s|@VERSION@|$version|" -e "s|@MAINTAINER@|$maintainer|" -e "s|@SIZE@|$size|" \
    "$here/control.in" > "$root/DEBIAN/control"
install -m 0755 "$here/postinst" "$here/prerm" "$here/postrm" "$root/DEBIAN/"
# Every file under /etc is a conffile: kept on upgrade when changed, removed on purge.
(cd "$root" && find etc -type f 2>/dev/null | sort | sed 's|^|/|') > "$root/DEBIAN/conffiles"
[ -s "$root/DEBIAN/conffiles" ] || rm "$root/DEBIAN/conffiles"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
    xargs -0 md5sum) > "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
find "$root" -newermt "@$epoch" -exec touch -h -d "@$epoch" {} +
mkdir -p "$out"
deb=$out/agent_${version}_amd64.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
