//! The buyStocks request generator of the classic suite (docs/scenarios.md).
//!
//! Every payload is a SOAP 1.1 envelope with LF line endings whose orders cycle through four
//! fixed records, IBM first. Exact sizes come from appending `0` digits to the last order's
//! `volume`: the padding is always shorter than the next order line, so the order count is a
//! pure function of the size and the generator is deterministic.

use std::fmt;
use std::str::FromStr;

/// Smallest size the generator accepts.
pub const MIN_SIZE: usize = 512;
/// Largest size the generator accepts (a sanity bound, far above any benchmark cell).
pub const MAX_SIZE: usize = 256 * 1024 * 1024;

/// The routing value the SOAP header and the `routing` HTTP header carry.
pub const ROUTING_VALUE: &str = "xadmin;server1;community#1.0##";
/// A routing value of the same length that must be rejected.
pub const BAD_ROUTING_VALUE: &str = "xadmin;server9;community#9.9##";

const ENVELOPE_OPEN: &str =
    "<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\">\n";
const BODY_OPEN: &str = "<soapenv:Body>\n<m:buyStocks xmlns:m=\"http://services.samples/xsd\">\n";
const SUFFIX: &str = "</m:buyStocks>\n</soapenv:Body>\n</soapenv:Envelope>\n";

/// The four order records, in cycle order: (symbol, buyerID, price, volume).
const RECORDS: [(&str, &str, &str, &str); 4] = [
    ("IBM", "asankha", "140.34", "2000"),
    ("MSFT", "ruwan", "23.56", "8030"),
    ("SUN", "indika", "14.56", "500"),
    ("GOOG", "chathura", "60.24", "40000"),
];

/// Which payload to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Variant {
    /// The standard payload: IBM first, valid routing header.
    Plain,
    /// The first order is MSFT (records rotated by one): CBRProxy must reject it.
    NonIbm,
    /// No `soapenv:Header` at all: CBRSOAPHeaderProxy must reject it.
    NoSoapHeader,
    /// A routing header with the wrong value: CBRSOAPHeaderProxy must reject it.
    BadSoapHeader,
    /// What the XSLT request transform produces from the plain payload of that size (element
    /// names spelled backwards, Body-only envelope, no indentation). Its size is NOT the
    /// requested size: it is the transform's output.
    XsltReversed,
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Variant::Plain => "plain",
            Variant::NonIbm => "non-ibm",
            Variant::NoSoapHeader => "no-soap-header",
            Variant::BadSoapHeader => "bad-soap-header",
            Variant::XsltReversed => "xslt-reversed",
        })
    }
}

impl FromStr for Variant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        <Variant as clap::ValueEnum>::from_str(s, true)
    }
}

/// Why a payload cannot be generated.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PayloadError {
    /// Below the minimum size.
    #[error("payload size {0} is below the minimum of {MIN_SIZE} bytes")]
    TooSmall(usize),
    /// Above the generator's sanity bound.
    #[error("payload size {0} is above the maximum of {MAX_SIZE} bytes")]
    TooLarge(usize),
}

fn order_line(out: &mut String, record: usize, pad: usize) {
    let (symbol, buyer, price, volume) = RECORDS[record % RECORDS.len()];
    out.push_str("<order><symbol>");
    out.push_str(symbol);
    out.push_str("</symbol><buyerID>");
    out.push_str(buyer);
    out.push_str("</buyerID><price>");
    out.push_str(price);
    out.push_str("</price><volume>");
    out.push_str(volume);
    out.extend(std::iter::repeat_n('0', pad));
    out.push_str("</volume></order>\n");
}

fn order_line_len(record: usize) -> usize {
    let (symbol, buyer, price, volume) = RECORDS[record % RECORDS.len()];
    // Fixed markup of one order line, LF included.
    const MARKUP: usize =
        "<order><symbol></symbol><buyerID></buyerID><price></price><volume></volume></order>\n"
            .len();
    MARKUP + symbol.len() + buyer.len() + price.len() + volume.len()
}

fn header_line(value: &str) -> String {
    format!(
        "<soapenv:Header><routing xmlns=\"http://someuri\">{value}</routing></soapenv:Header>\n"
    )
}

/// How many orders the payload of `size` bytes holds for a variant's layout and first record.
fn layout(size: usize, fixed: usize, first_record: usize) -> (usize, usize) {
    let mut total = fixed;
    let mut count = 0;
    loop {
        let next = order_line_len(first_record + count);
        if total + next > size && count > 0 {
            break;
        }
        total += next;
        count += 1;
    }
    (count, size - total)
}

/// A variant's SOAP header line, the bytes around its orders (envelope, header, suffix) and
/// its first record. [`Variant::XsltReversed`] has the plain layout: it is the transform of
/// the plain payload of the size.
fn shape(variant: Variant) -> (String, usize, usize) {
    let header = match variant {
        Variant::NoSoapHeader => String::new(),
        Variant::BadSoapHeader => header_line(BAD_ROUTING_VALUE),
        Variant::Plain | Variant::NonIbm | Variant::XsltReversed => header_line(ROUTING_VALUE),
    };
    let fixed = ENVELOPE_OPEN.len() + header.len() + BODY_OPEN.len() + SUFFIX.len();
    (header, fixed, usize::from(variant == Variant::NonIbm))
}

