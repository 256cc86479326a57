#!/usr/bin/env python3
"""Compares the Camel peer's integrator routes with busbar's, answer by answer.

    compare.py [--busbar URL] [--camel URL] [--bin PATH] [--seeds N]

Both must call back ends that echo (examples/integrator.yaml's embedded echoes, or `busbar
echo --name ...`), so an answer shows what the proxy sent. For every scenario of
docs/integrator.md, on documents from `busbar bench payload --json` (several seeds, sizes and
order counts) and a few edge cases, it checks that the status, the body byte for byte and the
answering back end (x-echo-name) are the same on both, and that the mappings equal
tests/integrator/reference.py's. Prints one line per failure and a 'N passed, N failed' line.
"""
import argparse
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "integrator"))
import reference  # noqa: E402


def call(base, path, body=None):
    req = urllib.request.Request(base + path, data=body, method="POST" if body is not None else "GET")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get("x-echo-name"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("x-echo-name"), e.read()


def payload(binary, *args):
    return subprocess.run([binary, "bench", "payload", *args], check=True, capture_output=True).stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--busbar", default="http://127.0.0.1:8281")
    ap.add_argument("--camel", default="http://127.0.0.1:8290")
    ap.add_argument("--bin", default=os.path.join(REPO, "target", "release", "busbar"))
    ap.add_argument("--seeds", type=int, default=5)
    a = ap.parse_args()
    passed = failed = 0

    def check(label, path, body=None, expect=None, status_only=False):
        nonlocal passed, failed
        b = call(a.busbar, path, body)
        c = call(a.camel, path, body)
        problems = []
        if b[0] != c[0]:
            problems.append(f"status busbar {b[0]} camel {c[0]}")
        if b[1] != c[1]:
            problems.append(f"back end busbar {b[1]} camel {c[1]}")
        if not status_only and b[2] != c[2]:
            problems.append(f"body busbar {b[2][:160]!r} camel {c[2][:160]!r}")
        if expect is not None and c[0] == 200 and json.loads(c[2]) != expect:
            problems.append(f"camel differs from reference.py: {c[2][:160]!r}")
        if problems:
            failed += 1
            print(f"FAIL {label}: " + "; ".join(problems))
        else:
            passed += 1

    for seed in range(1, a.seeds + 1):
        s = str(seed)
        for size in ["512", "1k", "10k"]:
            check(f"passthrough seed {s} {size}", "/api/passthrough",
                  payload(a.bin, "--json", "passthrough", "--size", size, "--seed", s))
            for tier in ["premium", "standard"]:
                check(f"route {tier} seed {s} {size}", "/api/route",
                      payload(a.bin, "--json", tier, "--size", size, "--seed", s))
        for n in ["1", "10", "100"]:
            orders = payload(a.bin, "--json", "orders", "--orders", n, "--seed", s)
            doc = json.loads(orders)
            check(f"filter seed {s} orders {n}", "/api/route/filter", orders)
            # The first GOOG order at another price: the list of GOOG prices is posted.
            other = orders.replace(b'"price":42.8,', b'"price":42.81,', 1)
            check(f"filter list seed {s} orders {n}", "/api/route/filter", other)
            check(f"filter none seed {s} orders {n}", "/api/route/filter", other.replace(b"GOOG", b"AAPL"))
            check(f"map seed {s} orders {n}", "/api/map", orders, expect=reference.mapping(doc))
            check(f"soap seed {s} orders {n}", "/api/soap", orders, expect=doc)
        for size in ["2k", "5k", "50k"]:
            order = payload(a.bin, "--json", "order", "--size", size, "--seed", s)
            doc = json.loads(order)
            check(f"transform seed {s} {size}", "/api/transform", order, expect=reference.transform(doc))
            for tier in ["silver", "basic"]:
                doc["customer"]["tier"] = tier
                check(f"transform {tier} seed {s} {size}", "/api/transform",
                      json.dumps(doc, separators=(",", ":")).encode(), expect=reference.transform(doc))
    for pid in ["0", "17", "999", "a%20b", "x-y_z"]:
        check(f"product {pid}", f"/api/product/{pid}")

    # Edge cases: the status must agree (the error wording may differ).
    for label, path, body in [
        ("route without customerTier", "/api/route", b'{"tier":"premium"}'),
        ("route with an array", "/api/route", b"[1]"),
        ("route with a number tier", "/api/route", b'{"customerTier":5}'),
        ("filter on malformed JSON", "/api/route/filter", b"[1,2"),
        ("map on malformed JSON", "/api/map", b'{"size":'),
        ("soap with a bad XML name", "/api/soap", b'{"a b":1}'),
        ("soap with an array in an array", "/api/soap", b'{"a":[[1]]}'),
    ]:
        check(label, path, body, status_only=True)
    check("filter mixed types", "/api/route/filter",
          b'{"a":[{"symbol":"GOOG","price":"42.8"},{"x":{"symbol":"GOOG","price":1e2}}]}')
    check("soap escapes, null, attributes", "/api/soap",
          '{"size":1,"payload":{"order":[{"symbol":"A&B <c>","buyerID":"ü","price":-0.5,"volume":0,'
          '"note":null,"flag":true,"empty":"","d":{"@id":"x","#text":"t"}}]}}'.encode())
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
