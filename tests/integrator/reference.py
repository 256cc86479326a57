#!/usr/bin/env python3
"""Independent reference of the integrator mappings (docs/integrator.md), for the tests.

    reference.py map|transform < input.json > expected.json

Written from the definitions in docs/integrator.md, without jq or busbar.
"""
import json
import math
import sys


def cents(x):
    return math.floor(x * 100 + 0.5) / 100


def mapping(doc):
    out = []
    for o in doc["payload"]["order"]:
        out.append({
            "symbol": o["symbol"],
            "purchaser": o["buyerID"],
            "quantity": o["volume"] * 2,
            "totalCost": o["price"] * o["volume"],
            # Python's round() rounds halves to even.
            "roundedPrice": round(o["price"]),
        })
    return out


def transform(doc):
    c = doc["customer"]
    total = 0
    for i in doc["items"]:
        total = total + i["qty"] * i["unitPrice"]
    total = cents(total)
    rate = {"gold": 0.1, "silver": 0.05}.get(c["tier"], 0)
    discount = cents(total * rate)
    year, month, day = doc["orderDate"].split("T")[0].split("-")
    return {
        "orderId": doc["orderId"],
        "customerId": c["id"],
        "customerNumber": int(c["id"][2:]) if c["id"].startswith("C-") else int(c["id"]),
        "fullName": c["firstName"] + " " + c["lastName"],
        "email": c["email"].lower(),
        "tier": c["tier"],
        "addressLine": c["address"]["line1"],
        "city": c["address"]["city"],
        "zip": c["address"]["zip"],
        "country": c["address"]["country"],
        "currency": doc["currency"],
        "orderDate": f"{day}/{month}/{year}",
        "itemCount": len(doc["items"]),
        "itemCountText": str(len(doc["items"])),
        "totalQuantity": sum(i["qty"] for i in doc["items"]),
        "total": total,
        "discountRate": rate,
        "discount": discount,
        "net": cents(total - discount),
        "source": "busbar",
    }


def main():
    doc = json.load(sys.stdin)
    result = {"map": mapping, "transform": transform}[sys.argv[1]](doc)
    json.dump(result, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
