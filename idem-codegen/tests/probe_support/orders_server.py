"""A small orders API for the probe's tests, from Python's standard library.

It serves fixtures/probe.yaml. With `--defect` it breaks the key contract
in one known way, so a test can show that the probe's check for that defect
fails and every other check holds:

  correct           keys claimed under a lock, per caller, body fingerprinted
  race              check-then-insert without a lock: concurrent duplicates
                    both run (the gap between the check and the insert is
                    widened so the race shows every time)
  ignore-key        the key is required but never looked up
  regenerate        a replay runs the request again and answers a new id
  ignore-body       a reused key with another body gets the first answer
  global-keys       one key space for every caller
  store-validation  a 400 for an invalid body is stored under its key
  body-in-key       the body's digest is part of the key: another body under
                    the same key is a new order, not a conflict
  lookup-lock       the lock is held around the lookup only, not around the
                    insert: concurrent duplicates both run
  wrong-status      a replay carries the original order under `409`
  false-header      `Idempotent-Replayed: false` on every original (correct)
  uuid-keys         a key that is not a UUID fails with 500, as a service
                    that parses it into a UUID column does (correct when
                    the spec says `format: uuid`)
  any-characters    keys are only held to their length: a space or a
                    non-ASCII character is accepted (correct: the spec
                    declares no character rule)
  stored-5xx        the first request of every key fails with 500, and the
                    500 is stored and replayed to every retry
  hang              accepts connections and never answers
  garbage           answers every connection with bytes that are not HTTP

With `--in-flight accepted` a duplicate of a running request gets `202`
and where to follow it, instead of a `409`.

With `--key-in body` the key travels in the JSON body's `idempotency_key`
field instead of the `Idempotency-Key` header.

It prints `listening on PORT` once it accepts connections.
"""

import argparse
import hashlib
import json
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ORDERS = {}
KEYS = {}
LOCK = threading.Lock()
NEXT_ID = [0]


