"""After the peer tester's run: the store holds exactly what the server said.

- no idempotency-key row stores a 4xx (a refusal is never a key's result);
- no row exists for a key whose every request was refused with a 4xx;
- the charges table holds exactly the charges the server answered 201 for,
  and none of them breaks the spec's `minimum: 1` on `amount`.

Usage: schemathesis_store.py RUN.har PAYMENTS.db
"""

import json
import sqlite3
import sys
from urllib.parse import urlparse


def header(entry, name):
    for h in entry["request"]["headers"]:
        if h["name"].lower() == name:
            return h["value"]
    return None


def main(har_path, db_path):
    with open(har_path, encoding="utf-8") as f:
        entries = json.load(f)["log"]["entries"]
    statuses_by_key = {}
    created = set()
    for entry in entries:
        status = entry["response"]["status"]
        path = urlparse(entry["request"]["url"]).path
        key = header(entry, "idempotency-key")
        scope = header(entry, "x-account-id")
        if key is not None and scope is not None:
            statuses_by_key.setdefault((scope, key), set()).add(status)
        if (
            entry["request"]["method"] == "POST"
            and path in ("/v1/charges", "/v1/legacy-charges")
            and status == 201
        ):
            body = json.loads(entry["response"]["content"].get("text") or "{}")
            created.add(body["id"])

    db = sqlite3.connect(db_path)
    problems = []
    stored_4xx = db.execute(
        "SELECT scope, idem_key, response_status FROM idem_keys "
        "WHERE response_status BETWEEN 400 AND 499"
    ).fetchall()
    problems += [f"key row stores a {s}: {sc!r} {k!r}" for sc, k, s in stored_4xx]
    rows = {(s, k) for s, k in db.execute("SELECT scope, idem_key FROM idem_keys")}
    refused_only = {
        key
        for key, statuses in statuses_by_key.items()
        if statuses and all(400 <= s < 500 for s in statuses)
    }
    problems += [f"key row for a refused-only key: {k!r}" for k in sorted(rows & refused_only)]
    charges = {row[0]: row[1] for row in db.execute("SELECT id, amount FROM charges")}
    problems += [f"charge {i} was never answered 201" for i in sorted(set(charges) - created)]
    problems += [f"answered 201 for charge {i}, not stored" for i in sorted(created - set(charges))]
    problems += [f"charge {i} has amount {a}" for i, a in charges.items() if a < 1]

    print(
        f"store check: {len(entries)} requests, {len(statuses_by_key)} keys "
        f"({len(refused_only)} refused only), {len(rows)} key rows, "
        f"{len(charges)} charges, {len(problems)} problems"
    )
    for p in problems[:50]:
        print(f"  {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
