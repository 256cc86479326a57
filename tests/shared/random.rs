//! Deterministic random draws for the differential tests: each run takes a new seed and prints
//! it, and `BUSBAR_SEED=N` repeats a run. Included by path (`#[path = ...] mod random;`) in the
//! crates whose tests draw documents.

#![allow(dead_code)]

/// xorshift64*: small, fast, and the same sequence for the same seed everywhere.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// `BUSBAR_SEED`, or a new (odd, so never zero) seed from the clock; printed either way.
pub fn seed() -> u64 {
    let seed = std::env::var("BUSBAR_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64 | 1)
        });
    eprintln!("seed {seed} (BUSBAR_SEED={seed} repeats this run)");
    seed
}
