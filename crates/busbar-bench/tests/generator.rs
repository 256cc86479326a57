//! The buyStocks generator: exact sizes, order counts, determinism, variants.

use busbar_bench::check::parse_orders;
use busbar_bench::payload::{order_count, soap_action};
use busbar_bench::{buy_stocks, size_for_orders, Variant};

#[test]
fn standard_sizes_have_the_documented_order_counts() {
    // 989 orders are sometimes quoted for 102,400 bytes, but the byte rules (301 bytes of
    // envelope, order lines of 104/102/101/106 bytes, padding only by appending digits) allow
    // at most 988: 301 + 247 x 413 = 102,312, and a 989th (IBM) line would need 104 more
    // bytes. The byte rules win; docs/bench.md says so.
    for (size, orders) in [
        (512, 2),
        (1024, 7),
        (5120, 46),
        (10_240, 96),
        (102_400, 988),
    ] {
        let p = buy_stocks(size, Variant::Plain).expect("generates");
        assert_eq!(p.len(), size);
        assert_eq!(order_count(size), Ok(orders));
        let parsed = parse_orders(&p, "buyStocks").expect("parses");
        assert_eq!(parsed.len(), orders, "size {size}");
        assert_eq!(parsed[0].symbol, "IBM");
        assert!(p.ends_with(b"</soapenv:Envelope>\n"));
        assert!(!p.contains(&b'\r'));
    }
}

#[test]
fn any_size_from_512_is_exact_deterministic_and_well_formed() {
    // A fixed linear congruential sequence: reproducible "random" sizes without a dependency.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut sizes = vec![
        512, 513, 16_383, 16_384, 16_385, 65_535, 65_536, 65_537, 1_048_576,
    ];
    for _ in 0..150 {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let span = if sizes.len() % 3 == 0 {
            2_000_000
        } else {
            40_000
        };
        sizes.push(512 + (x >> 33) as usize % span);
    }
    for size in sizes {
        let a = buy_stocks(size, Variant::Plain).expect("generates");
        assert_eq!(a.len(), size);
        assert_eq!(
            a,
            buy_stocks(size, Variant::Plain).expect("generates"),
            "deterministic at {size}"
        );
        let orders = parse_orders(&a, "buyStocks").expect("well-formed");
        assert_eq!(orders.len(), order_count(size).expect("count"));
        // Records cycle IBM, MSFT, SUN, GOOG; only the last volume carries padding zeros.
        let cycle = ["IBM", "MSFT", "SUN", "GOOG"];
        for (i, o) in orders.iter().enumerate() {
            assert_eq!(o.symbol, cycle[i % 4]);
        }
        let last = orders.last().expect("at least one order");
        assert!(last.volume.chars().all(|c| c.is_ascii_digit()));
        // The padding is shorter than one more order line (at most 106 bytes).
        assert!(last.volume.len() < 106 + 5);
    }
}

#[test]
fn variants_keep_the_exact_size_and_change_only_what_they_name() {
    for size in [512, 1024, 16_384, 100_000] {
        let plain = buy_stocks(size, Variant::Plain).expect("plain");
        for v in [
            Variant::NonIbm,
            Variant::NoSoapHeader,
            Variant::BadSoapHeader,
        ] {
            let p = buy_stocks(size, v).expect("variant");
            assert_eq!(p.len(), size, "{v} at {size}");
            assert_ne!(p, plain);
            let text = String::from_utf8(p.clone()).expect("utf-8");
            let orders = parse_orders(&p, "buyStocks").expect("parses");
            match v {
                Variant::NonIbm => assert_eq!(orders[0].symbol, "MSFT"),
                Variant::NoSoapHeader => assert!(!text.contains("Header")),
                Variant::BadSoapHeader => {
                    assert!(text.contains("<routing xmlns=\"http://someuri\">"));
                    assert!(!text.contains("xadmin;server1;community#1.0##"));
                }
                _ => unreachable!(),
            }
        }
        let reversed = buy_stocks(size, Variant::XsltReversed).expect("reversed");
        assert_eq!(
            parse_orders(&reversed, "skcotSyub").expect("reversed parses"),
            parse_orders(&plain, "buyStocks").expect("plain parses")
        );
        assert!(!String::from_utf8_lossy(&reversed).contains("Header"));
    }
}

#[test]
fn soap_action_and_order_based_sizes() {
    assert_eq!(soap_action(102_400), "\"urn:buyStocks.110\"");
    assert_eq!(soap_action(16_384), "\"urn:buyStocks.18\"");
    assert_eq!(
        size_for_orders(7, Variant::Plain).map(order_count),
        Ok(Ok(7))
    );
    assert_eq!(
        size_for_orders(989, Variant::Plain).map(order_count),
        Ok(Ok(989))
    );
    assert_eq!(size_for_orders(2, Variant::Plain), Ok(512));
    assert!(buy_stocks(100, Variant::Plain).is_err());
}

/// `--orders N` gives exactly N orders whatever the variant (each has its own layout), at the
/// smallest size that holds them; counts that no payload of at least 512 bytes holds are
/// refused.
#[test]
fn orders_are_exact_for_every_variant() {
    // The fewest orders a 512-byte payload holds: 3 without the header line, 2 otherwise.
    let variants = [
        (Variant::Plain, 2),
        (Variant::NonIbm, 2),
        (Variant::NoSoapHeader, 3),
        (Variant::BadSoapHeader, 2),
        (Variant::XsltReversed, 2),
    ];
    for (variant, min) in variants {
        for n in (min..=40).chain([95, 96, 97, 987, 988, 989]) {
            let size = size_for_orders(n, variant).unwrap_or_else(|e| panic!("{variant} {n}: {e}"));
            let count = |size: usize| {
                let p = buy_stocks(size, variant).unwrap_or_else(|e| panic!("{e}"));
                let container = if variant == Variant::XsltReversed {
                    "skcotSyub"
                } else {
                    "buyStocks"
                };
                parse_orders(&p, container)
                    .unwrap_or_else(|e| panic!("{variant} {size}: {e}"))
                    .len()
            };
            assert_eq!(count(size), n, "{variant} --orders {n} (size {size})");
            if size > 512 {
                assert_eq!(
                    count(size - 1),
                    n - 1,
                    "{variant} {n}: not the smallest size"
                );
            }
        }
        for n in 0..min {
            let err = size_for_orders(n, variant).expect_err("below the minimum");
            assert!(err.contains("out of range"), "{err}");
        }
    }
    let err = size_for_orders(2, Variant::NoSoapHeader).expect_err("3 at least");
    assert!(err.contains("512 bytes, holds 3"), "{err}");
}

#[test]
fn payload_command_parses_and_rejects_small_sizes_as_usage_errors() {
    assert!(busbar_bench::parse_args([
        "bench",
        "payload",
        "--size",
        "1024",
        "--variant",
        "non-ibm"
    ])
    .is_ok());
    assert!(busbar_bench::parse_args(["bench", "payload", "--orders", "7"]).is_ok());
    for zero in [
        &["bench", "payload", "--orders", "0"][..],
        &["bench", "payload", "--json", "orders", "--orders", "0"],
    ] {
        let e = busbar_bench::parse_args(zero).expect_err("no orders");
        assert_eq!(e.exit_code(), 2, "{zero:?}");
    }
    let e = busbar_bench::parse_args(["bench", "payload", "--size", "511"]).expect_err("too small");
    assert_eq!(e.exit_code(), 2);
    let e = busbar_bench::parse_args(["bench", "payload", "--size", "1k", "--variant", "weird"])
        .expect_err("bad variant");
    assert_eq!(e.exit_code(), 2);
}
