//! Unit tests of the build script's parsers and per-file plan (build/parse.rs, build/plan.rs),
//! compiled here from the same files build.rs includes.
#![allow(dead_code)] // the build script's modules are included whole; tests use a part

#[path = "../build/compile.rs"]
mod compile;
#[path = "../build/parse.rs"]
mod parse;
#[path = "../build/plan.rs"]
mod plan;
#[path = "../build/toolchain.rs"]
mod toolchain;

use std::path::{Path, PathBuf};

use parse::{directives, launchers, quoted_includes, split_list, split_list_ws, strip_comments};

/// The build script's warning sink, which build/compile.rs calls.
fn warn(msg: &str) {
    eprintln!("warning: {msg}");
}
use toolchain::{Backend, Toolchain};

#[test]
fn directives_come_from_the_leading_comment_block_only() {
    let text = "// file.hip -- what it is\n\
                // hipfp8-build: backend=cuda\n\
                //   hipfp8-build:  cuda-arch = 90a \n\
                // hipfp8-build: flags\n\
                \n\
                #include \"port.h\"\n\
                // hipfp8-build: offload-arch=gfx942\n";
    assert_eq!(
        directives(text),
        [
            ("backend".to_string(), "cuda".to_string()),
            ("cuda-arch".to_string(), "90a".to_string()),
            ("flags".to_string(), String::new()),
        ]
    );
    assert!(directives("#include \"x.h\"\n// hipfp8-build: backend=rocm\n").is_empty());
}

#[test]
fn launchers_are_definitions_not_declarations_or_macros() {
    let text = "#define HIPFP8_EXTERN extern \"C\"\n\
                HIPFP8_DECL int hipfp8_decl_only(int a) HIPFP8_NOEXCEPT;\n\
                HIPFP8_EXTERN int hipfp8_declared(int a);\n\
                // HIPFP8_EXTERN int hipfp8_commented(int a) {\n\
                /* HIPFP8_EXTERN int hipfp8_block_commented(int a) { */\n\
                HIPFP8_EXTERN int hipfp8_a_launch(const void* x,\n    int64_t m) noexcept {\n  return 0;\n}\n\
                HIPFP8_EXTERN int\nhipfp8_b(void) noexcept { return 0; }\n";
    assert_eq!(launchers(text), ["hipfp8_a_launch", "hipfp8_b"]);
}

#[test]
fn comments_are_stripped_and_code_kept() {
    assert_eq!(
        strip_comments("a // b\nc /* d\ne */ f \"é\""),
        "a \nc  f \"é\""
    );
}

#[test]
fn lists_split_on_separators() {
    assert_eq!(
        split_list("gfx942; gfx950,gfx90a  x"),
        ["gfx942", "gfx950", "gfx90a", "x"]
    );
    assert!(split_list(" ;, ").is_empty());
    assert_eq!(split_list_ws("-O3  -DX=1\t-g"), ["-O3", "-DX=1", "-g"]);
}

fn tc(backend: Backend) -> Toolchain {
    Toolchain {
        backend,
        compiler: PathBuf::from("/nonexistent/cc"),
        root: PathBuf::from("/nonexistent"),
        lib_dir: PathBuf::from("/nonexistent/lib"),
        identity: String::new(),
    }
}

fn plan(b: Backend, rel: &str, text: &str, global: &[&str]) -> Result<Option<plan::Unit>, String> {
    let global: Vec<String> = global.iter().map(|s| s.to_string()).collect();
    plan::plan_unit(&tc(b), rel, Path::new(rel), text, &global)
}

