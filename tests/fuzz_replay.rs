//! The fuzz targets of `fuzz/` on stable, in CI: every committed corpus input
//! (`fuzz/corpus/<target>/`), then a fixed number of random inputs per target
//! (`HIPFP8_FUZZ_CASES`; default [`OPS_CASES`] / [`HANDLES_CASES`], about 10 s each on a loaded
//! 2-core machine; 0 = corpus only). The inputs are a fixed stream, so every machine runs the
//! same ones whatever its speed. The same functions run under
//! cargo-fuzz with libFuzzer (nightly: `cargo +nightly fuzz run c_abi_ops`), see fuzz/README.md.
//! A failing input is written to `target/fuzz-failures/<target>-<hash>` before the panic is
//! re-raised, so it can be replayed and added to the corpus.

mod support;

use std::path::PathBuf;
use std::time::Instant;

use support::fuzz_abi;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = support::root().join("fuzz/corpus").join(target);
    let mut v: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.unwrap().path();
            let d = std::fs::read(&p).unwrap();
            (p, d)
        })
        .collect();
    v.sort();
    v
}

/// Random inputs of the ops target by default (~900 per second on the loaded dev machine,
/// the two targets side by side).
const OPS_CASES: usize = 10_000;
/// Random inputs of the handles target by default (~22,000 per second there).
const HANDLES_CASES: usize = 200_000;

fn cases(default: usize) -> usize {
    std::env::var("HIPFP8_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Run `f` on `data`; on a panic save the input and fail with its path.
fn one(target: &str, f: fn(&[u8]), data: &[u8]) {
    if let Err(e) = std::panic::catch_unwind(|| f(data)) {
        let dir = support::profile_dir().join("fuzz-failures");
        std::fs::create_dir_all(&dir).unwrap();
        let h = data.iter().fold(0xcbf29ce484222325u64, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x100000001b3)
        });
        let p = dir.join(format!("{target}-{h:016x}"));
        std::fs::write(&p, data).unwrap();
        eprintln!("{target}: failing input saved to {}", p.display());
        std::panic::resume_unwind(e);
    }
}

/// The first `n` random inputs of `target`: a xorshift stream, lengths 1..256.
fn random(target: &str, f: fn(&[u8]), n: usize) {
    let mut s = 0x9E3779B97F4A7C15u64 ^ target.len() as u64;
    for _ in 0..n {
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let len = (next() % 256 + 1) as usize;
        let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        one(target, f, &data);
    }
}

fn replay(target: &str, f: fn(&[u8]), default_cases: usize) {
    let inputs = corpus(target);
    assert!(
        inputs.len() >= 8,
        "{target}: corpus has only {} inputs",
        inputs.len()
    );
    for (p, d) in &inputs {
        eprintln!("{target}: {}", p.display());
        one(target, f, d);
    }
    let n = cases(default_cases);
    let t0 = Instant::now();
    random(target, f, n);
    println!(
        "{target}: {} corpus inputs and {n} random inputs in {:.1} s: no failure",
        inputs.len(),
        t0.elapsed().as_secs_f64()
    );
}

#[test]
fn c_abi_ops() {
    replay("c_abi_ops", fuzz_abi::ops, OPS_CASES);
    let calls = fuzz_abi::CALLS.load(std::sync::atomic::Ordering::Relaxed);
    let ok = fuzz_abi::SUCCESSES.load(std::sync::atomic::Ordering::Relaxed);
    println!("c_abi_ops: {ok} of {calls} checked calls succeeded");
    // The corpus holds every op's valid problem: a target that never reached an op's body
    // would test nothing but argument checks.
    assert!(ok >= 24, "only {ok} successful calls");
}

#[test]
fn c_abi_handles() {
    replay("c_abi_handles", fuzz_abi::handles, HANDLES_CASES);
}
