//! JSON payloads of the integrator scenarios (docs/integrator.md), deterministic for a seed:
//! WSO2's passthrough shape and the `customerTier` document at exact sizes, the Ballerina order
//! list with N orders, and the transform's order document at an exact size.

/// Which JSON payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum JsonKind {
    /// `{"payload":{"symbol":["json",…]},"pad":"…"}` (JsonPassthrough), at the exact size.
    Passthrough,
    /// A `customerTier: "premium"` document (JsonCBR), at the exact size.
    Premium,
    /// A `customerTier: "standard"` document (JsonCBR), at the exact size.
    Standard,
    /// `{"size": n, "payload": {"order": [{symbol, buyerID, price, volume}…]}}` (JsonCBRFilter,
    /// JsonMap, JsonToSoap) with `--orders` orders (10 by default); the first is GOOG at 42.8.
    /// With `--size` instead: as many orders as fit, then a `pad` member to the exact size.
    Orders,
    /// The order document of JsonTransform (20 items, fewer below about 1.3 KB; a filler), at
    /// the exact size.
    Order,
}

/// A small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `head` + a filler string + `tail`, padded to exactly `size` bytes.
fn padded(head: &str, tail: &str, size: usize) -> Result<Vec<u8>, String> {
    let fixed = head.len() + tail.len();
    if size < fixed {
        return Err(format!(
            "this payload needs at least {fixed} bytes (asked for {size})"
        ));
    }
    let mut out = String::with_capacity(size);
    out.push_str(head);
    out.extend(std::iter::repeat_n('x', size - fixed));
    out.push_str(tail);
    Ok(out.into_bytes())
}

/// The payload `kind` of exactly `size` bytes (for the sized kinds) or with `orders` orders.
pub fn json_payload(
    kind: JsonKind,
    size: usize,
    orders: usize,
    seed: u64,
) -> Result<Vec<u8>, String> {
    let mut rng = seeded(seed);
    match kind {
        JsonKind::Passthrough => {
            let symbols = vec!["\"json\""; 20].join(",");
            padded(
                &format!("{{\"payload\":{{\"symbol\":[{symbols}]}},\"pad\":\""),
                "\"}",
                size,
            )
        }
        JsonKind::Premium | JsonKind::Standard => {
            let tier = if kind == JsonKind::Premium {
                "premium"
            } else {
                "standard"
            };
            padded(
                &format!(
                    "{{\"customerTier\":\"{tier}\",\"customer\":{{\"id\":{}}},\"pad\":\"",
                    rng.below(100_000)
                ),
                "\"}",
                size,
            )
        }
        JsonKind::Orders => {
            let list: Vec<String> = (0..orders).map(|i| order(&mut rng, i)).collect();
            Ok(format!(
                "{{\"size\":{orders},\"payload\":{{\"order\":[{}]}}}}",
                list.join(",")
            )
            .into_bytes())
        }
        JsonKind::Order => {
            let tiers = ["gold", "silver", "bronze"];
            let items: Vec<String> = (0..ORDER_ITEMS)
                .map(|i| {
                    format!(
                        "{{\"sku\":\"SKU-{i:04}\",\"qty\":{},\"unitPrice\":{}.{:02}}}",
                        1 + rng.below(9),
                        1 + rng.below(200),
                        rng.below(100)
                    )
                })
                .collect();
            let (id, month, day, customer) = (
                rng.below(1_000_000),
                1 + rng.below(12),
                1 + rng.below(28),
                rng.below(100_000),
            );
            let tier = tiers[rng.below(3) as usize];
            let head = |items: &[String]| {
                format!(
                    "{{\"orderId\":\"O-{id}\",\"orderDate\":\"2026-{month:02}-{day:02}T10:15:00Z\",\"currency\":\"EUR\",\"customer\":{{\"id\":\"C-{customer}\",\"firstName\":\"Ada\",\"lastName\":\"Lovelace\",\"email\":\"Ada.L@Example.COM\",\"tier\":\"{tier}\",\"address\":{{\"line1\":\"12 St James's Square\",\"city\":\"London\",\"zip\":\"SW1Y 4LB\",\"country\":\"GB\"}}}},\"items\":[{}],\"filler\":\"",
                    items.join(",")
                )
            };
            // All 20 items when they fit; a smaller document keeps the first ones that do (the
            // values never depend on the size).
            let mut keep = items.len();
            while keep > 1 && head(&items[..keep]).len() + 2 > size {
                keep -= 1;
            }
            padded(&head(&items[..keep]), "\"}", size)
        }
    }
}

/// Items of the order document when the size holds them.
pub const ORDER_ITEMS: usize = 20;

/// One order of the Ballerina list: the first is GOOG at 42.8, the others are drawn.
fn order(rng: &mut Rng, i: usize) -> String {
    let symbols = ["GOOG", "IBM", "MSFT", "ORCL"];
    let (symbol, price) = if i == 0 {
        ("GOOG", "42.8".to_owned())
    } else {
        (
            symbols[rng.below(4) as usize],
            format!("{}.{}", 1 + rng.below(200), rng.below(100)),
        )
    };
    format!(
        "{{\"symbol\":\"{symbol}\",\"buyerID\":\"user{i}\",\"price\":{price},\"volume\":{}}}",
        1 + rng.below(1000)
    )
}

