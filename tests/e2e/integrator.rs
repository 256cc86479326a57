//! `examples/integrator.yaml` run as a user would (`busbar run`), over real sockets.

use busbar_engine::echo::NAME_HEADER;

use crate::support::*;

const JSON: (&str, &str) = ("Content-Type", "application/json");

/// A JSON document of exactly `len` bytes (`len` ≥ 21) with varied numbers and strings.
fn json_of_len(len: usize, seed: u64) -> Vec<u8> {
    let mut out = String::from("{\"items\":[");
    let mut i = 0u64;
    while out.len() + 40 < len {
        if i > 0 {
            out.push(',');
        }
        let n = seed.wrapping_mul(6364136223846793005).wrapping_add(i) % 100_000;
        out.push_str(&format!("{{\"n\":{n}.50,\"s\":\"\\u00e9{i}\"}}"));
        i += 1;
    }
    out.push_str("],\"pad\":\"");
    while out.len() + 2 < len {
        out.push('x');
    }
    out.push_str("\"}");
    assert_eq!(out.len(), len);
    out.into_bytes()
}

#[test]
fn json_passthrough_forwards_every_size_byte_for_byte_to_the_standard_back_end() {
    let ex = Example::start("integrator.yaml", &[]);
    let mut c = Client::connect(ex.listen());
    for (i, size) in [
        21usize,
        500,
        1024,
        4095,
        4096,
        4097,
        8192,
        16383,
        16384,
        16385,
        65536,
        65537,
        1 << 20,
    ]
    .into_iter()
    .enumerate()
    {
        let body = json_of_len(size, i as u64);
        let r = c
            .post("/api/passthrough", &[JSON], &body)
            .expect("response");
        assert_eq!(r.status, 200, "{size}: {}", r.text());
        assert_eq!(r.body, body, "{size}");
        assert_eq!(r.header(NAME_HEADER.as_str()), Some("standard"), "{size}");
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
    // Numbers are never reformatted, and a body that is not JSON is not this proxy's business.
    let odd = b"{\"big\":1e999999,\"n\":-0.000,\"dup\":1,\"dup\":2}";
    let r = c.post("/api/passthrough", &[JSON], odd).expect("response");
    assert_eq!(r.body, odd);
    let r = c.get("/api/passthrough").expect("response");
    assert_eq!(r.status, 405);
}

/// The kit's JSON payloads and its byte-exact verification against JsonPassthrough and JsonCBR
/// (each tier's document comes back whole from its own back end).
#[test]
fn bench_json_payloads_verify_through_the_example() {
    let ex = Example::start("integrator.yaml", &[]);
    let dir = temp_dir("bench-json");
    let bin = env!("CARGO_BIN_EXE_busbar");
    for (kind, size, path) in [
        ("passthrough", "4097", "/api/passthrough"),
        ("premium", "1024", "/api/route"),
        ("standard", "65537", "/api/route"),
    ] {
        let out = std::process::Command::new(bin)
            .args(["bench", "payload", "--json", kind, "--size", size])
            .output()
            .expect("payload");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout.len(), size.parse::<usize>().expect("size"));
        let file = dir.join(format!("{kind}.json"));
        std::fs::write(&file, &out.stdout).expect("write");
        let url = format!("http://{}{path}", ex.listen());
        let load = std::process::Command::new(bin)
            .args([
                "bench", "load", &url, "--verify", "direct", "-n", "100", "-c", "4", "--body",
            ])
            .arg(&file)
            .output()
            .expect("load");
        let text = String::from_utf8_lossy(&load.stdout).into_owned()
            + &String::from_utf8_lossy(&load.stderr);
        assert!(load.status.success(), "{text}");
        assert!(text.contains("verify 0"), "{kind}: {text}");
        assert!(
            text.contains("100 ok") && text.contains("status 0"),
            "{kind}: {text}"
        );
    }
}
