//! The knob registry (hip/knobs.h) is the one list of runtime knobs: the README's table is its
//! rendering (`BLESS=1 cargo test --test knobs` rewrites it), `hipfp8 --knobs` prints the same,
//! and no code reads a `HIPFP8_*` variable that the registry lacks.

use std::path::{Path, PathBuf};

const BEGIN: &str = "<!-- knobs:begin (generated from hip/knobs.h) -->\n";
const END: &str = "<!-- knobs:end -->";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn readme_table_is_the_registry() {
    let path = root().join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let i = readme
        .find(BEGIN)
        .expect("README has the knobs:begin marker")
        + BEGIN.len();
    let j = i + readme[i..]
        .find(END)
        .expect("README has the knobs:end marker");
    let fresh = hipfp8::knobs::markdown_table();
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, format!("{}{fresh}{}", &readme[..i], &readme[j..])).unwrap();
        return;
    }
    assert_eq!(
        &readme[i..j],
        fresh,
        "README's knob table differs from hip/knobs.h: BLESS=1 cargo test --test knobs"
    );
}

#[test]
fn cli_lists_the_registry() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hipfp8"))
        .arg("--knobs")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        hipfp8::knobs::markdown_table()
    );
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p
            .extension()
            .is_some_and(|x| x == "rs" || x == "hip" || x == "h")
        {
            out.push(p);
        }
    }
}

/// Every environment read in src/ and hip/ goes through the registry: C++ reads only in
/// `hipfp8::knob` (by the registry's name), Rust through `knobs::host_var`, except the test
/// helper's HIPFP8_REQUIRE_GPU (a test-runner switch, not a knob).
#[test]
fn no_environment_read_bypasses_the_registry() {
    let mut all = Vec::new();
    files(&root().join("src"), &mut all);
    files(&root().join("hip"), &mut all);
    let mut bad = Vec::new();
    for f in &all {
        let rel = f
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .to_string();
        if rel.starts_with("src/bin/") || rel == "src/knobs.rs" {
            continue; // the binaries read their own flags; knobs.rs is the registry
        }
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap();
            let reads = code.contains("env::var(") || code.contains("getenv(");
            let allowed =
                code.contains("getenv(kTable[id].name)") || code.contains("\"HIPFP8_REQUIRE_GPU\"");
            if reads && !allowed {
                bad.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "environment reads outside hip/knobs.h's registry:\n{}",
        bad.join("\n")
    );
    // And the C++ side really takes its names from the registry.
    let common = std::fs::read_to_string(root().join("hip/quant/common.hip")).unwrap();
    assert!(common.contains("HIPFP8_KERNEL_KNOBS(HIPFP8_KNOB_ENTRY)"));
}
