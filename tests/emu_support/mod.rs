//! The host emulations' shared build (tests/moe_emu.rs, tests/route_emu.rs): the kernels'
//! marked regions of hip/ as `.inc` files next to copies of the headers they include, the
//! emulated port header, and the harness compiled by the host C++ compiler.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::Tensor;
use crate::support::{cxx, root, run};

/// The text between `// hipfp8-emu-begin NAME` and `// hipfp8-emu-end NAME` of a hip/ file,
/// wrapped in namespace hipfp8.
pub fn marked(file: &str, name: &str) -> String {
    let src = std::fs::read_to_string(root().join(file)).unwrap();
    let b = src
        .find(&format!("// hipfp8-emu-begin {name}"))
        .expect("begin marker");
    let e = src
        .find(&format!("// hipfp8-emu-end {name}"))
        .expect("end marker");
    format!(
        "namespace hipfp8 {{\n{}\n}}  // namespace hipfp8\n",
        &src[b..e]
    )
}

/// Lay out the emulation's include tree in `dir` (the headers of the quant and MoE kernels,
/// the emulated port header, and `incs`: (file, hip source, marker) regions) and build
/// tests/emu/`harness`.cpp into `dir`/`harness`; returns its path.
pub fn build(dir: &Path, harness: &str, incs: &[(&str, &str, &str)]) -> PathBuf {
    for d in ["quant", "moe"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    for (from, to) in [
        ("tests/emu/port_emu.h", "port_emu_base.h"),
        ("tests/emu/quant_port_emu.h", "port.h"),
        ("tests/emu/emu_io.h", "emu_io.h"),
        ("hip/fp8_codec.h", "fp8_codec.h"),
        ("hip/kernel_abi.h", "kernel_abi.h"),
        ("hip/knobs.h", "knobs.h"),
        ("hip/quant/common.h", "quant/common.h"),
        ("hip/quant/policy.h", "quant/policy.h"),
        ("hip/moe/swiglu.h", "moe/swiglu.h"),
    ] {
        std::fs::copy(root().join(from), dir.join(to)).unwrap();
    }
    for (inc, file, name) in incs {
        std::fs::write(dir.join(inc), marked(file, name)).unwrap();
    }
    let exe = dir.join(harness);
    run(Command::new(cxx())
        .args(["-std=c++20", "-O2", "-pthread"])
        .arg(format!("-I{}", dir.display()))
        .arg(root().join(format!("tests/emu/{harness}.cpp")))
        .arg("-o")
        .arg(&exe));
    exe
}

/// A high-precision input as the harnesses read it: bf16 bits or f32, little-endian.
pub fn write_hp(path: &Path, t: &Tensor) {
    let bytes: Vec<u8> = match &t.b {
        Some(b) => b.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect(),
        None => t.vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    std::fs::write(path, bytes).unwrap();
}
