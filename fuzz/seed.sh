#!/usr/bin/env bash
# Builds the fuzzers' seed corpora (fuzz/corpus/<target>/, not committed) from the repository's
# own test inputs: the test configs, the data URLs they contain, request heads and Accept values
# like those the server tests send, and TFTP packets like those a server answers with.
set -euo pipefail
cd "$(dirname "$0")"
rm -rf corpus
mkdir -p corpus/{parse,http_head,accept,data_url,tftp_packet,butane}
i=0
for f in ../tests/configs/*/*.ign ../examples/*.ign; do
  [ -e "$f" ] || continue
  i=$((i + 1)); cp "$f" "corpus/parse/$i"
done
grep -rhoE '"data:[^"]*"' ../tests/configs ../examples 2>/dev/null | tr -d '"' | sort -u | head -200 |
  { n=0; while IFS= read -r u; do n=$((n + 1)); printf '%s' "$u" > "corpus/data_url/$n"; done; }
printf 'data:,hello%%20world' > corpus/data_url/p1
printf 'data:text/plain;charset=utf-8;base64,aGVsbG8=' > corpus/data_url/p2
printf 'GET /config/worker HTTP/1.1\r\nHost: a\r\nAccept: application/vnd.coreos.ignition+json;version=3.4.0\r\n\r\n' > corpus/http_head/1
printf 'GET /ignition HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer abc\r\nUser-Agent: Ignition/2.26.0\r\n\r\n' > corpus/http_head/2
printf 'HEAD /config/master?etcd_index=2 HTTP/1.0\r\n\r\n' > corpus/http_head/3
printf 'GET /healthz HTTP/1.1\nHost: a\n\n' > corpus/http_head/4
printf 'application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1' > corpus/accept/1
printf 'application/vnd.coreos.ignition+json; version=2.2.0, application/vnd.coreos.ignition+json; version=3.1.0;q=0.5' > corpus/accept/2
printf '*/*' > corpus/accept/3
printf '\x00\x03\x00\x01hello' > corpus/tftp_packet/data
printf '\x00\x05\x00\x01File not found\x00' > corpus/tftp_packet/error
printf '\x00\x06blksize\x001428\x00' > corpus/tftp_packet/oack
# Butane: the shared corpus's inputs when it is there, and a few of our own.
for f in ../../shared/corpus/*/inputs/*.bu; do
  [ -e "$f" ] || continue
  cp "$f" "corpus/butane/$(basename "$f")"
done
printf 'variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /a\n      mode: 0644\n      contents:\n        inline: hi\n' > corpus/butane/s1
printf 'variant: openshift\nversion: 4.14.0\nmetadata:\n  name: x\nboot_device:\n  mirror:\n    devices: [/dev/a, /dev/b]\n' > corpus/butane/s2
echo "seeds: $(find corpus -type f | wc -l) files in fuzz/corpus/"
