//! busbar's secured responses, checked by the client side of WSS4J and of python-xmlsec:
//! each must decrypt with the client's key, carry a current signed Timestamp, be signed by
//! the service's certificate, and hold the Body the back end answered.

use busbar_bench::payload::{buy_stocks, Variant};

use crate::peers::{in_parallel, work_dir, xmlsec, Batch};
use crate::service::{
    wss4j_requests, Case, Service, Want, BY_ISSUER_SERIAL, BY_SKI, BY_THUMBPRINT, CERTS, MODERN,
    SECURE,
};

/// Who checks a response: the request's signer, whose key decrypts it.
struct Client {
    key: &'static str,
    /// What WSS4J reports about the response's algorithms and signer reference.
    algorithms: &'static str,
    /// The Body's first element as the back end echoed it.
    body: String,
}

/// The algorithms of the SecureProxy's responses (legacy profile), as WSS4J reports them.
const LEGACY_ALGORITHMS: &str =
    "sig=rsa-sha1 sig-ref=DIRECT_REF enc=aes128-cbc key-transport=rsa-1_5";
/// SecureProxyModern's.
const MODERN_ALGORITHMS: &str =
    "sig=rsa-sha256 sig-ref=DIRECT_REF enc=aes256-gcm key-transport=rsa-oaep-mgf1p";

/// The first element inside the SOAP Body of `plain`, as text.
fn body_element(plain: &[u8]) -> String {
    let text = String::from_utf8_lossy(plain);
    let from = text.find("<m:buyStocks").expect("buyStocks");
    let end = "</m:buyStocks>";
    let to = text.find(end).expect("end of buyStocks") + end.len();
    text[from..to].to_owned()
}

/// The symbols of the orders in `xml`, in document order.
fn symbols(xml: &str) -> Vec<&str> {
    xml.split("<symbol>")
        .skip(1)
        .filter_map(|s| s.split_once("</symbol>").map(|(v, _)| v))
        .collect()
}

/// Compares what a peer printed with the Body the back end echoed.
fn same_body(printed: &str, want: &str) -> Result<(), String> {
    let printed = printed.trim();
    if printed == want {
        return Ok(());
    }
    let (got_orders, want_orders) = (
        printed.matches("<order>").count(),
        want.matches("<order>").count(),
    );
    if got_orders != want_orders || symbols(printed) != symbols(want) {
        let first = |xml| symbols(xml).into_iter().take(4).collect::<Vec<_>>();
        return Err(format!(
            "{got_orders} orders {:?}…, want {want_orders} orders {:?}…",
            first(printed),
            first(want)
        ));
    }
    Err(format!(
        "same orders, but the text differs: got {} bytes, want {} bytes",
        printed.len(),
        want.len()
    ))
}

/// The requests (WSS4J clients of each profile and shape) whose responses are checked.
fn exchanges() -> Vec<(Case, Client)> {
    let mut out = Vec::new();
    let mut add = |name: String, path, key, secure: &[&str], plain: Vec<u8>| {
        let algorithms = match path {
            SECURE | CERTS => LEGACY_ALGORITHMS,
            BY_SKI => {
                "sig=rsa-sha256 sig-ref=KEY_IDENTIFIER enc=aes256-gcm key-transport=rsa-oaep-mgf1p"
            }
            BY_ISSUER_SERIAL => {
                "sig=rsa-sha256 sig-ref=ISSUER_SERIAL enc=aes128-gcm key-transport=rsa-oaep-mgf1p"
            }
            BY_THUMBPRINT => {
                "sig=rsa-sha1 sig-ref=THUMBPRINT_SHA1 enc=aes256-cbc key-transport=rsa-1_5"
            }
            _ => MODERN_ALGORITHMS,
        };
        let client = Client {
            key,
            algorithms,
            body: body_element(&plain),
        };
        out.push((
            Case::new(name, path, Want::Accept, secure).with_plain(plain),
            client,
        ))
    };
    for (profile, path) in [("legacy", SECURE), ("modern", MODERN)] {
        for size in [512, 10 * 1024, 100 * 1024] {
            add(
                format!("{profile} profile, {size} B"),
                path,
                "client",
                &["--profile", profile],
                buy_stocks(size, Variant::Plain).expect("payload"),
            );
        }
        add(
            format!("{profile} profile, SOAP 1.2"),
            path,
            "client",
            &["--profile", profile, "--soap", "12"],
            buy_stocks(2048, Variant::Plain).expect("payload"),
        );
    }
    for (name, path, profile) in [
        (
            "service by SKI, client by issuer and serial",
            BY_SKI,
            "modern",
        ),
        (
            "service by issuer and serial, client by thumbprint",
            BY_ISSUER_SERIAL,
            "modern",
        ),
        (
            "service by thumbprint, client by BST",
            BY_THUMBPRINT,
            "legacy",
        ),
    ] {
        add(
            format!("response naming the {name}"),
            path,
            "client",
            &["--profile", profile],
            buy_stocks(4096, Variant::Plain).expect("payload"),
        );
    }
    add(
        "response for an RSA-3072 client".into(),
        MODERN,
        "client3072",
        &["--profile", "modern", "--signer", "client3072"],
        buy_stocks(2048, Variant::Plain).expect("payload"),
    );
    add(
        "response for a signer named by issuer and serial".into(),
        CERTS,
        "client",
        &["--sig-key-id", "IssuerSerial"],
        buy_stocks(2048, Variant::Plain).expect("payload"),
    );
    out
}