#[test]
fn plan_follows_paths_and_directives() {
    // Backend-only folders.
    assert!(
        plan(Backend::Cuda, "x/rocm_only/a.hip", "", &["90"])
            .unwrap()
            .is_none()
    );
    assert!(
        plan(Backend::Rocm, "x/rocm_only/a.hip", "", &["gfx942"])
            .unwrap()
            .is_some()
    );
    // backend= directive.
    let cu = "// hipfp8-build: backend=cuda\n";
    assert!(
        plan(Backend::Rocm, "a.hip", cu, &["gfx942"])
            .unwrap()
            .is_none()
    );
    assert!(
        plan(
            Backend::Rocm,
            "a.hip",
            "// hipfp8-build: backend=metal\n",
            &["gfx942"]
        )
        .is_err()
    );
    // offload-arch intersects the global targets; nothing left = not built.
    let oa = "// hipfp8-build: offload-arch=gfx950\n";
    let u = plan(Backend::Rocm, "a.hip", oa, &["gfx942", "gfx950"])
        .unwrap()
        .unwrap();
    assert_eq!(u.targets, ["gfx950"]);
    assert!(
        plan(Backend::Rocm, "a.hip", oa, &["gfx942"])
            .unwrap()
            .is_none()
    );
    // cuda-arch replaces the global targets; backend-specific flags.
    let ca = "// hipfp8-build: cuda-arch=90a\n// hipfp8-build: cuda-flags=-DA\n// hipfp8-build: rocm-flags=-DB\n// hipfp8-build: flags=-DC\n";
    let u = plan(Backend::Cuda, "a.hip", ca, &["90"]).unwrap().unwrap();
    assert_eq!(u.targets, ["90a"]);
    assert!(
        u.extra_flags.contains(&"-DA".to_string()) && u.extra_flags.contains(&"-DC".to_string())
    );
    assert!(!u.extra_flags.contains(&"-DB".to_string()));
    // Unknown keys and libraries are errors (a typo must not silently build differently).
    assert!(
        plan(
            Backend::Cuda,
            "a.hip",
            "// hipfp8-build: colour=red\n",
            &["90"]
        )
        .is_err()
    );
    assert!(
        plan(
            Backend::Cuda,
            "a.hip",
            "// hipfp8-build: requires=mkl\n",
            &["90"]
        )
        .is_err()
    );
    // Launchers of the file.
    let u = plan(
        Backend::Cuda,
        "a.hip",
        "HIPFP8_EXTERN int hipfp8_x(void) noexcept { return 0; }\n",
        &["90"],
    )
    .unwrap()
    .unwrap();
    assert_eq!(u.launchers, ["hipfp8_x"]);
}

#[test]
fn every_kernel_file_of_the_tree_plans_for_cuda() {
    // The real tree: every .hip file either plans (with its launchers) or is excluded by a
    // rule; none is an error except for a missing library (CUTLASS / CK not configured here).
    let hip = Path::new(env!("CARGO_MANIFEST_DIR")).join("hip");
    let (mut sources, mut headers) = (Vec::new(), Vec::new());
    plan::walk(&hip, &mut sources, &mut headers);
    assert!(sources.len() >= 10 && !headers.is_empty());
    let mut launchers_found = 0;
    for s in &sources {
        let rel = s.strip_prefix(&hip).unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(s).unwrap();
        match plan::plan_unit(&tc(Backend::Cuda), &rel, s, &text, &["90".to_string()]) {
            Ok(Some(u)) => launchers_found += u.launchers.len(),
            Ok(None) => {}
            Err(e) => assert!(
                e.contains("CUTLASS") || e.contains("Composable"),
                "{rel}: {e}"
            ),
        }
    }
    assert!(launchers_found > 40, "{launchers_found}");
}

#[test]
fn quoted_includes_skip_comments_and_angle_brackets() {
    let text = "#include \"a.h\"\n  #  include  \"../b/c.h\" // why\n#include <cute/tensor.hpp>\n\
                // #include \"commented.h\"\n/* #include \"block.h\" */\n#define X \"y.h\"\n";
    assert_eq!(quoted_includes(text), ["a.h", "../b/c.h"]);
}

#[test]
fn include_digest_follows_exactly_the_headers_a_unit_sees() {
    let dir = std::env::temp_dir().join(format!("hipfp8-incdigest-{}", std::process::id()));
    let hip = dir.join("hip");
    std::fs::create_dir_all(hip.join("fam")).unwrap();
    let w = |p: &str, s: &str| std::fs::write(hip.join(p), s).unwrap();
    w("port.h", "// port\n");
    w("other.h", "// unrelated\n");
    w("fam/common.h", "#include \"../port.h\"\n");
    w(
        "fam/k.hip",
        "#include \"common.h\"\n#include <vector>\n#include \"missing.h\"\n",
    );
    let unit = hip.join("fam/k.hip");
    let d0 = compile::include_digest(&hip, &unit);
    w("other.h", "// unrelated, changed\n");
    assert_eq!(
        compile::include_digest(&hip, &unit),
        d0,
        "a header it does not include"
    );
    w("port.h", "// port, changed\n");
    let d1 = compile::include_digest(&hip, &unit);
    assert_ne!(d1, d0, "a header it includes through another");
    w(
        "fam/common.h",
        "#include \"../port.h\"\n#include \"../port.h\"\n",
    );
    assert_ne!(
        compile::include_digest(&hip, &unit),
        d1,
        "a header it includes directly"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
