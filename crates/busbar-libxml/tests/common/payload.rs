//! The buyStocks request payloads of the classic scenarios (docs/scenarios.md): a SOAP 1.1 envelope of an
//! exact size, orders cycling through four records, padded by appending digits to the last
//! order's volume.

const HEAD: &str = "<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\">\n\
<soapenv:Header><routing xmlns=\"http://someuri\">xadmin;server1;community#1.0##</routing></soapenv:Header>\n\
<soapenv:Body>\n\
<m:buyStocks xmlns:m=\"http://services.samples/xsd\">\n";
const TAIL: &str = "</m:buyStocks>\n</soapenv:Body>\n</soapenv:Envelope>\n";

/// (symbol, buyerID, price, volume), in the scenarios' order.
pub const RECORDS: [(&str, &str, &str, &str); 4] = [
    ("IBM", "asankha", "140.34", "2000"),
    ("MSFT", "ruwan", "23.56", "8030"),
    ("SUN", "indika", "14.56", "500"),
    ("GOOG", "chathura", "60.24", "40000"),
];

fn order_line(i: usize, extra_digits: usize) -> String {
    let (symbol, buyer, price, volume) = RECORDS[i % 4];
    let pad = "0".repeat(extra_digits);
    format!(
        "<order><symbol>{symbol}</symbol><buyerID>{buyer}</buyerID><price>{price}</price>\
         <volume>{volume}{pad}</volume></order>\n"
    )
}

/// A buyStocks request of exactly `size` bytes (`size` ≥ 512).
pub fn buy_stocks(size: usize) -> Vec<u8> {
    assert!(size >= 512, "the scenarios define sizes from 512 bytes");
    let fixed = HEAD.len() + TAIL.len();
    let mut orders = 0;
    let mut used = fixed;
    while used + order_line(orders, 0).len() <= size {
        used += order_line(orders, 0).len();
        orders += 1;
    }
    let mut out = String::with_capacity(size);
    out.push_str(HEAD);
    for i in 0..orders {
        let pad = if i + 1 == orders { size - used } else { 0 };
        out.push_str(&order_line(i, pad));
    }
    out.push_str(TAIL);
    debug_assert_eq!(out.len(), size);
    out.into_bytes()
}

/// The number of orders in the payload [`buy_stocks`] makes for `size`.
#[allow(dead_code)]
pub fn orders_of(size: usize) -> usize {
    let text = String::from_utf8(buy_stocks(size)).unwrap_or_default();
    text.matches("<order>").count()
}