/// Generates the buyStocks payload of exactly `size` bytes (except for
/// [`Variant::XsltReversed`], which is the transform of the plain payload of that size).
pub fn buy_stocks(size: usize, variant: Variant) -> Result<Vec<u8>, PayloadError> {
    if size < MIN_SIZE {
        return Err(PayloadError::TooSmall(size));
    }
    if size > MAX_SIZE {
        return Err(PayloadError::TooLarge(size));
    }
    let (header, fixed, first_record) = shape(variant);
    let (count, pad) = layout(size, fixed, first_record);
    if variant == Variant::XsltReversed {
        return Ok(reversed(count, pad).into_bytes());
    }
    let mut out = String::with_capacity(size);
    out.push_str(ENVELOPE_OPEN);
    out.push_str(&header);
    out.push_str(BODY_OPEN);
    for i in 0..count {
        let last = i + 1 == count;
        order_line(&mut out, first_record + i, if last { pad } else { 0 });
    }
    out.push_str(SUFFIX);
    debug_assert_eq!(out.len(), size);
    Ok(out.into_bytes())
}

fn reversed(count: usize, pad: usize) -> String {
    let mut out = String::from(
        "<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\">\
         <soapenv:Body><m:skcotSyub xmlns:m=\"http://services.samples/xsd\">",
    );
    for i in 0..count {
        let (symbol, buyer, price, volume) = RECORDS[i % RECORDS.len()];
        let pad = if i + 1 == count { pad } else { 0 };
        out.push_str("<redro><lobmys>");
        out.push_str(symbol);
        out.push_str("</lobmys><DIreyub>");
        out.push_str(buyer);
        out.push_str("</DIreyub><ecirp>");
        out.push_str(price);
        out.push_str("</ecirp><emulov>");
        out.push_str(volume);
        out.extend(std::iter::repeat_n('0', pad));
        out.push_str("</emulov></redro>");
    }
    out.push_str("</m:skcotSyub></soapenv:Body></soapenv:Envelope>");
    out
}

/// Number of orders in the plain payload of `size` bytes.
pub fn order_count(size: usize) -> Result<usize, PayloadError> {
    variant_order_count(size, Variant::Plain)
}

/// Number of orders in the payload of `size` bytes of a variant (each variant has its own
/// layout: no header line leaves room for more orders, MSFT first changes the line lengths).
pub fn variant_order_count(size: usize, variant: Variant) -> Result<usize, PayloadError> {
    if size < MIN_SIZE {
        return Err(PayloadError::TooSmall(size));
    }
    if size > MAX_SIZE {
        return Err(PayloadError::TooLarge(size));
    }
    let (_, fixed, first_record) = shape(variant);
    Ok(layout(size, fixed, first_record).0)
}

/// The smallest size whose payload of `variant` holds exactly `orders` orders: the variant's
/// envelope and order lines without padding, or the 512-byte minimum when they are shorter.
/// A count that no size of at least 512 bytes holds (below the minimum's: 2, or 3 for
/// [`Variant::NoSoapHeader`]) or that is above the largest size's is refused, naming the range.
pub fn size_for_orders(orders: usize, variant: Variant) -> Result<usize, String> {
    let count = |size| variant_order_count(size, variant).map_err(|e| e.to_string());
    let (min, max) = (count(MIN_SIZE)?, count(MAX_SIZE)?);
    if !(min..=max).contains(&orders) {
        return Err(format!(
            "--orders {orders} is out of range for the {variant} payload ({min} ..= {max}: the \
             smallest payload, {MIN_SIZE} bytes, holds {min})"
        ));
    }
    let (_, fixed, first_record) = shape(variant);
    let lines: usize = (first_record..first_record + orders)
        .map(order_line_len)
        .sum();
    let size = MIN_SIZE.max(fixed + lines);
    debug_assert_eq!(count(size), Ok(orders));
    Ok(size)
}

/// The `SOAPAction` value for a payload size: `"urn:buyStocks.<KB>"`, quotes included.
///
/// The number is a buffer-size hint: the smallest even number of KiB that is at least 1.1 ×
/// the size, and at least 2. This gives the documented values (2 for 512 B and 1 KB, 6
/// for 5 KB, 12 for 10 KB, 110 for 100 KB).
pub fn soap_action(size: usize) -> String {
    // ceil(size × 1.1 / 1024) in integers: size × 11 / 10240.
    let kb = (size.saturating_mul(11)).div_ceil(10_240);
    let even = kb.div_ceil(2) * 2;
    format!("\"urn:buyStocks.{}\"", even.max(2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_parts_have_the_documented_lengths() {
        assert_eq!(
            ENVELOPE_OPEN.len() + header_line(ROUTING_VALUE).len() + BODY_OPEN.len(),
            250
        );
        assert_eq!(SUFFIX.len(), 51);
        let lens: Vec<usize> = (0..4).map(order_line_len).collect();
        assert_eq!(lens, vec![104, 102, 101, 106]);
        assert_eq!(BAD_ROUTING_VALUE.len(), ROUTING_VALUE.len());
    }

    #[test]
    fn soap_action_matches_the_documented_examples() {
        assert_eq!(soap_action(512), "\"urn:buyStocks.2\"");
        assert_eq!(soap_action(1024), "\"urn:buyStocks.2\"");
        assert_eq!(soap_action(5120), "\"urn:buyStocks.6\"");
        assert_eq!(soap_action(10_240), "\"urn:buyStocks.12\"");
        assert_eq!(soap_action(102_400), "\"urn:buyStocks.110\"");
    }

    #[test]
    fn sizes_below_minimum_are_rejected() {
        assert_eq!(
            buy_stocks(511, Variant::Plain),
            Err(PayloadError::TooSmall(511))
        );
    }

    #[test]
    fn non_ibm_variant_starts_with_msft_and_keeps_size() {
        let p = buy_stocks(2048, Variant::NonIbm).unwrap_or_default();
        assert_eq!(p.len(), 2048);
        let text = String::from_utf8_lossy(&p);
        let first = text.find("<symbol>").unwrap_or(0);
        assert!(text[first..].starts_with("<symbol>MSFT</symbol>"));
    }
}
