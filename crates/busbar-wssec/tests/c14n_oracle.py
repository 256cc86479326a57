"""Exclusive C14N oracle: libxml2 through lxml.

Reads a JSON list of documents from stdin:
  [{"xml": base64, "requests": [{"apex": element index in document order,
                                 "comments": bool, "prefixes": [str]}]}]
and writes a JSON list (one per document) of lists (one per request) of
{"ok": base64 output} or {"error": message}.
"""

import base64
import json
import sys

try:
    from lxml import etree
except ImportError as e:
    sys.stderr.write("lxml is not importable: %s\n" % e)
    sys.exit(3)


def canonicalise(root, request):
    elements = list(root.iter(etree.Element))
    apex = elements[request["apex"]]
    # lxml silently drops list entries that are not strings in the document's dictionary
    # (serializer.pxi, _convert_ns_prefixes), so "#default" never reaches libxml2; the
    # empty prefix, which libxml2 treats the same way, does.
    prefixes = ["" if p == "#default" else p for p in request["prefixes"]] or None
    return etree.tostring(
        apex,
        method="c14n",
        exclusive=True,
        with_comments=request["comments"],
        inclusive_ns_prefixes=prefixes,
    )


def main():
    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, remove_blank_text=False, strip_cdata=True
    )
    results = []
    for doc in json.load(sys.stdin):
        try:
            root = etree.fromstring(base64.b64decode(doc["xml"]), parser)
        except Exception as e:  # noqa: BLE001 - reported back per document
            results.append([{"error": "parse: %s" % e} for _ in doc["requests"]])
            continue
        out = []
        for request in doc["requests"]:
            try:
                out.append({"ok": base64.b64encode(canonicalise(root, request)).decode()})
            except Exception as e:  # noqa: BLE001
                out.append({"error": "%s: %s" % (type(e).__name__, e)})
        results.append(out)
    json.dump(results, sys.stdout)


main()
