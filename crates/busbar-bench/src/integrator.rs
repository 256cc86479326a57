//! The integrator suite (docs/scenarios.md, docs/integrator.md): each scenario's requests and the
//! answer each must get.
//!
//! Layout: [`requests`] builds a scenario's requests at a size, as the fixed rotation a load
//! run takes in turn (JsonCBR's 50/50 premium/standard mix, ScatterGather's product ids), each
//! with its [`Check`]; [`variants`] adds the cases `bench verify` also sends. The expected
//! answers are computed here from the definitions in docs/integrator.md (the mappings, the
//! routing filter) and docs/config.md (the echo's catalog), by code that shares nothing with
//! the engine, whose mappings are jq programs (`examples/integrator/*.jq`): [`transform`],
//! [`map`], [`goog_answer`] and [`product`]. The tests hold them against a third, independent
//! implementation, `tests/integrator/reference.py`.

use serde_json::{json, Map, Value};

use crate::check::{Check, Scenario};
use crate::client::{RequestSpec, Url};
use crate::json_payload::{json_payload, orders_of_size, JsonKind};

/// The back end JsonCBR sends `customerTier: "premium"` documents to.
pub const PREMIUM: &str = "premium";
/// The back end JsonCBR sends every other document to.
pub const STANDARD: &str = "standard";
/// Product ids a ScatterGather load run rotates through.
pub const PRODUCTS: usize = 1000;

/// What a scenario's requests are made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Request body size in bytes (ignored by ScatterGather).
    pub size: usize,
    /// Seed of the documents' values.
    pub seed: u64,
    /// How many product ids ScatterGather rotates through.
    pub products: usize,
}

/// The requests of `scenario` at `url` (the scenario's URL; for ScatterGather the one each
/// product id is appended to), in the order a load run takes them, each with its check.
pub fn requests(
    scenario: Scenario,
    url: &Url,
    shape: Shape,
) -> Result<Vec<(RequestSpec, Check)>, String> {
    let post = |body: Vec<u8>| -> Result<(RequestSpec, Check), String> {
        let check = check(scenario, &body)?;
        Ok((RequestSpec::json(url.clone(), body), check))
    };
    let Shape { size, seed, .. } = shape;
    match scenario {
        Scenario::JsonPassthrough => Ok(vec![post(json_payload(
            JsonKind::Passthrough,
            size,
            0,
            seed,
        )?)?]),
        Scenario::JsonCbr => Ok(vec![
            post(json_payload(JsonKind::Premium, size, 0, seed)?)?,
            post(json_payload(JsonKind::Standard, size, 0, seed)?)?,
        ]),
        Scenario::JsonCbrFilter | Scenario::JsonMap | Scenario::JsonToSoap => {
            Ok(vec![post(orders_of_size(size, seed)?)?])
        }
        Scenario::JsonTransform => Ok(vec![post(json_payload(JsonKind::Order, size, 0, seed)?)?]),
        Scenario::ScatterGather => product_ids(shape.products)
            .into_iter()
            .map(|id| {
                let at = Url::parse(&format!(
                    "{}/{}",
                    url.raw.trim_end_matches('/'),
                    encode_segment(&id)
                ))?;
                Ok((RequestSpec::get(at), Check::Json(product(&id))))
            })
            .collect(),
        Scenario::DbRead => crate::db::read_requests(url, seed),
        Scenario::DbWrite => Err("db-write makes a fresh request for every send: run it with `bench load --verify db-write` or `bench verify`".into()),
        classic => Err(format!("{classic} is not an integrator scenario")),
    }
}

