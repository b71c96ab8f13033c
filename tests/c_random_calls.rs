//! The randomized C client `tests/c/random_calls.c` (issue 17), built with
//! `-fsanitize=address,undefined` against the shared library and run for
//! `HIPFP8_C_FUZZ_SECONDS` (default 3) seconds: random valid and invalid calls on the CPU
//! backend, canaries after every buffer, nothing written on failure (see the file's header).
//! Needs a C compiler with the sanitizer runtimes (gcc + libasan/libubsan on Debian).

mod support;

use std::path::PathBuf;
use std::process::Command;

use support::*;

/// The directory of libhipfp8.so: HIPFP8_LIB_DIR, else where `cargo test` left it.
fn so_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("HIPFP8_LIB_DIR").map(PathBuf::from) {
        return Some(d);
    }
    [deps_dir(), profile_dir()]
        .into_iter()
        .find(|d| exists(&d.join("libhipfp8.so")))
}

#[test]
fn random_c_calls_under_asan_ubsan() {
    let test = "random_c_calls_under_asan_ubsan";
    if !have_tool(test, &cc()) {
        return;
    }
    let Some(lib) = so_dir() else {
        assert!(
            !under_cargo(),
            "libhipfp8.so not found next to the test binary"
        );
        println!("HIPFP8_SKIP {test}: libhipfp8.so not found (set HIPFP8_LIB_DIR)");
        return;
    };
    let dir = scratch("c_random_calls");
    let exe = dir.join("random_calls");
    let src = root().join("tests/c/random_calls.c");
    run(Command::new(cc())
        .args(["-std=c11", "-O1", "-g", "-fno-omit-frame-pointer"])
        .args(["-fsanitize=address,undefined", "-fno-sanitize-recover=all"])
        .args(WARN_FLAGS)
        .arg(format!("-I{}", root().join("include").display()))
        .arg(&src)
        .arg(format!("-L{}", soname_link(&lib).display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lhipfp8", "-o"])
        .arg(&exe));
    let secs = std::env::var("HIPFP8_C_FUZZ_SECONDS").unwrap_or_else(|_| "3".into());
    for seed in ["1", "20261201"] {
        let out = run(Command::new(&exe)
            .args([secs.as_str(), seed])
            .env(
                "ASAN_OPTIONS",
                "abort_on_error=0:halt_on_error=1:detect_leaks=1",
            )
            .env("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1"));
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
}
