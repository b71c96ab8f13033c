//! Kernels of the many-groups paths run on the host through the HIP emulation
//! (tests/emu/port_emu.h, tests/emu/quant_port_emu.h), against plain loops, so that they are
//! checked without a GPU too (the GPU tests are tests/gpu_groups.rs):
//! - the group-tables kernel (hip/quant/common.hip, markers `hipfp8-emu-begin group_tables`):
//!   every launch of more than 2048 groups starts with it (tests/emu/group_tables_emu.cpp);
//! - per_group_rowwise's many-groups kernel (hip/quant/rowwise.hip, markers `pgr_global`), with
//!   emulated wavefront shuffles (tests/emu/pgr_global_emu.cpp; HIPFP8_EMU_FULL=1 runs its 16
//!   cases instead of 3: minutes).
//!
//! Needs a C++20 compiler (g++); skips with a printed reason outside cargo when there is none.

mod support;

use std::process::Command;

use support::*;

/// The text between `// hipfp8-emu-begin NAME` and `// hipfp8-emu-end NAME` of a hip/ file,
/// inside namespace hipfp8.
fn extract(file: &str, name: &str) -> String {
    let src = std::fs::read_to_string(root().join(file)).unwrap();
    let (b, e) = (
        format!("// hipfp8-emu-begin {name}"),
        format!("// hipfp8-emu-end {name}"),
    );
    let body = &src[src.find(&b).expect("begin marker")..src.find(&e).expect("end marker")];
    format!("namespace hipfp8 {{\n{body}\n}}  // namespace hipfp8\n")
}

/// Build `tests/emu/<harness>` in a scratch dir laid out like hip/ (the emulated port.h next
/// to the codec, the kernels' text as .inc files) and run it with `args`.
fn build_and_run(test: &str, harness: &str, args: &[&str]) {
    let dir = scratch(test);
    std::fs::create_dir_all(dir.join("quant")).unwrap();
    let copy = |from: &str, to: &str| {
        std::fs::copy(root().join(from), dir.join(to)).unwrap();
    };
    copy("tests/emu/port_emu.h", "port_emu_base.h");
    copy("tests/emu/quant_port_emu.h", "port_quant.h");
    copy("hip/fp8_codec.h", "fp8_codec.h");
    copy("hip/kernel_abi.h", "kernel_abi.h");
    copy("hip/knobs.h", "knobs.h");
    copy("hip/quant/common.h", "quant/common.h");
    // group_tables_emu.cpp includes "port.h" as the plain emulation; the codec and common.h
    // need the quant one (which includes the plain one as port_emu_base.h).
    let port = if harness == "group_tables_emu.cpp" {
        "port_emu_base.h"
    } else {
        "port_quant.h"
    };
    std::fs::copy(dir.join(port), dir.join("port.h")).unwrap();
    std::fs::write(
        dir.join("group_tables.inc"),
        extract("hip/quant/common.hip", "group_tables"),
    )
    .unwrap();
    std::fs::write(
        dir.join("pgr_global.inc"),
        extract("hip/quant/rowwise.hip", "pgr_global"),
    )
    .unwrap();
    let exe = dir.join("emu");
    run(Command::new(cxx())
        .args(["-std=c++20", "-O2", "-pthread"])
        .arg(format!("-I{}", dir.display()))
        .arg(root().join("tests/emu").join(harness))
        .arg("-o")
        .arg(&exe));
    let out = run(Command::new(&exe).args(args));
    print!("{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn group_tables_kernel_emulated() {
    let test = "group_tables_kernel_emulated";
    if have_tool(test, &cxx()) {
        build_and_run(test, "group_tables_emu.cpp", &[]);
    }
}

#[test]
fn per_group_rowwise_many_groups_kernel_emulated() {
    let test = "per_group_rowwise_many_groups_kernel_emulated";
    if have_tool(test, &cxx()) {
        let full = std::env::var_os("HIPFP8_EMU_FULL").is_some();
        build_and_run(
            test,
            "pgr_global_emu.cpp",
            if full { &["full"] } else { &[] },
        );
    }
}
