#!/usr/bin/env python3
"""Writes docs/openapi.json, the OpenAPI 3.0 document of `agent serve`'s admin and machine
APIs. Edit this script, run it (`python3 docs/openapi.py`), commit both; `cargo test --test
serve api::` checks real answers against the document, and that the file is this script's
output (`python3 docs/openapi.py -` writes it to stdout)."""

import json
import os
import sys

STATES = [
    "fetching", "provisioning", "provisioned", "failed", "unassigned",
    "installed", "running", "unresponsive", "booted",
]


def ref(name):
    return {"$ref": f"#/components/schemas/{name}"}


def obj(props, optional=(), nullable=False, description=None):
    """An object with exactly `props`: each required but those in `optional`."""
    o = {
        "type": "object",
        "additionalProperties": False,
        "required": [k for k in props if k not in optional],
        "properties": props,
    }
    if nullable:
        o["nullable"] = True
    if description:
        o["description"] = description
    return o


def s(description=None, nullable=False, **kw):
    o = {"type": "string", **kw}
    if nullable:
        o["nullable"] = True
    if description:
        o["description"] = description
    return o


def time(description=None, nullable=False):
    return s(description, nullable, format="date-time")


def integer(description=None, nullable=False):
    o = {"type": "integer", "minimum": 0}
    if nullable:
        o["nullable"] = True
    if description:
        o["description"] = description
    return o


def number(description=None):
    o = {"type": "number", "minimum": 0}
    if description:
        o["description"] = description
    return o


BOOL = {"type": "boolean"}
STRINGS = {"type": "array", "items": {"type": "string"}}
TRUST = s("What the credential proved.", enum=["none", "pool", "machine"])


def nullable(schema):
    return {**schema, "nullable": True}


def text(description):
    return {"description": description, "content": {"text/plain": {"schema": {"type": "string"}}}}


def json_body(description, schema, media="application/json"):
    return {"description": description, "content": {media: {"schema": schema}}}


IGNITION = "application/vnd.coreos.ignition+json"


