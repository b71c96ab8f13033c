//! Host-side checks of the grouped-GEMM C++ code that need no GPU, run with the system C++
//! compiler (`$CXX`, else `c++`); each test prints `HIPFP8_SKIP ...` and returns when the
//! compiler (or bash/perl for the emulation) is missing.
//!
//! * `group_args`: hip/grouped_gemm/group_args.h, the pure per-group argument arithmetic the
//!   CK and CUTLASS argument-building kernels run on the device (offset clamping, pointer
//!   offsets, strides, routing of groups a library can't take, CK's argument layout), checked
//!   by tests/emu/group_args_test.cpp, including whole grouped GEMMs computed from those
//!   arguments against the definition; with staging (2D x 2D groups off a 16-token
//!   boundary): the padded starts, which groups each library's rule stages, groups on the
//!   boundary pointing at the caller's operands in place and the others at their staged
//!   copies, and whole GEMMs through those arguments with staging buffers that hold only the
//!   selected groups' copies (garbage elsewhere).
//! * `reference_kernel_emulated`: the portable reference kernel's source, run on the host
//!   through a small emulation of the HIP thread model (scripts/emu-gg-ref.sh), against an
//!   f64 loop: every format pair, empty/one-row/clamped groups, tails, the skip mask, and the
//!   grid-stride loop with fewer blocks than tiles.
//! * `stage_kernel_emulated`: the 2D x 2D operand staging (hip/grouped_gemm/stage.hip) run
//!   the same way (`scripts/emu-gg-ref.sh stage`) against its definition (the padded layout
//!   of docs/OPS.md, written only for the groups a library can't read in place: CUTLASS's
//!   and CK's rules): every group start residue mod 16, empty and 1-token groups, clamped
//!   offsets, aligned calls (nothing copied, every staged byte untouched), aligned groups
//!   mixed with unaligned ones, more groups than a block's threads, the shared-memory and the
//!   global group tables, grids smaller than the work.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn cxx() -> Option<String> {
    let c = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    Command::new(&c)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| c)
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn group_args() {
    let Some(cxx) = cxx() else {
        println!("HIPFP8_SKIP group_args: no C++ compiler ($CXX / c++)");
        return;
    };
    let dir = tempdir("group_args");
    let exe = dir.join("group_args_test");
    let out = Command::new(&cxx)
        .args(["-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root().join("hip"))
        .arg(root().join("tests/emu/group_args_test.cpp"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run the C++ compiler");
    assert!(
        out.status.success(),
        "compile failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run group_args_test");
    let text = String::from_utf8_lossy(&run.stdout);
    println!("{text}");
    assert!(
        run.status.success() && text.contains("all passed"),
        "group_args_test failed:\n{text}"
    );
}

#[test]
fn reference_kernel_emulated() {
    emulate("reference_kernel_emulated", "ref", ("EMU_MAX_BLOCKS", "3"));
}

#[test]
fn stage_kernel_emulated() {
    emulate(
        "stage_kernel_emulated",
        "stage",
        ("EMU_SMEM_GROUPS", "1024 64"),
    );
}

/// `scripts/emu-gg-ref.sh <which>` with one environment setting; must print `EMU OK`.
fn emulate(test: &str, which: &str, (var, value): (&str, &str)) {
    if cxx().is_none() || !have("bash") || !have("perl") {
        println!("HIPFP8_SKIP {test}: needs bash, perl and a C++20 compiler");
        return;
    }
    let run = Command::new("bash")
        .arg(root().join("scripts/emu-gg-ref.sh"))
        .arg(which)
        .env(var, value)
        .output()
        .expect("run scripts/emu-gg-ref.sh");
    let text = String::from_utf8_lossy(&run.stdout);
    println!("{text}");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success() && text.contains("EMU OK"),
        "emulation failed:\n{text}\n{err}"
    );
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hipfp8-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
