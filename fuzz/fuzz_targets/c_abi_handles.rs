//! cargo-fuzz target over the C ABI (CPU backend): tests/support/fuzz_abi.rs::handles, the same
//! function tests/fuzz_replay.rs runs over the corpus on stable.
#![no_main]

#[allow(dead_code, unused_imports)]
#[path = "../../tests/support"]
mod support {
    pub mod ffi_ops;
    pub mod fuzz_abi;
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| support::fuzz_abi::handles(data));
