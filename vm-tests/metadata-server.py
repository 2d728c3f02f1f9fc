#!/usr/bin/env python3
"""A cloud metadata service for the VM scenarios, on the host (127.0.0.1); the guest reaches it
at 169.254.169.254:80 through QEMU's guestfwd.

    metadata-server.py FLAVOR SOURCE_DIR ADDR:PORT

FLAVOR
  aws  EC2 instance metadata service with IMDSv2 required (HttpTokens=required): PUT
       /latest/api/token (with X-aws-ec2-metadata-token-ttl-seconds) hands out a token; every
       GET must carry it in X-aws-ec2-metadata-token (else 401). Serves
       /2019-10-01/user-data (SOURCE_DIR/user-data) and /latest/meta-data/placement/region.
  gcp  GCE metadata server: every request must carry Metadata-Flavor: Google (else 403);
       serves /computeMetadata/v1/instance/attributes/user-data (SOURCE_DIR/user-data).

Every request is logged on stderr as "REQUEST METHOD PATH token=yes|no flavor=yes|no STATUS".
"""

import http.server
import os
import secrets
import sys

FLAVOR, SOURCE, LISTEN = sys.argv[1], sys.argv[2], sys.argv[3]
TOKENS = set()


def user_data():
    with open(os.path.join(SOURCE, "user-data"), "rb") as f:
        return f.read()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def reply(self, status, body=b""):
        has_token = self.headers.get("X-aws-ec2-metadata-token") in TOKENS
        flavor = self.headers.get("Metadata-Flavor") == "Google"
        sys.stderr.write(
            "REQUEST %s %s token=%s flavor=%s %d\n"
            % (self.command, self.path, "yes" if has_token else "no",
               "yes" if flavor else "no", status))
        sys.stderr.flush()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

    def do_PUT(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        if FLAVOR != "aws" or self.path != "/latest/api/token":
            return self.reply(404, b"not found\n")
        if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            return self.reply(400, b"missing token TTL\n")
        tok = "AQAE" + secrets.token_urlsafe(24)
        TOKENS.add(tok)
        self.reply(200, tok.encode())

    def do_GET(self):
        if FLAVOR == "aws":
            if self.headers.get("X-aws-ec2-metadata-token") not in TOKENS:
                return self.reply(401, b"IMDSv2 token required\n")
            if self.path == "/2019-10-01/user-data":
                return self.reply(200, user_data())
            if self.path == "/latest/meta-data/placement/region":
                return self.reply(200, b"eu-north-1")
            return self.reply(404, b"not found\n")
        if FLAVOR == "gcp":
            if self.headers.get("Metadata-Flavor") != "Google":
                return self.reply(403, b"Missing Metadata-Flavor:Google header.\n")
            if self.path == "/computeMetadata/v1/instance/attributes/user-data":
                return self.reply(200, user_data())
            return self.reply(404, b"not found\n")
        self.reply(500, b"unknown flavor\n")


host, port = LISTEN.rsplit(":", 1)
http.server.ThreadingHTTPServer((host, int(port)), Handler).serve_forever()
