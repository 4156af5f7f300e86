#!/usr/bin/env python3
"""Dump the operations of ../shared/specs that the inference set labels.

Every PUT and DELETE, and a seeded sample of POSTs (at most 12 per document,
chosen by a hash of the document path, method and path, so reruns agree),
one JSON object a line: the document, method, path, operationId, summary,
description, and the request body's top-level fields with their
descriptions, and the parameters with their descriptions. The labeller reads
this text and nothing else.

Usage: dump_operations.py SPECS_DIR > operations.jsonl
"""
import hashlib
import json
import os
import sys

import yaml

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
ROOTS = [
    line.split("\t")[0]
    for line in open(os.path.join(sys.argv[1], "MANIFEST.tsv")).read().splitlines()[1:]
]
# Two copies of the same API: label one.
SKIP = {"dwolla/specs/spec.yml", "square/api-swagger2-2024-10.json"}
POSTS_PER_DOC = 12
cache = {}


def load(path):
    if path not in cache:
        with open(path) as f:
            cache[path] = yaml.load(f, Loader=Loader)
    return cache[path]


def resolve(node, base, depth=0):
    """Follow `$ref`s (local and relative files); returns (node, base)."""
    while isinstance(node, dict) and "$ref" in node and depth < 20:
        ref = node["$ref"]
        file, _, pointer = ref.partition("#")
        target = os.path.normpath(os.path.join(os.path.dirname(base), file)) if file else base
        try:
            node = load(target)
        except Exception:
            return {}, base
        for part in [p for p in pointer.split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            node = node.get(part, {}) if isinstance(node, dict) else {}
        base = target
        depth += 1
    return node, base


def fields(schema, base, depth=0):
    schema, base = resolve(schema, base)
    out = {}
    if not isinstance(schema, dict) or depth > 6:
        return out
    for part in schema.get("allOf", []) or []:
        out.update(fields(part, base, depth + 1))
    for name, prop in (schema.get("properties") or {}).items():
        prop, _ = resolve(prop, base)
        desc = prop.get("description", "") if isinstance(prop, dict) else ""
        out[name] = (desc or "")[:300]
    return out


def main():
    specs = sys.argv[1]
    for root in ROOTS:
        if root in SKIP:
            continue
        path = os.path.join(specs, root)
        try:
            doc = load(path)
        except Exception as e:
            print(f"skip {root}: {e}", file=sys.stderr)
            continue
        posts = []
        for p, item in (doc.get("paths") or {}).items():
            item, item_base = resolve(item, path)
            if not isinstance(item, dict):
                continue
            for method in ("put", "delete", "post"):
                op, base = resolve(item.get(method), item_base)
                if not isinstance(op, dict) or not op:
                    continue
                body_fields = {}
                rb, rb_base = resolve(op.get("requestBody", {}), base)
                for media in ((rb or {}).get("content") or {}).values():
                    body_fields.update(fields((media or {}).get("schema", {}), rb_base))
                params = {}
                for prm in (op.get("parameters") or []) + (item.get("parameters") or []):
                    prm, pb = resolve(prm, base)
                    if not isinstance(prm, dict):
                        continue
                    if prm.get("in") == "body":
                        body_fields.update(fields(prm.get("schema", {}), pb))
                    elif prm.get("in") in ("query", "header"):
                        params[f"{prm.get('in')}:{prm.get('name')}"] = (prm.get("description") or "")[:300]
                record = {
                    "doc": root,
                    "method": method.upper(),
                    "path": p,
                    "operationId": op.get("operationId"),
                    "summary": op.get("summary"),
                    "description": (op.get("description") or "")[:1500],
                    "body_fields": body_fields,
                    "params": params,
                }
                if method == "post":
                    h = hashlib.sha256(f"{root} POST {p}".encode()).hexdigest()
                    posts.append((h, record))
                else:
                    print(json.dumps(record))
        posts.sort(key=lambda x: x[0])
        for _, record in posts[:POSTS_PER_DOC]:
            print(json.dumps(record))


main()