def new_id():
    with LOCK:
        NEXT_ID[0] += 1
        return NEXT_ID[0]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    defect = "correct"
    delay = 0.0
    key_in_body = False
    in_flight_accepted = False

    def log_message(self, *args):
        pass

    def answer(self, status, body, replayed=False):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if replayed:
            self.send_header("Idempotent-Replayed", "true")
        elif self.defect == "false-header":
            self.send_header("Idempotent-Replayed", "false")
        self.end_headers()
        self.wfile.write(data)

    def problem(self, status, code, message):
        self.answer(status, {"code": code, "message": message})

    def do_GET(self):
        time.sleep(self.delay)
        account = self.headers.get("X-Account-Id")
        if not account:
            return self.problem(401, "caller_unidentified", "X-Account-Id is missing")
        parts = self.path.split("/")
        if len(parts) == 4 and parts[1] == "v1" and parts[2] == "orders":
            order = ORDERS.get(parts[3])
            if order and order[0] == account:
                return self.answer(200, order[1])
        self.problem(404, "not_found", "no such order")

    def do_POST(self):
        time.sleep(self.delay)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path == "/v1/notes":
            return self.answer(201, {"id": new_id()})
        if self.path != "/v1/orders":
            return self.problem(404, "not_found", "no such route")
        account = self.headers.get("X-Account-Id")
        if not account:
            return self.problem(401, "caller_unidentified", "X-Account-Id is missing")
        if self.key_in_body:
            try:
                key = json.loads(raw).get("idempotency_key")
            except (ValueError, AttributeError):
                key = None
        else:
            key = self.headers.get("Idempotency-Key")
        if key is None:
            return self.problem(400, "idempotency_key_missing", "Idempotency-Key is required")
        if self.defect == "any-characters":
            if not key or len(key) > 64:
                return self.problem(400, "idempotency_key_invalid", "the key must be 1 to 64 characters")
        elif not key or len(key) > 64 or any(not ("!" <= c <= "~") for c in key):
            return self.problem(400, "idempotency_key_invalid", "the key must be 1 to 64 visible ASCII characters")
        if self.defect == "uuid-keys":
            try:
                uuid.UUID(key)
            except ValueError:
                return self.problem(500, "internal", "invalid input syntax for type uuid")
        if self.defect == "ignore-key":
            return self.create(raw, None, account=account)
        scope = "" if self.defect == "global-keys" else account
        fingerprint = hashlib.sha256(raw).hexdigest()
        if self.defect == "body-in-key":
            key = key + ":" + fingerprint
        slot = (scope, key)
        if self.defect == "race":
            seen = KEYS.get(slot)
            if seen is None:
                time.sleep(0.05)
                return self.create(raw, slot, fingerprint, account)
            return self.replay(seen, fingerprint, raw)
        if self.defect == "lookup-lock":
            with LOCK:
                seen = KEYS.get(slot)
            if seen is None:
                time.sleep(0.05)
                with LOCK:
                    KEYS[slot] = {"state": "running", "fingerprint": fingerprint}
                return self.create(raw, slot, fingerprint, account)
            return self.replay(seen, fingerprint, raw)
        with LOCK:
            seen = KEYS.get(slot)
            if seen is None:
                KEYS[slot] = {"state": "running", "fingerprint": fingerprint}
        if seen is not None:
            return self.replay(seen, fingerprint, raw)
        if self.in_flight_accepted:
            time.sleep(0.05)
        self.create(raw, slot, fingerprint, account)

    def replay(self, seen, fingerprint, raw):
        if seen["state"] == "running":
            if self.in_flight_accepted:
                return self.answer(202, {"status_url": "/idempotency-keys/running"})
            return self.problem(409, "idempotency_key_in_use", "a request with this key is running")
        if seen["fingerprint"] != fingerprint and self.defect != "ignore-body":
            return self.problem(409, "idempotency_key_reused", "the key was used for another request")
        if self.defect == "regenerate":
            status, body = seen["answer"]
            body = dict(body, id=new_id())
            return self.answer(status, body, replayed=True)
        status, body = seen["answer"]
        if self.defect == "wrong-status":
            return self.answer(409, body)
        self.answer(status, body, replayed=True)

    def create(self, raw, slot, fingerprint=None, account=None):
        try:
            order = json.loads(raw)
            item, quantity = order["item"], order["quantity"]
            valid = (
                isinstance(order, dict)
                and set(order) <= {"item", "quantity", "note", "idempotency_key"}
                and isinstance(item, str) and 1 <= len(item) <= 40
                and isinstance(quantity, int) and 1 <= quantity <= 100
            )
        except (ValueError, KeyError, TypeError):
            valid = False
        if not valid:
            if slot is not None:
                if self.defect == "store-validation":
                    answer = (400, {"code": "invalid_request", "message": "the order is invalid"})
                    KEYS[slot] = {"state": "done", "fingerprint": fingerprint, "answer": answer}
                else:
                    KEYS.pop(slot, None)
            return self.problem(400, "invalid_request", "the order is invalid")
        if self.defect == "stored-5xx" and slot is not None:
            answer = (500, {"code": "internal", "message": "the payment processor timed out"})
            KEYS[slot] = {"state": "done", "fingerprint": fingerprint, "answer": answer}
            return self.answer(*answer)
        created = dict(order, id=new_id())
        ORDERS[str(created["id"])] = (account, created)
        if slot is not None:
            KEYS[slot] = {"state": "done", "fingerprint": fingerprint, "answer": (201, created)}
        self.answer(201, created)


def serve_raw(listener, reply):
    while True:
        conn, _ = listener.accept()
        if reply is not None:
            try:
                conn.recv(65536)
                conn.sendall(reply)
            finally:
                conn.close()
        else:
            threading.Thread(target=lambda c=conn: (time.sleep(3600), c.close()), daemon=True).start()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--defect", default="correct")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--key-in", choices=["header", "body"], default="header")
    parser.add_argument("--in-flight", choices=["conflict", "accepted"], default="conflict")
    args = parser.parse_args()
    if args.defect in ("hang", "garbage"):
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        print(f"listening on {listener.getsockname()[1]}", flush=True)
        serve_raw(listener, b"\x00\x01 not http at all \xff\r\n\r\n" if args.defect == "garbage" else None)
        return
    Handler.defect = args.defect
    Handler.delay = args.delay_ms / 1000.0
    Handler.key_in_body = args.key_in == "body"
    Handler.in_flight_accepted = args.in_flight == "accepted"
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.request_queue_size = 128
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