/// The Ballerina order list of exactly `size` bytes: as many orders as fit (the same ones, in
/// the same order, as `json_payload(Orders, n, seed)` gives), then a `pad` member.
pub fn orders_of_size(size: usize, seed: u64) -> Result<Vec<u8>, String> {
    let mut rng = seeded(seed);
    let overhead = |n: usize| {
        format!("{{\"size\":{n},\"payload\":{{\"order\":[]}},\"pad\":\"\"}}").len()
            + n.saturating_sub(1)
    };
    let mut list: Vec<String> = Vec::new();
    let mut used = 0;
    loop {
        let next = order(&mut rng, list.len());
        if overhead(list.len() + 1) + used + next.len() > size {
            break;
        }
        used += next.len();
        list.push(next);
    }
    if list.is_empty() {
        return Err(format!("an order list needs more than {size} bytes"));
    }
    padded(
        &format!(
            "{{\"size\":{},\"payload\":{{\"order\":[{}]}},\"pad\":\"",
            list.len(),
            list.join(",")
        ),
        "\"}",
        size,
    )
}

fn seeded(seed: u64) -> Rng {
    Rng(seed.max(1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sized_payloads_are_json_of_exactly_the_size_at_every_boundary() {
        for kind in [
            JsonKind::Passthrough,
            JsonKind::Premium,
            JsonKind::Standard,
            JsonKind::Order,
        ] {
            for size in [
                2048usize,
                4095,
                4096,
                4097,
                8192,
                16383,
                16384,
                16385,
                65536,
                1 << 20,
            ] {
                let p = json_payload(kind, size, 0, 3)
                    .unwrap_or_else(|e| panic!("{kind:?} {size}: {e}"));
                assert_eq!(p.len(), size, "{kind:?}");
                let v: serde_json::Value =
                    serde_json::from_slice(&p).unwrap_or_else(|e| panic!("{kind:?} {size}: {e}"));
                match kind {
                    JsonKind::Premium => assert_eq!(v["customerTier"], "premium"),
                    JsonKind::Standard => assert_eq!(v["customerTier"], "standard"),
                    JsonKind::Order => assert_eq!(v["items"].as_array().map(Vec::len), Some(20)),
                    _ => assert_eq!(v["payload"]["symbol"][0], "json"),
                }
            }
        }
        assert!(json_payload(JsonKind::Order, 100, 0, 1).is_err());
        // The smallest sizes keep the first items that fit, with the same values.
        let small = json_payload(JsonKind::Order, 512, 0, 3).unwrap_or_default();
        let v: serde_json::Value = serde_json::from_slice(&small).expect("JSON");
        let full: serde_json::Value =
            serde_json::from_slice(&json_payload(JsonKind::Order, 4096, 0, 3).unwrap_or_default())
                .expect("JSON");
        let n = v["items"].as_array().map_or(0, Vec::len);
        assert!((1..ORDER_ITEMS).contains(&n), "{n} items at 512 bytes");
        assert_eq!(v["items"][n - 1], full["items"][n - 1]);
        assert_eq!(v["customer"], full["customer"]);
        // The passthrough shape fits 500 bytes, the smallest size the integrator rounds use.
        assert_eq!(
            json_payload(JsonKind::Passthrough, 500, 0, 1).map(|p| p.len()),
            Ok(500)
        );
    }

    #[test]
    fn order_lists_have_the_count_and_a_first_goog_order_at_42_8() {
        for n in [1usize, 10, 1000] {
            let p = json_payload(JsonKind::Orders, 0, n, 9).unwrap_or_default();
            let v: serde_json::Value = serde_json::from_slice(&p).expect("JSON");
            assert_eq!(v["size"], n);
            let orders = v["payload"]["order"].as_array().expect("orders");
            assert_eq!(orders.len(), n);
            assert_eq!(orders[0]["symbol"], "GOOG");
            assert_eq!(orders[0]["price"].as_f64(), Some(42.8));
        }
        // At an exact size: the same orders, as many as fit, and a pad.
        for size in [512usize, 1024, 4097, 16384, 102_400, 1 << 20] {
            let p = orders_of_size(size, 9).unwrap_or_default();
            assert_eq!(p.len(), size);
            let v: serde_json::Value = serde_json::from_slice(&p).expect("JSON");
            let orders = v["payload"]["order"].as_array().expect("orders");
            assert_eq!(v["size"], orders.len());
            let listed = json_payload(JsonKind::Orders, 0, orders.len(), 9).unwrap_or_default();
            let listed: serde_json::Value = serde_json::from_slice(&listed).expect("JSON");
            assert_eq!(&listed["payload"]["order"], &v["payload"]["order"]);
            // One more order would not have fitted.
            let pad = v["pad"].as_str().map_or(usize::MAX, str::len);
            assert!(pad < 80, "{size}: pad of {pad}");
        }
        assert!(orders_of_size(40, 1).is_err());
        // Deterministic for a seed, different across seeds.
        assert_eq!(
            json_payload(JsonKind::Orders, 0, 5, 1),
            json_payload(JsonKind::Orders, 0, 5, 1)
        );
        assert_ne!(
            json_payload(JsonKind::Orders, 0, 5, 1),
            json_payload(JsonKind::Orders, 0, 5, 2)
        );
    }
}