/// The other cases `bench verify` sends for `scenario`, by name: a tier that is neither premium
/// nor standard (routed to standard), and an order list whose first GOOG price is not 42.8 (so
/// the list of GOOG prices comes back).
pub fn variants(
    scenario: Scenario,
    url: &Url,
    shape: Shape,
) -> Result<Vec<(&'static str, RequestSpec, Check)>, String> {
    // Same-length substitutions keep the exact size.
    let substitute = |body: Vec<u8>, from: &str, to: &str| -> Result<Vec<u8>, String> {
        let text = String::from_utf8(body).map_err(|e| e.to_string())?;
        if !text.contains(from) || from.len() != to.len() {
            return Err(format!("cannot make a variant: no {from} in the document"));
        }
        Ok(text.replacen(from, to, 1).into_bytes())
    };
    let case = |name, body: Vec<u8>| -> Result<(&'static str, RequestSpec, Check), String> {
        let check = check(scenario, &body)?;
        Ok((name, RequestSpec::json(url.clone(), body), check))
    };
    match scenario {
        Scenario::JsonCbr => {
            let body = json_payload(JsonKind::Standard, shape.size, 0, shape.seed)?;
            let other = substitute(
                body,
                "\"customerTier\":\"standard\"",
                "\"customerTier\":\"business\"",
            )?;
            Ok(vec![case("other-tier", other)?])
        }
        Scenario::JsonCbrFilter => {
            let body = orders_of_size(shape.size, shape.seed)?;
            let moved = substitute(body, "\"price\":42.8,", "\"price\":42.9,")?;
            Ok(vec![case("goog-price-list", moved)?])
        }
        _ => Ok(Vec::new()),
    }
}

/// The check of a request of an integrator `scenario` whose body is `request`.
pub fn check(scenario: Scenario, request: &[u8]) -> Result<Check, String> {
    let doc = || -> Result<Value, String> {
        serde_json::from_slice(request).map_err(|e| format!("the request is not JSON: {e}"))
    };
    match scenario {
        Scenario::JsonPassthrough => Ok(Check::Echo(request.to_vec())),
        Scenario::JsonCbr => {
            let tier = doc()?
                .get("customerTier")
                .cloned()
                .ok_or("the request has no customerTier member (JsonCBR refuses it)")?;
            Ok(Check::EchoFrom {
                backend: if tier == PREMIUM { PREMIUM } else { STANDARD },
                body: request.to_vec(),
            })
        }
        Scenario::JsonCbrFilter => Ok(Check::Json(goog_answer(&doc()?))),
        Scenario::JsonMap => Ok(Check::Json(map(&doc()?)?)),
        Scenario::JsonTransform => Ok(Check::Json(transform(&doc()?)?)),
        // Every member of an order list survives JSON → SOAP → JSON (docs/json-xml.md, "What
        // round-trips"), numbers by value.
        Scenario::JsonToSoap => Ok(Check::Json(doc()?)),
        Scenario::ScatterGather => {
            Err("scatter-gather builds its own requests (GET by product id)".into())
        }
        Scenario::DbRead | Scenario::DbWrite => Err(format!(
            "{scenario} builds its own requests (customers by id): it takes no --body"
        )),
        classic => Err(format!("{classic} is not an integrator scenario")),
    }
}

fn number(v: &Value, what: &str) -> Result<f64, String> {
    v.as_f64().ok_or_else(|| format!("{what} is not a number"))
}

fn text<'a>(v: &'a Value, what: &str) -> Result<&'a str, String> {
    v.as_str().ok_or_else(|| format!("{what} is not a string"))
}

/// Money rounded to cents, halves up: `floor(x × 100 + 0.5) / 100`, in doubles.
fn cents(x: f64) -> f64 {
    (x * 100.0 + 0.5).floor() / 100.0
}

