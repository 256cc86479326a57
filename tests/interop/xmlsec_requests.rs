//! Requests made by python-xmlsec (libxmlsec1): a producer unlike WSS4J (namespaces declared
//! on the Envelope, another header order, line-wrapped base64, whitespace in SignedInfo).
//! busbar accepts them, and python-xmlsec in turn accepts busbar's responses to them.

use busbar_bench::payload::{buy_stocks, Variant};

use crate::peers::{in_parallel, work_dir, xmlsec};
use crate::service::{judge, Service, Want, MODERN, SECURE, SIGNED};

struct Case {
    name: &'static str,
    path: &'static str,
    want: Want,
    sign: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        name: "modern profile, encrypted",
        path: MODERN,
        want: Want::Accept,
        sign: &["--profile", "modern"],
    },
    Case {
        name: "modern profile, encrypted, legacy proxy",
        path: SECURE,
        want: Want::Accept,
        sign: &["--profile", "modern"],
    },
    Case {
        name: "legacy profile, encrypted",
        path: SECURE,
        want: Want::Accept,
        sign: &["--profile", "legacy"],
    },
    Case {
        name: "RSA-OAEP with AES-128-GCM",
        path: MODERN,
        want: Want::Accept,
        sign: &["--profile", "modern", "--enc", "aes128-gcm"],
    },
    Case {
        name: "RSA-1.5 with AES-256-CBC",
        path: SECURE,
        want: Want::Accept,
        sign: &[
            "--profile",
            "modern",
            "--key-transport",
            "rsa15",
            "--enc",
            "aes256-cbc",
        ],
    },
    Case {
        name: "RSA-3072 client key",
        path: MODERN,
        want: Want::Accept,
        sign: &["--profile", "modern", "--signer", "client3072"],
    },
    Case {
        name: "timestamp and signature, legacy profile",
        path: SIGNED,
        want: Want::Accept,
        sign: &["--profile", "legacy", "--actions", "Timestamp Signature"],
    },
    Case {
        name: "timestamp and signature, modern profile",
        path: SIGNED,
        want: Want::Accept,
        sign: &["--profile", "modern", "--actions", "Timestamp Signature"],
    },
    Case {
        name: "legacy profile on the modern proxy",
        path: MODERN,
        want: Want::Fault("wsse:UnsupportedAlgorithm"),
        sign: &["--profile", "legacy"],
    },
    Case {
        name: "an hour-old timestamp",
        path: MODERN,
        want: Want::Fault("wsu:MessageExpired"),
        sign: &["--profile", "modern", "--time-offset", "-3600"],
    },
];

#[test]
fn xmlsec_signed_requests_are_accepted_and_their_responses_verify() {
    let dir = work_dir("xmlsec-requests");
    let plain = dir.join("plain.xml");
    std::fs::write(&plain, buy_stocks(2048, Variant::Plain).expect("payload")).expect("write");
    let plain = plain.display().to_string();
    let files: Vec<_> = (0..CASES.len())
        .map(|i| {
            dir.join(format!("request-{i:02}.xml"))
                .display()
                .to_string()
        })
        .collect();
    let jobs: Vec<_> = CASES.iter().zip(&files).collect();
    let made = in_parallel(&jobs, |(c, out)| {
        let mut args = c.sign.to_vec();
        args.extend(["--out", out.as_str(), plain.as_str()]);
        xmlsec("sign", &args)
    });
    for (c, out) in CASES.iter().zip(&made) {
        assert!(
            out.status.success(),
            "{}: python-xmlsec could not sign: {}",
            c.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let service = Service::start();
    let mut failures = Vec::new();
    let mut responses = Vec::new();
    for (i, (c, file)) in jobs.iter().enumerate() {
        let o = service.send(c.path, false, &std::fs::read(file).expect("read request"));
        if let Err(e) = judge(c.want, &o) {
            failures.push(format!("{} ({}): {e}", c.name, c.path));
        } else if c.want == Want::Accept && c.path != SIGNED {
            let file = dir.join(format!("response-{i:02}.xml"));
            std::fs::write(&file, &o.response.body).expect("write response");
            let key = if c.sign.contains(&"client3072") {
                "client3072"
            } else {
                "client"
            };
            responses.push((c.name, key, file.display().to_string()));
        }
    }
    let checked = in_parallel(&responses, |(_, key, file)| {
        xmlsec("verify", &["--recipient", key, "--signer", "server", file])
    });
    for ((name, _, _), out) in responses.iter().zip(&checked) {
        let body = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            failures.push(format!(
                "{name}: python-xmlsec refused busbar's response: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        } else if !body.contains("<symbol>IBM</symbol>") {
            failures.push(format!("{name}: the response's Body decrypted to {body}"));
        }
    }
    assert!(
        failures.is_empty(),
        "python-xmlsec requests went wrong (files in {}):\n{}",
        dir.display(),
        failures.join("\n")
    );
}