SCHEMAS = {
    "State": s(
        "A machine's state. `installed`: the OS image written (an `install` report), the "
        "installed system not heard from yet; `running`: the installed system came up; "
        "`unresponsive`: installed or provisioned, no `running` report within "
        "`--running-deadline`; `booted`: network-booted (`/ipxe`), no report that counts for it yet.",
        enum=STATES,
    ),
    "Identity": obj(
        {
            "id": s(),
            "uuid": s(nullable=True),
            "serial": s(nullable=True),
            "macs": STRINGS,
            "platform": s(nullable=True),
            "instanceId": s(nullable=True),
            "hostname": s(nullable=True),
        }
    ),
    "AppliedConfig": obj(
        {"pool": s(nullable=True), "name": s(nullable=True), "hash": s(nullable=True)},
        nullable=True,
    ),
    "Changes": obj(
        {
            "partitions": obj({"created": STRINGS, "kept": STRINGS, "deleted": STRINGS}),
            "filesystems": obj({"made": STRINGS, "reused": STRINGS}),
            "paths": STRINGS,
            "pathsTruncated": integer("Paths written beyond those listed."),
        }
    ),
    "ReportChanges": obj(
        {
            "partitions": obj(
                {"created": STRINGS, "kept": STRINGS, "deleted": STRINGS},
                optional=["created", "kept", "deleted"],
            ),
            "filesystems": obj({"made": STRINGS, "reused": STRINGS}, optional=["made", "reused"]),
            "paths": STRINGS,
            "pathsTruncated": integer("Paths written beyond those listed (absent: none)."),
        },
        optional=["partitions", "filesystems", "paths", "pathsTruncated"],
    ),
    "Detail": obj(
        {
            "changes": ref("Changes"),
            "logTail": STRINGS,
            "error": s("The whole error, when `error` of the stage is cut.", nullable=True),
        }
    ),
    "Stage": obj(
        {
            "stage": s(enum=["fetch", "disks", "files", "install", "running"]),
            "outcome": s(enum=["started", "ok", "failed"]),
            "final": BOOL,
            "durationMs": integer(),
            "reportId": s(),
            "received": time("When the server received the report."),
            "authenticated": BOOL,
            "trust": TRUST,
            "counts": {
                "type": "boolean",
                "description": "Whether the report could speak for the record.",
            },
            "error": s("One line, cut at 512 bytes.", nullable=True),
            "detail": ref("Detail"),
        },
        optional=["detail"],
        description="A stage of a boot; `detail` only in `GET /machines/{id}`.",
    ),
    "Boot": obj(
        {
            "bootId": s(),
            "firstSeen": time(),
            "lastSeen": time(),
            "kernel": s("The kernel release its `running` report named.", nullable=True),
            "stages": {"type": "array", "items": ref("Stage")},
        }
    ),
    "Machine": obj(
        {
            "id": s(),
            "state": ref("State"),
            "pool": s(nullable=True),
            "identity": ref("Identity"),
            "config": ref("AppliedConfig"),
            "agent": s("The agent's version.", nullable=True),
            "firstSeen": time(),
            "lastSeen": time(),
            "authenticated": BOOL,
            "trust": TRUST,
            "reports": integer(),
            "installed": obj(
                {"at": time(), "bootId": s()},
                nullable=True,
                description="The install the server has evidence of.",
            ),
            "reprovision": time("When a reprovision was asked for.", nullable=True),
            "machineFile": s(nullable=True),
            "boots": {"type": "array", "items": ref("Boot")},
        }
    ),
    "Machines": obj(
        {
            "machines": {"type": "array", "items": ref("Machine")},
            "next": s("The `?after=` of the next page; null: the last page.", nullable=True),
        }
    ),
    "Summary": obj(
        {
            "total": integer(),
            "byState": obj({st: integer() for st in STATES}),
            "byPool": {
                "type": "object",
                "description": "Per pool (`\"\"`: machines of no pool), its states that have machines.",
                "additionalProperties": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {st: integer() for st in STATES},
                },
            },
        }
    ),
    "Reprovision": obj({"id": s(), "reprovision": time()}),
    "Rollout": obj(
        {
            "pool": s(),
            "from": s("The config the rollout starts from (lastKnownGood's), by hash."),
            "to": s("The new config, by hash."),
            "state": s(enum=["rolling", "paused", "halted", "complete", "aborted"]),
            "stage": integer("The policy's step reached (from 0)."),
            "step": s("That step: a count or a percentage.", nullable=True),
            "started": time(),
            "changed": time(),
            "counts": obj(
                {"given": integer(), "provisioned": integer(), "failed": integer(), "pending": integer()}
            ),
            "machines": {
                "type": "array",
                "items": obj(
                    {
                        "id": s(),
                        "given": time(),
                        "stage": integer(),
                        "outcome": s(enum=["provisioned", "failed", "pending"], nullable=True),
                        "error": s(nullable=True),
                    }
                ),
            },
            "halt": obj(
                {
                    "at": time(),
                    "stage": integer(),
                    "reason": s(),
                    "machines": {"type": "array", "items": obj({"id": s(), "error": s(nullable=True)})},
                },
                nullable=True,
                description="Why the rollout stopped itself.",
            ),
        },
        description="A pool's rollout of a new config (docs/serve.md, *Rollouts*).",
    ),
    "Rollouts": obj({"rollouts": {"type": "array", "items": ref("Rollout")}}),
    "Challenge": obj({"nonce": s(), "expiresInSeconds": integer()}),
    "Report": {
        **obj(
            {
                "format": {"type": "integer", "enum": [1]},
                "id": s(),
                "bootId": s(),
                "sent": s(nullable=True),
                "machine": ref("Identity"),
                "agent": s(nullable=True),
                "config": ref("AppliedConfig"),
                "stage": s(enum=["fetch", "disks", "files", "install", "running"]),
                "outcome": s(enum=["started", "ok", "failed"]),
                "final": BOOL,
                "durationMs": integer(),
                "changes": ref("ReportChanges"),
                "error": s(nullable=True),
                "logTail": STRINGS,
                "kernel": s("The kernel release (a `running` report).", nullable=True),
            },
            optional=["sent", "agent", "config", "final", "durationMs", "changes", "error", "logTail", "kernel"],
        ),
        "description": "A machine's report (docs/reports.md). The snake_case names of earlier agents (`boot_id`, `duration_ms`, `log_tail`, `instance_id`, `paths_truncated`) are read too.",
    },
    "Recorded": obj({"recorded": s(enum=["new", "duplicate"])}),
    "GenRef": obj({"generation": s(), "path": s(), "since": time()}, nullable=True),
    "Source": obj(
        {
            "source": s(),
            "assigned": ref("GenRef"),
            "active": ref("GenRef"),
            "lastKnownGood": ref("GenRef"),
            "error": s(nullable=True),
            "pools": nullable(
                {
                    "type": "array",
                    "items": obj({"name": s(), "config": s(), "minVersion": s()}),
                }
            ),
            "machines": obj(
                {"files": integer(), "bootProfiles": STRINGS, "assets": STRINGS}, nullable=True
            ),
        }
    ),
    "Tokens": {
        "oneOf": [
            obj(
                {"mode": s(enum=["store"]), "error": s(nullable=True), "ttlSeconds": integer()}
            ),
            obj(
                {
                    "mode": s(enum=["derived"]),
                    "error": s(nullable=True),
                    "ttlSeconds": integer(),
                    "rotationSeconds": integer(),
                    "clockSkewSeconds": integer(),
                    "keyId": s(nullable=True),
                    "retainedPayloads": {
                        "type": "array",
                        "items": obj(
                            {"pool": s(), "config": s(), "tokensExpire": time()}
                        ),
                    },
                }
            ),
        ]
    },
    "Status": obj(
        {
            "sources": {"type": "array", "items": ref("Source")},
            "rollouts": {"type": "array", "items": ref("Rollout")},
            "tokens": ref("Tokens"),
            "checkpoint": obj(
                {
                    "dir": s(nullable=True),
                    "errors": STRINGS,
                    "restored": obj(
                        {
                            "active": s(nullable=True),
                            "lastKnownGood": s(nullable=True),
                            "retainedPayloads": integer(),
                        },
                        nullable=True,
                    ),
                }
            ),
            "inventory": obj(
                {"ok": BOOL, "error": s(nullable=True), "since": time(), "failures": integer()}
            ),
            "openConnections": integer(),
            "limits": obj(
                {
                    "maxConnections": integer(),
                    "maxConnectionsPerAddress": integer(),
                    "headerTimeoutSeconds": number(),
                    "idleTimeoutSeconds": number(),
                    "minSendRateBytesPerSecond": integer(),
                    "sendRateWindowSeconds": number(),
                    "maxHeaderBytes": integer(),
                    "maxHeaders": integer(),
                    "maxBodyBytes": integer(),
                    "maxBodyTotalBytes": integer(),
                }
            ),
            "admin": obj(
                {"listen": s(), "bound": BOOL, "error": s(nullable=True), "since": time()},
                nullable=True,
            ),
        },
        description="`/status` without `--require-token`.",
    ),
    "PublicStatus": obj(
        {
            "ready": BOOL,
            "generation": s(nullable=True),
            "error": BOOL,
            "tokensError": BOOL,
            "checkpointError": BOOL,
            "inventoryError": BOOL,
            "adminError": BOOL,
            "detail": s(),
        },
        description="`/status` under `--require-token`: nothing that names a pool.",
    ),
    "IgnitionConfig": {
        "type": "object",
        "description": "An Ignition config (spec 3.x, docs/ignition.md).",
    },
}

ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
POOL = {"name": "pool", "in": "path", "required": True, "schema": {"type": "string"}}
ADMIN = ["admin"]
MACHINE = ["machine"]
REFUSED = text("Not the admin token (`--admin-token-file`), or none given.")
CHANGE_REFUSED = text(
    "A change a browser could have sent from another page: no `X-Agent-Admin: 1`, or an `Origin` or `Sec-Fetch-Site` of another site."
)