/// JsonTransform's answer to an order document: the flat 20-field document of
/// docs/integrator.md, field by field from its table.
pub fn transform(doc: &Value) -> Result<Value, String> {
    let customer = &doc["customer"];
    let address = &customer["address"];
    let id = text(&customer["id"], "customer.id")?;
    let digits = id.strip_prefix("C-").unwrap_or(id);
    let customer_number: i64 = digits
        .parse()
        .map_err(|_| format!("customer.id '{id}' is not C- and a number"))?;
    let items = doc["items"].as_array().ok_or("items is not an array")?;
    let mut sum = 0.0;
    let mut quantity = 0.0;
    for (i, item) in items.iter().enumerate() {
        let qty = number(&item["qty"], &format!("items[{i}].qty"))?;
        sum += qty * number(&item["unitPrice"], &format!("items[{i}].unitPrice"))?;
        quantity += qty;
    }
    let total = cents(sum);
    let tier = text(&customer["tier"], "customer.tier")?;
    let rate = match tier {
        "gold" => 0.1,
        "silver" => 0.05,
        _ => 0.0,
    };
    let discount = cents(total * rate);
    let date = text(&doc["orderDate"], "orderDate")?;
    let day = date.split('T').next().unwrap_or_default();
    let [year, month, dom] = <[&str; 3]>::try_from(day.split('-').collect::<Vec<_>>())
        .map_err(|_| format!("orderDate '{date}' is not YYYY-MM-DD…"))?;
    let string = |v: &Value, what: &str| text(v, what).map(str::to_owned);
    Ok(json!({
        "orderId": string(&doc["orderId"], "orderId")?,
        "customerId": id,
        "customerNumber": customer_number,
        "fullName": format!(
            "{} {}",
            text(&customer["firstName"], "customer.firstName")?,
            text(&customer["lastName"], "customer.lastName")?
        ),
        "email": text(&customer["email"], "customer.email")?.to_ascii_lowercase(),
        "tier": tier,
        "addressLine": string(&address["line1"], "customer.address.line1")?,
        "city": string(&address["city"], "customer.address.city")?,
        "zip": string(&address["zip"], "customer.address.zip")?,
        "country": string(&address["country"], "customer.address.country")?,
        "currency": string(&doc["currency"], "currency")?,
        "orderDate": format!("{dom}/{month}/{year}"),
        "itemCount": items.len(),
        "itemCountText": items.len().to_string(),
        "totalQuantity": quantity,
        "total": total,
        "discountRate": rate,
        "discount": discount,
        "net": cents(total - discount),
        "source": "busbar",
    }))
}

/// JsonMap's answer to an order list: one item per order, from docs/integrator.md's table.
pub fn map(doc: &Value) -> Result<Value, String> {
    let orders = doc["payload"]["order"]
        .as_array()
        .ok_or("payload.order is not an array")?;
    let mut out = Vec::with_capacity(orders.len());
    for (i, o) in orders.iter().enumerate() {
        let price = number(&o["price"], &format!("order {i}'s price"))?;
        let volume = number(&o["volume"], &format!("order {i}'s volume"))?;
        out.push(json!({
            "symbol": text(&o["symbol"], &format!("order {i}'s symbol"))?,
            "purchaser": text(&o["buyerID"], &format!("order {i}'s buyerID"))?,
            "quantity": volume * 2.0,
            "totalCost": price * volume,
            "roundedPrice": price.round_ties_even(),
        }));
    }
    Ok(Value::Array(out))
}

/// JsonCBRFilter's answer: the prices of the objects whose `symbol` is `"GOOG"`, wherever they
/// are (`$..[?(@.symbol == 'GOOG')].price`), in document order; the first alone when it is the
/// number 42.8, else the list.
pub fn goog_answer(doc: &Value) -> Value {
    let mut prices = Vec::new();
    goog_prices(doc, &mut prices);
    match prices.first() {
        Some(first) if first.is_number() && first.as_f64() == Some(42.8) => first.clone(),
        _ => Value::Array(prices),
    }
}

/// Pre-order: the matches among a container's children, then each child's own.
fn goog_prices(v: &Value, out: &mut Vec<Value>) {
    let children: Vec<&Value> = match v {
        Value::Object(m) => m.values().collect(),
        Value::Array(a) => a.iter().collect(),
        _ => return,
    };
    for child in &children {
        if child.get("symbol").and_then(Value::as_str) == Some("GOOG") {
            if let Some(price) = child.get("price") {
                out.push(price.clone());
            }
        }
    }
    for child in children {
        goog_prices(child, out);
    }
}

