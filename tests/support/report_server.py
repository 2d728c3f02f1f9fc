#!/usr/bin/env python3
"""A small config and report server for tests/report_*.rs (not `agent serve`: the agent side
of reports is tested against this, the server side has its own tests).

  report_server.py PORT OUT_DIR [CONFIG_FILE REPORT_URL]
  report_server.py PORT OUT_DIR redirect:URL

GET /ignition (any query) answers CONFIG_FILE with the X-Agent-* headers of docs/reports.md
(X-Agent-Report-URL: REPORT_URL), or with `redirect:URL` a 302 to URL; GET /hello answers
"hi"; GET of anything else is 404. POST /report stores the body as OUT_DIR/<n>.json and its
Authorization header as OUT_DIR/<n>.auth, then answers 204. Every request is logged to
OUT_DIR/requests.log as "METHOD PATH AUTHORIZATION". Prints "ready" once listening.
"""
import hashlib
import http.server
import os
import sys

port, out = int(sys.argv[1]), sys.argv[2]
redirect = None
config = None
if len(sys.argv) > 3 and sys.argv[3].startswith("redirect:"):
    redirect = sys.argv[3][len("redirect:"):]
elif len(sys.argv) > 3:
    config = open(sys.argv[3], "rb").read()
report_url = sys.argv[4] if len(sys.argv) > 4 else "/report"
count = [0]


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def note(self):
        with open(os.path.join(out, "requests.log"), "a") as f:
            f.write("%s %s %s\n" % (self.command, self.path, self.headers.get("Authorization", "")))

    def do_GET(self):
        self.note()
        path = self.path.split("?")[0]
        if path == "/ignition" and redirect is not None:
            self.send_response(302)
            self.send_header("Location", redirect)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/hello":
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"hi")
        elif path == "/ignition" and config is not None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(config)))
            self.send_header("X-Agent-Pool", "worker")
            self.send_header("X-Agent-Config", "worker-cfg")
            self.send_header("X-Agent-Config-Hash", "sha256-" + hashlib.sha256(config).hexdigest())
            self.send_header("X-Agent-Report-URL", report_url)
            self.end_headers()
            self.wfile.write(config)
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def do_POST(self):
        self.note()
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        if self.path.split("?")[0] != "/report":
            self.send_response(404)
        else:
            count[0] += 1
            base = os.path.join(out, "%03d" % count[0])
            with open(base + ".auth", "w") as f:
                f.write(self.headers.get("Authorization", ""))
            with open(base + ".json", "wb") as f:
                f.write(body)
            self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()


s = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
print("ready", flush=True)
s.serve_forever()