PATHS = {
    "/machines": {
        "get": {
            "tags": ADMIN,
            "summary": "A page of the inventory, by id.",
            "parameters": [
                {"name": "pool", "in": "query", "schema": {"type": "string"}},
                {"name": "state", "in": "query", "schema": ref("State")},
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 10000}},
                {"name": "after", "in": "query", "schema": {"type": "string"}},
            ],
            "responses": {
                "200": json_body("The machines.", ref("Machines")),
                "400": text("A state, limit or after that is not one (the states named)."),
                "401": REFUSED,
            },
        }
    },
    "/machines/summary": {
        "get": {
            "tags": ADMIN,
            "summary": "How many machines, by state (every state) and by pool.",
            "responses": {"200": json_body("The counts.", ref("Summary")), "401": REFUSED},
        }
    },
    "/machines/{id}": {
        "get": {
            "tags": ADMIN,
            "summary": "One machine, with each stage's details.",
            "parameters": [ID],
            "responses": {
                "200": json_body("The machine.", ref("Machine")),
                "404": text("No such machine."),
            },
        },
        "delete": {
            "tags": ADMIN,
            "summary": "Forget a decommissioned machine (its record, details and tokens); a later report of it makes a new record.",
            "parameters": [ID],
            "responses": {
                "204": {"description": "Removed."},
                "403": CHANGE_REFUSED,
                "404": text("No such machine."),
            },
        },
    },
    "/machines/{id}/reprovision": {
        "post": {
            "tags": ADMIN,
            "summary": "Install the machine again at its next network boot.",
            "parameters": [ID],
            "responses": {
                "200": json_body("Asked for.", ref("Reprovision")),
                "404": text("No such machine."),
            },
        }
    },
    "/rollouts": {
        "get": {
            "tags": ADMIN,
            "summary": "Every pool's rollout, as the server last evaluated it.",
            "responses": {"200": json_body("The rollouts.", ref("Rollouts"))},
        }
    },
    "/rollouts/{pool}": {
        "get": {
            "tags": ADMIN,
            "summary": "A pool's rollout, read from the inventory store now.",
            "parameters": [POOL],
            "responses": {
                "200": json_body("The rollout.", ref("Rollout")),
                "404": text("No such pool, no rollout policy, or no rollout under way."),
            },
        }
    },
    "/rollouts/{pool}/{action}": {
        "post": {
            "tags": ADMIN,
            "summary": "Steer a pool's rollout: `pause`, `resume`, `promote` or `abort`.",
            "parameters": [
                POOL,
                {"name": "action", "in": "path", "required": True,
                 "schema": {"type": "string", "enum": ["pause", "resume", "promote", "abort"]}},
            ],
            "responses": {
                "200": json_body("The rollout after the change.", ref("Rollout")),
                "403": CHANGE_REFUSED,
                "404": text("No such pool, no rollout policy, or no rollout under way."),
                "409": text("Not in this state (e.g. `resume` of a halted rollout: promote or abort it)."),
            },
        }
    },
    "/auth/challenge": {
        "get": {
            "tags": ADMIN,
            "summary": "A nonce for the admin token's challenge-response (`Authorization: Agent-HMAC`).",
            "responses": {"200": json_body("A nonce.", ref("Challenge"))},
        }
    },
    "/config/{pool}": {
        "get": {
            "tags": MACHINE,
            "summary": "A pool's config.",
            "parameters": [{"name": "pool", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {
                "200": json_body("The config.", ref("IgnitionConfig"), IGNITION),
                "404": {"description": "No such pool (an empty body)."},
            },
        }
    },
    "/ignition": {
        "get": {
            "tags": MACHINE,
            "summary": "The config of the pool whose token is given (`Authorization: Bearer`).",
            "responses": {
                "200": json_body("The config.", ref("IgnitionConfig"), IGNITION),
                "401": text("No token, or a malformed one."),
            },
        }
    },
    "/report": {
        "post": {
            "tags": MACHINE,
            "summary": "A machine's provisioning report.",
            "requestBody": {"required": True, "content": {"application/json": {"schema": ref("Report")}}},
            "responses": {
                "200": json_body("Recorded (or a retry of one recorded).", ref("Recorded")),
                "400": text("Not a valid report: the field and the limit named."),
            },
        }
    },
    "/status": {
        "get": {
            "tags": MACHINE,
            "summary": "The server's state: generations, tokens, checkpoint, inventory store, limits.",
            "responses": {
                "200": json_body(
                    "The state (`PublicStatus` under `--require-token`).",
                    {"oneOf": [ref("Status"), ref("PublicStatus")]},
                )
            },
        }
    },
    "/healthz": {
        "get": {
            "tags": MACHINE + ADMIN,
            "summary": "Liveness.",
            "responses": {"200": text("ok")},
        }
    },
    "/readyz": {
        "get": {
            "tags": MACHINE,
            "summary": "Readiness: a generation is served.",
            "responses": {
                "200": text("The generation served."),
                "503": text("No valid config generation loaded."),
            },
        }
    },
}

DOC = {
    "openapi": "3.0.3",
    "info": {
        "title": "agent serve",
        "version": "1",
        "description": "The admin API (the admin listener, `--admin-listen`: the inventory) and the machine API (the machine-facing listeners: configs, reports, status) of `agent serve` (docs/serve.md). JSON keys are camelCase, times RFC 3339 in UTC; every key of an answer is always there (`null` when unknown). Errors are one line of text/plain.",
    },
    "tags": [
        {"name": "admin", "description": "The admin listener; the admin token when one is set."},
        {"name": "machine", "description": "The machine-facing listeners."},
    ],
    "paths": PATHS,
    "components": {"schemas": SCHEMAS},
}

if __name__ == "__main__":
    text = json.dumps(DOC, indent=2) + "\n"
    if sys.argv[1:] == ["-"]:  # to stdout (the tests compare it with the file)
        sys.stdout.write(text)
    else:
        out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "openapi.json")
        with open(out, "w") as f:
            f.write(text)