/// FNV-1a, 64 bits, of the id's UTF-8 bytes: the seed of the catalog's values.
pub fn fnv1a(id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// ScatterGather's answer for a product id: the three catalog documents of docs/config.md
/// ("Echo back ends") under their branch names.
pub fn product(id: &str) -> Value {
    let h = fnv1a(id);
    let warehouse = ["AMS", "FRA", "LON"][(h % 3) as usize];
    let mut out = Map::new();
    out.insert(
        "stock".into(),
        json!({ "id": id, "inStock": h % 1000, "warehouse": warehouse }),
    );
    out.insert(
        "price".into(),
        json!({ "id": id, "price": (h % 100_000) as f64 / 100.0, "currency": "EUR" }),
    );
    out.insert(
        "reviews".into(),
        json!({ "id": id, "rating": 1 + h % 5, "count": h % 10_000 }),
    );
    Value::Object(out)
}

/// `n` product ids: mostly `P-<n>`, every tenth one needing percent-encoding in a path (a space,
/// a non-ASCII letter, a quote).
pub fn product_ids(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| match i % 10 {
            9 => format!("é \"{i}\""),
            _ => format!("P-{i}"),
        })
        .collect()
}

/// `id` as one path segment: unreserved characters kept, every other byte percent-encoded.
pub fn encode_segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Failure;
    use crate::client::Headers;

    #[test]
    fn a_body_for_a_database_scenario_is_refused_as_such() {
        for s in [Scenario::DbRead, Scenario::DbWrite] {
            let e = check(s, b"{}").err().unwrap_or_default();
            assert!(e.contains("takes no --body"), "{e}");
        }
        let e = check(Scenario::Direct, b"{}").err().unwrap_or_default();
        assert!(e.contains("not an integrator scenario"), "{e}");
    }

    fn url(path: &str) -> Url {
        Url::parse(&format!("http://127.0.0.1:1/api{path}")).unwrap_or_else(|e| panic!("{e}"))
    }

    fn shape(size: usize) -> Shape {
        Shape {
            size,
            seed: 5,
            products: 20,
        }
    }

    const NONE: Headers<'static> = Headers::new(b"");

    #[test]
    fn transform_follows_the_documented_example() {
        let doc = json!({
            "orderId": "O-123", "orderDate": "2026-11-24T10:15:00Z", "currency": "EUR",
            "customer": { "id": "C-7", "firstName": "Ada", "lastName": "Lovelace",
                          "email": "Ada.L@Example.COM", "tier": "gold",
                          "address": { "line1": "12 St James's Square", "city": "London",
                                       "zip": "SW1Y 4LB", "country": "GB" } },
            "items": [ { "sku": "A", "qty": 2, "unitPrice": 10.5 },
                       { "sku": "B", "qty": 3, "unitPrice": 0.335 } ],
            "filler": "x"
        });
        let out = transform(&doc).unwrap_or_else(|e| panic!("{e}"));
        // 2 × 10.5 + 3 × 0.335 = 22.005 in doubles, so cents gives 22.01 (halves up).
        let want = json!({
            "orderId": "O-123", "customerId": "C-7", "customerNumber": 7,
            "fullName": "Ada Lovelace", "email": "ada.l@example.com", "tier": "gold",
            "addressLine": "12 St James's Square", "city": "London", "zip": "SW1Y 4LB",
            "country": "GB", "currency": "EUR", "orderDate": "24/11/2026", "itemCount": 2,
            "itemCountText": "2", "totalQuantity": 5, "total": 22.01, "discountRate": 0.1,
            "discount": 2.2, "net": 19.81, "source": "busbar"
        });
        assert_eq!(
            crate::check::json_difference(&out, &want, &mut "$".into()),
            None
        );
        assert_eq!(out.as_object().map(Map::len), Some(20));
    }

    #[test]
    fn map_doubles_volumes_and_rounds_half_prices_to_even() {
        let doc = json!({"payload": {"order": [
            {"symbol": "A", "buyerID": "u", "price": 2.5, "volume": 3},
            {"symbol": "B", "buyerID": "v", "price": 3.5, "volume": 1}
        ]}});
        let out = map(&doc).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out[0]["roundedPrice"].as_f64(), Some(2.0));
        assert_eq!(out[1]["roundedPrice"].as_f64(), Some(4.0));
        assert_eq!(out[0]["quantity"].as_f64(), Some(6.0));
        assert_eq!(out[0]["totalCost"].as_f64(), Some(7.5));
        assert_eq!(out[0]["purchaser"], "u");
    }

    #[test]
    fn goog_filter_answers_the_first_price_or_the_list() {
        let first = json!({"payload": {"order": [
            {"symbol": "GOOG", "price": 42.8}, {"symbol": "IBM", "price": 1},
            {"symbol": "GOOG", "price": 7}
        ]}});
        assert_eq!(goog_answer(&first), json!(42.8));
        let other = json!({"payload": {"order": [
            {"symbol": "GOOG", "price": 42.9}, {"symbol": "GOOG", "price": 7}
        ]}});
        assert_eq!(goog_answer(&other), json!([42.9, 7]));
        assert_eq!(goog_answer(&json!({"x": 1})), json!([]));
        // A string "42.8" is not the number.
        assert_eq!(
            goog_answer(&json!([{"symbol": "GOOG", "price": "42.8"}])),
            json!(["42.8"])
        );
    }

    #[test]
    fn catalog_values_follow_the_documented_formulas() {
        // FNV-1a 64 test vectors: the empty string and "a".
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
        let p = product("a");
        let h = 0xaf63_dc4c_8601_ec8c_u64;
        assert_eq!(p["stock"]["inStock"], h % 1000);
        assert_eq!(
            p["price"]["price"].as_f64(),
            Some((h % 100_000) as f64 / 100.0)
        );
        assert_eq!(p["reviews"]["rating"], 1 + h % 5);
        assert_eq!(p["stock"]["id"], "a");
        assert_eq!(encode_segment("é \"9\"/P-1"), "%C3%A9%20%229%22%2FP-1");
    }

    #[test]
    fn cbr_mix_is_half_premium_and_each_must_come_from_its_back_end() {
        let cases = requests(Scenario::JsonCbr, &url("/route"), shape(1024))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cases.len(), 2);
        let (premium, standard) = (&cases[0], &cases[1]);
        assert_eq!(premium.0.body.len(), 1024);
        assert_eq!(standard.0.body.len(), 1024);
        let from = |name: &str| format!("content-length: 1024\r\nx-echo-name: {name}\r\n");
        let (p, s) = (from(PREMIUM), from(STANDARD));
        let body = &premium.0.body;
        assert_eq!(
            premium.1.check(200, Headers::new(p.as_bytes()), body),
            Ok(())
        );
        assert_eq!(
            standard
                .1
                .check(200, Headers::new(s.as_bytes()), &standard.0.body),
            Ok(())
        );
        // The wrong back end, no back end named, a changed byte: each fails.
        assert!(matches!(
            premium.1.check(200, Headers::new(s.as_bytes()), body),
            Err(Failure::Content(m)) if m.contains("'standard' back end, expected 'premium'")
        ));
        assert!(matches!(
            premium.1.check(200, NONE, body),
            Err(Failure::Content(m)) if m.contains("no x-echo-name")
        ));
        // The right name and then another, or the same twice: which one counts is unknown.
        for twice in [format!("{p}x-echo-name: {STANDARD}\r\n"), format!("{p}{p}")] {
            assert!(matches!(
                premium.1.check(200, Headers::new(twice.as_bytes()), body),
                Err(Failure::Content(m)) if m.contains("2 x-echo-name headers")
            ));
        }
        let mut changed = body.clone();
        changed[1000] ^= 1;
        assert!(matches!(
            premium.1.check(200, Headers::new(p.as_bytes()), &changed),
            Err(Failure::Content(m)) if m.contains("at byte 1000")
        ));
        // A tier that is neither goes to standard.
        let other = variants(Scenario::JsonCbr, &url("/route"), shape(1024))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            other[0]
                .2
                .check(200, Headers::new(s.as_bytes()), &other[0].1.body),
            Ok(())
        );
        assert!(other[0]
            .2
            .check(200, Headers::new(p.as_bytes()), &other[0].1.body)
            .is_err());
    }

    #[test]
    fn passthrough_check_is_byte_exact() {
        let cases = requests(
            Scenario::JsonPassthrough,
            &url("/passthrough"),
            shape(10_240),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let (spec, check) = &cases[0];
        assert_eq!(check.check(200, NONE, &spec.body), Ok(()));
        let mut changed = spec.body.clone();
        changed[9000] = b'y';
        assert!(check.check(200, NONE, &changed).is_err());
        assert_eq!(
            check.check(500, NONE, &spec.body),
            Err(Failure::Status(500))
        );
    }

    #[test]
    fn scatter_gather_checks_each_id_aggregate() {
        let cases = requests(Scenario::ScatterGather, &url("/product"), shape(0))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cases.len(), 20);
        assert!(cases
            .iter()
            .all(|(s, _)| s.method == crate::client::Method::Get));
        assert_eq!(cases[1].0.url.path, "/api/product/P-1");
        assert_eq!(cases[9].0.url.path, "/api/product/%C3%A9%20%229%22");
        let (_, check) = &cases[1];
        let right = product("P-1").to_string();
        assert_eq!(check.check(200, NONE, right.as_bytes()), Ok(()));
        // Members in another order and numbers written otherwise are the same answer.
        let h = fnv1a("P-1");
        let reordered = format!(
            r#"{{"reviews":{{"count":{}.0,"rating":{},"id":"P-1"}},"price":{},"stock":{}}}"#,
            h % 10_000,
            1 + h % 5,
            product("P-1")["price"],
            product("P-1")["stock"]
        );
        assert_eq!(check.check(200, NONE, reordered.as_bytes()), Ok(()));
        // Another id's aggregate, a wrong value, a missing branch: each fails, saying where.
        let other = product("P-2").to_string();
        assert!(matches!(
            check.check(200, NONE, other.as_bytes()),
            Err(Failure::Content(m)) if m.starts_with("$.stock.id is \"P-2\"")
        ));
        let mut wrong = product("P-1");
        wrong["price"]["price"] = json!(0.5);
        assert!(matches!(
            check.check(200, NONE, wrong.to_string().as_bytes()),
            Err(Failure::Content(m)) if m.starts_with("$.price.price is 0.5")
        ));
        let mut partial = product("P-1");
        partial.as_object_mut().map(|o| o.remove("reviews"));
        assert!(matches!(
            check.check(200, NONE, partial.to_string().as_bytes()),
            Err(Failure::Content(m)) if m == "$.reviews is missing"
        ));
        assert!(check.check(200, NONE, b"{not json").is_err());
        assert_eq!(
            check.check(502, NONE, right.as_bytes()),
            Err(Failure::Status(502))
        );
    }

    #[test]
    fn transform_and_map_checks_take_the_computed_answer_and_refuse_a_changed_one() {
        for (scenario, path) in [
            (Scenario::JsonTransform, "/transform"),
            (Scenario::JsonMap, "/map"),
        ] {
            let cases =
                requests(scenario, &url(path), shape(5120)).unwrap_or_else(|e| panic!("{e}"));
            let (spec, check) = &cases[0];
            assert_eq!(spec.body.len(), 5120);
            let doc: Value = serde_json::from_slice(&spec.body).unwrap_or_default();
            let answer = if scenario == Scenario::JsonMap {
                map(&doc)
            } else {
                transform(&doc)
            }
            .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                check.check(200, NONE, answer.to_string().as_bytes()),
                Ok(())
            );
            let mut wrong = answer.clone();
            match scenario {
                Scenario::JsonMap => wrong[0]["totalCost"] = json!(1),
                _ => wrong["net"] = json!(wrong["net"].as_f64().unwrap_or(0.0) + 0.01),
            }
            assert!(
                check
                    .check(200, NONE, wrong.to_string().as_bytes())
                    .is_err(),
                "{scenario}"
            );
            // The request echoed back is not the mapping.
            assert!(check.check(200, NONE, &spec.body).is_err());
        }
    }

    #[test]
    fn json_to_soap_needs_every_order_value_back() {
        let cases = requests(Scenario::JsonToSoap, &url("/soap"), shape(2048))
            .unwrap_or_else(|e| panic!("{e}"));
        let (spec, check) = &cases[0];
        let doc: Value = serde_json::from_slice(&spec.body).unwrap_or_default();
        // Numbers may come back written otherwise (42.80, 5.0): the same values.
        let text =
            String::from_utf8_lossy(&spec.body).replace("\"price\":42.8,", "\"price\":42.80,");
        assert_eq!(check.check(200, NONE, text.as_bytes()), Ok(()));
        let mut swapped = doc.clone();
        let orders = swapped["payload"]["order"].as_array_mut().expect("orders");
        let volume = orders[2]["volume"].clone();
        orders[2]["volume"] = orders[3]["volume"].clone();
        orders[3]["volume"] = volume;
        if swapped != doc {
            assert!(matches!(
                check.check(200, NONE, swapped.to_string().as_bytes()),
                Err(Failure::Content(m)) if m.starts_with("$.payload.order[2].volume")
            ));
        }
        let mut dropped = doc.clone();
        dropped["payload"]["order"].as_array_mut().map(Vec::pop);
        assert!(check
            .check(200, NONE, dropped.to_string().as_bytes())
            .is_err());
        let mut stringly = doc;
        stringly["payload"]["order"][0]["symbol"] = json!(1);
        assert!(check
            .check(200, NONE, stringly.to_string().as_bytes())
            .is_err());
    }

    #[test]
    fn cbr_filter_cases_cover_both_branches() {
        let cases = requests(Scenario::JsonCbrFilter, &url("/route/filter"), shape(1024))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cases[0].1.check(200, NONE, b"42.8"), Ok(()));
        assert!(cases[0].1.check(200, NONE, b"[42.8]").is_err());
        let list = variants(Scenario::JsonCbrFilter, &url("/route/filter"), shape(1024))
            .unwrap_or_else(|e| panic!("{e}"));
        let (name, spec, check) = &list[0];
        assert_eq!((*name, spec.body.len()), ("goog-price-list", 1024));
        let doc: Value = serde_json::from_slice(&spec.body).unwrap_or_default();
        let want = goog_answer(&doc);
        assert_eq!(want[0].as_f64(), Some(42.9));
        assert_eq!(check.check(200, NONE, want.to_string().as_bytes()), Ok(()));
        assert!(check.check(200, NONE, b"42.9").is_err());
    }

    #[test]
    fn every_sized_scenario_fits_every_size_from_512_bytes() {
        for scenario in Scenario::INTEGRATOR.into_iter().filter(|s| s.sized()) {
            for size in [512, 1024, 16_385, 1 << 20] {
                let cases = requests(scenario, &url("/x"), shape(size))
                    .unwrap_or_else(|e| panic!("{scenario} {size}: {e}"));
                assert!(
                    cases.iter().all(|(s, _)| s.body.len() == size),
                    "{scenario}"
                );
            }
        }
    }
}