#[test]
fn wss4j_and_xmlsec_accept_busbars_secured_responses() {
    let dir = work_dir("responses");
    let (cases, clients): (Vec<Case>, Vec<Client>) = exchanges().into_iter().unzip();
    let requests = wss4j_requests(&dir, "requests", &cases, &[]);

    // Each request through busbar; the secured responses go to files for the peers.
    let service = Service::start();
    let mut failures = Vec::new();
    let mut responses = Vec::new();
    for (i, ((case, client), request)) in cases.iter().zip(&clients).zip(&requests).enumerate() {
        let o = service.send(case.path, case.soap12, request);
        let text = o.response.text();
        if o.code != "200" {
            failures.push(format!(
                "{}: busbar refused the request: {}",
                case.name, o.code
            ));
            continue;
        }
        if !text.contains("EncryptedData") || text.contains("<order>") {
            failures.push(format!(
                "{}: the response is not encrypted: {text}",
                case.name
            ));
            continue;
        }
        let file = dir.join(format!("response-{i:02}.xml"));
        std::fs::write(&file, &o.response.body).expect("write response");
        responses.push((case, client, file));
    }

    // WSS4J, all in one JVM.
    let mut batch = Batch::new(&dir);
    let printed: Vec<_> = responses
        .iter()
        .map(|(_, client, file)| {
            let out = file.with_extension("wss4j.txt");
            batch.add(
                "verify",
                &[
                    "--recipient",
                    client.key,
                    "--expect-signer",
                    "server",
                    "--require",
                    "Timestamp Signature Encrypt",
                    "--in",
                    &file.display().to_string(),
                    "--out",
                    &out.display().to_string(),
                ],
            );
            out
        })
        .collect();
    let results = batch.run("verify");
    for (((case, client, _), r), out) in responses.iter().zip(&results).zip(&printed) {
        if !r.ok {
            failures.push(format!(
                "{}: WSS4J refused the response: {}",
                case.name, r.detail
            ));
            continue;
        }
        if !r.detail.contains(client.algorithms) {
            failures.push(format!(
                "{}: WSS4J found {}, want {}",
                case.name, r.detail, client.algorithms
            ));
        }
        let got = std::fs::read_to_string(out).unwrap_or_default();
        if let Err(why) = same_body(&got, &client.body) {
            failures.push(format!("{}: WSS4J's decrypted Body: {why}", case.name));
        }
    }

    // python-xmlsec, one process per response, side by side.
    let outputs = in_parallel(&responses, |(_, client, file)| {
        xmlsec(
            "verify",
            &[
                "--recipient",
                client.key,
                "--signer",
                "server",
                "--require",
                "Timestamp Signature Encrypt",
                &file.display().to_string(),
            ],
        )
    });
    for ((case, client, _), out) in responses.iter().zip(&outputs) {
        if !out.status.success() {
            failures.push(format!(
                "{}: python-xmlsec refused the response: {}",
                case.name,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            continue;
        }
        if let Err(why) = same_body(&String::from_utf8_lossy(&out.stdout), &client.body) {
            failures.push(format!(
                "{}: python-xmlsec's decrypted Body: {why}",
                case.name
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} responses went wrong (files in {}):\n{}",
        failures.len(),
        cases.len(),
        dir.display(),
        failures.join("\n")
    );
}
