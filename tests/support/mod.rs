//! Helpers shared by the C-ABI integration tests: finding the C/C++ compilers and the
//! library artifacts `cargo test` builds, and running commands with readable failures.
#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
pub mod ffi_ops;
pub mod fuzz_abi;

use std::process::{Command, Output};

pub const WARN_FLAGS: [&str; 4] = ["-Wall", "-Wextra", "-Wpedantic", "-Werror"];

/// The crate root: CARGO_MANIFEST_DIR at run time (cargo sets it, and so does a GPU test
/// bundle that carries the sources), else where the crate was built.
pub fn root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// Whether cargo runs this test (it sets CARGO). Under cargo a missing tool is a failure;
/// a test binary copied to another machine (the GPU bundle) skips, saying why.
pub fn under_cargo() -> bool {
    std::env::var_os("CARGO").is_some()
}

/// `tool --version` works; otherwise fail under cargo, or print a skip line and return false.
pub fn have_tool(test: &str, tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            !under_cargo(),
            "{test}: `{tool}` is not installed; the C ABI tests need a C and a C++ compiler \
             (Debian: apt-get install gcc g++)"
        );
        println!("HIPFP8_SKIP {test}: `{tool}` not found on this machine");
    }
    ok
}

/// The C compiler: $CC, else `cc`.
pub fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// The C++ compiler: $CXX, else `c++`.
pub fn cxx() -> String {
    std::env::var("CXX").unwrap_or_else(|_| "c++".into())
}

/// A fresh scratch directory under the target directory (kept after the run, for
/// inspection; each run starts it empty).
pub fn scratch(name: &str) -> PathBuf {
    let dir = profile_dir().join("ffi-test-scratch").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `target/<profile>/deps`, where this test binary lives and where `cargo test` leaves the
/// library's staticlib and cdylib (the crate declares both types, so building the library
/// for the tests builds them too).
pub fn deps_dir() -> PathBuf {
    std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf()
}

pub fn profile_dir() -> PathBuf {
    deps_dir().parent().unwrap().to_path_buf()
}

/// Run a command; panic with its command line and output if it cannot start or fails.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (is the compiler installed?)"));
    if !out.status.success() {
        panic!(
            "{cmd:?} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

pub fn exists(p: &Path) -> bool {
    p.try_exists().unwrap_or(false)
}

/// `lib`, after making sure it holds `libhipfp8.so.<ABI>` (the SONAME build.rs gives the
/// library, which an executable linked against it asks the loader for) as a link to the
/// libhipfp8.so cargo writes.
pub fn soname_link(lib: &Path) -> &Path {
    let name = format!("libhipfp8.so.{}", hipfp8::ffi::HIPFP8_ABI_VERSION);
    let link = lib.join(&name);
    if std::fs::symlink_metadata(&link).is_err() {
        // Another test may create it at the same time: only a missing link is an error.
        let _ = std::os::unix::fs::symlink("libhipfp8.so", &link);
    }
    assert!(exists(&link), "could not create {}", link.display());
    lib
}
