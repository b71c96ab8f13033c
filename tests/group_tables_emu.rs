//! The group-tables kernel (hip/quant/common.hip, between the `hipfp8-emu-begin group_tables`
//! markers) on the host through tests/emu/port_emu.h, against a plain loop
//! (tests/emu/group_tables_emu.cpp): every launch of more than 2048 groups on the GPU starts
//! with it, so its clamping and padded prefix sums are checked here without a GPU too. Needs a
//! C++20 compiler (g++); skips with a printed reason outside cargo when there is none.

mod support;

use std::process::Command;

use support::*;

#[test]
fn group_tables_kernel_emulated() {
    let test = "group_tables_kernel_emulated";
    if !have_tool(test, &cxx()) {
        return;
    }
    let src = std::fs::read_to_string(root().join("hip/quant/common.hip")).unwrap();
    let (b, e) = (
        "// hipfp8-emu-begin group_tables",
        "// hipfp8-emu-end group_tables",
    );
    let body = &src[src.find(b).expect("begin marker")..src.find(e).expect("end marker")];
    let dir = scratch("group_tables_emu");
    std::fs::write(
        dir.join("group_tables.inc"),
        format!("namespace hipfp8 {{\n{body}\n}}  // namespace hipfp8\n"),
    )
    .unwrap();
    std::fs::copy(root().join("tests/emu/port_emu.h"), dir.join("port.h")).unwrap();
    let exe = dir.join("emu");
    run(Command::new(cxx())
        .args(["-std=c++20", "-O2", "-pthread"])
        .arg(format!("-I{}", dir.display()))
        .arg(root().join("tests/emu/group_tables_emu.cpp"))
        .arg("-o")
        .arg(&exe));
    let out = run(&mut Command::new(&exe));
    print!("{}", String::from_utf8_lossy(&out.stdout));
}
