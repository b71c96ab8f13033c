//! Build script: compiles every `hip/**/*.hip` into `libhipfp8_kernels.a` and links it.
//! The steps are modules of build/: `toolchain` (discovery), `plan` (per-file plan from the
//! directives), `compile` (parallel compile through the object cache), `link` (archive, link
//! directives, cfgs), `parse` (the text parsers; unit-tested by tests/build_script.rs).
//!
//! # Backends
//! `HIPFP8_BACKEND=auto|rocm|cuda|cpu` (default `auto`).
//! - `rocm`: hipcc from `$ROCM_PATH/bin`, `$HIP_PATH/bin`, then beside `hipconfig` on PATH
//!   (or `hipconfig --rocmpath`/bin), then `/opt/rocm/bin`. Targets from
//!   `HIPFP8_OFFLOAD_ARCH` (default `gfx942;gfx950`, never taken from the build machine's
//!   GPU). Links `libamdhip64` (found under the ROCm root, or `HIPFP8_ROCM_LIB_DIR`).
//! - `cuda`: nvcc from `$NVCC`, `$CUDA_HOME/bin`, `$CUDA_PATH/bin`, then PATH. Every `.hip`
//!   file is compiled as CUDA (`-x cu`); `hip/port.h` maps the HIP names onto CUDA. Targets
//!   from `HIPFP8_CUDA_ARCH` (default `90`; each entry `NN` or `NNa` gives SASS + PTX).
//!   Links `libcudart_static.a`, so binaries need only the driver's `libcuda.so.1` at run time.
//!   The host compiler is nvcc's own default or `$NVCC_CCBIN`.
//! - `auto`: ROCm when hipcc AND a linkable libamdhip64 are found, else CUDA, else CPU only
//!   with a cargo warning. (A hipcc that only runs inside a chroot, like the sid-root
//!   wrappers in `scripts/setup-hip-sid.sh`, has no host libamdhip64: auto skips it.)
//! - `cpu`: no GPU code at all, silently.
//!
//! # What the Rust side sees
//! - `cfg(hipfp8_gpu)` plus `cfg(hipfp8_rocm)` or `cfg(hipfp8_cuda)`.
//! - `cfg(hipfp8_launcher = "NAME")` for every function DEFINED in a compiled `.hip` file as
//!   `HIPFP8_EXTERN <ret> NAME(...) {` (the declaration must be written literally, not made
//!   by a macro). `src/sys.rs` declares each foreign function against that cfg, so a launcher
//!   that is not compiled in (file skipped, other engineer's branch not merged) becomes a
//!   stub returning `HIPFP8_KSTATUS_NOT_BUILT` instead of an undefined symbol.
//! - env `HIPFP8_BUILD_BACKEND` (cpu/rocm/cuda), `HIPFP8_BUILD_TARGETS`, `HIPFP8_BUILD_LAUNCHERS`.
//!
//! # Per-file build directives
//! New files are found by globbing; nobody needs to edit this script to add a kernel.
//! - A path component named `rocm_only` or `cuda_only` restricts the file to that backend.
//! - Lines of the file's leading `//` comment block of the form
//!   `// hipfp8-build: KEY=VALUE` (one key per line) adjust one translation unit:
//!   - `backend=rocm` / `backend=cuda`: compile only for that backend;
//!   - `offload-arch=gfx942[,gfx950]`: ROCm targets of this TU, intersected with
//!     `HIPFP8_OFFLOAD_ARCH`; the file is skipped when nothing is left (use this for CK's
//!     one-translation-unit-per-target rule);
//!   - `cuda-arch=90a[,100a]`: CUDA targets of this TU (replaces `HIPFP8_CUDA_ARCH`);
//!   - `flags=...`, `rocm-flags=...`, `cuda-flags=...`: extra compiler arguments (split on
//!     whitespace);
//!   - `requires=cutlass`: adds CUTLASS include dirs from `HIPFP8_CUTLASS_DIR` or
//!     `CUTLASS_DIR` (a checkout with `include/cutlass/`, or the `nvidia-cutlass` wheel's
//!     `cutlass_library/source`), else the newest `.toolchains/cutlass/<version>/` that
//!     `scripts/fetch-cutlass.sh` unpacked; skipped with a warning when none exists;
//!   - `requires=ck`: Composable Kernel headers from `HIPFP8_CK_DIR`, else `<rocm>/include`;
//!     skipped with a warning when `ck/ck.hpp` is not found.
//!
//! # Other knobs
//! `HIPFP8_JOBS` (parallel compiles; default cargo's NUM_JOBS), `HIPFP8_EXTRA_FLAGS` (every
//! TU), `HIPFP8_OBJ_CACHE` (object cache keyed by a hash of compiler identity, arguments,
//! source and every header under hip/: default `$XDG_CACHE_HOME/hipfp8/objects` or
//! `~/.cache/hipfp8/objects`; `0` disables), `HIPFP8_EXPORT_OBJECTS=DIR` (copy every
//! object plus `manifest.tsv` to `DIR/<backend>/`, read by `scripts/isa-report.sh`),
//! `HIPFP8_STRICT=1` (a file that cannot be built, e.g. CUTLASS not found, is an error
//! instead of a warning: CI sets it so no translation unit escapes the compile checks).

#[path = "build/compile.rs"]
mod compile;
#[path = "build/link.rs"]
mod link;
#[path = "build/parse.rs"]
mod parse;
#[path = "build/plan.rs"]
mod plan;
#[path = "build/toolchain.rs"]
mod toolchain;

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

use toolchain::{Backend, Toolchain, env_path, list_env};

const ENV_VARS: &[&str] = &[
    "HIPFP8_BACKEND",
    "HIPFP8_OFFLOAD_ARCH",
    "HIPFP8_CUDA_ARCH",
    "HIPFP8_ROCM_LIB_DIR",
    "HIPFP8_CUTLASS_DIR",
    "CUTLASS_DIR",
    "HIPFP8_CK_DIR",
    "HIPFP8_JOBS",
    "HIPFP8_EXTRA_FLAGS",
    "HIPFP8_OBJ_CACHE",
    "HIPFP8_EXPORT_OBJECTS",
    "HIPFP8_STRICT",
    "ROCM_PATH",
    "HIP_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "NVCC",
    "NVCC_CCBIN",
    "PATH",
    "XDG_CACHE_HOME",
];

fn main() {
    for v in ENV_VARS {
        println!("cargo::rerun-if-env-changed={v}");
    }
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=build");
    println!("cargo::rerun-if-changed=hip");
    println!("cargo::rustc-check-cfg=cfg(hipfp8_gpu)");
    println!("cargo::rustc-check-cfg=cfg(hipfp8_rocm)");
    println!("cargo::rustc-check-cfg=cfg(hipfp8_cuda)");
    println!("cargo::rustc-check-cfg=cfg(hipfp8_launcher, values(any()))");
    // Versioned SONAME libhipfp8.so.<HIPFP8_ABI_VERSION>, the constant read from src/ffi/mod.rs
    // (tests/ffi_examples.rs and python/tests/test_cmake.py check the built library's).
    println!("cargo::rerun-if-changed=src/ffi/mod.rs");
    let ffi = std::fs::read_to_string("src/ffi/mod.rs").expect("src/ffi/mod.rs");
    let abi = ffi
        .lines()
        .find_map(|l| l.strip_prefix("pub const HIPFP8_ABI_VERSION: u32 = "))
        .and_then(|v| v.trim_end_matches(';').trim().parse::<u32>().ok())
        .expect("src/ffi/mod.rs defines `pub const HIPFP8_ABI_VERSION: u32 = N;`");
    println!("cargo::rustc-cdylib-link-arg=-Wl,-soname,libhipfp8.so.{abi}");

    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let hip_dir = manifest_dir.join("hip");
    let mut sources = Vec::new();
    let mut headers = Vec::new();
    plan::walk(&hip_dir, &mut sources, &mut headers);
    sources.sort();
    headers.sort();
    for s in &sources {
        println!("cargo::rerun-if-changed={}", s.display());
    }
    for h in &headers {
        println!("cargo::rerun-if-changed={}", h.display());
    }

    let requested = env::var("HIPFP8_BACKEND")
        .unwrap_or_else(|_| "auto".into())
        .to_ascii_lowercase();
    let toolchain = match requested.as_str() {
        "cpu" => None,
        "rocm" => Some(
            toolchain::find_rocm()
                .unwrap_or_else(|why| panic!("HIPFP8_BACKEND=rocm but ROCm is not usable: {why}")),
        ),
        "cuda" => Some(
            toolchain::find_cuda()
                .unwrap_or_else(|why| panic!("HIPFP8_BACKEND=cuda but CUDA is not usable: {why}")),
        ),
        "auto" | "" => match (toolchain::find_rocm(), toolchain::find_cuda()) {
            (Ok(t), _) => Some(t),
            (Err(rw), Ok(t)) => {
                if rw.contains("libamdhip64") {
                    warn(&format!("ROCm skipped ({rw}); using CUDA"));
                }
                Some(t)
            }
            (Err(rw), Err(cw)) => {
                warn(&format!(
                    "no usable GPU compiler, building the CPU backend only (ROCm: {rw}; CUDA: {cw}). \
                     Set HIPFP8_BACKEND=cpu to silence this."
                ));
                None
            }
        },
        other => panic!("HIPFP8_BACKEND must be auto, rocm, cuda or cpu, not {other:?}"),
    };

    let Some(tc) = toolchain else {
        println!("cargo::rustc-env=HIPFP8_BUILD_BACKEND=cpu");
        println!("cargo::rustc-env=HIPFP8_BUILD_TARGETS=");
        println!("cargo::rustc-env=HIPFP8_BUILD_LAUNCHERS=");
        return;
    };
    build_gpu(&tc, &hip_dir, &sources);
}

fn warn(msg: &str) {
    println!("cargo::warning=hipfp8: {msg}");
}

fn build_gpu(tc: &Toolchain, hip_dir: &Path, sources: &[PathBuf]) {
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let obj_dir = out_dir.join("hip-objs");
    let log_dir = out_dir.join("hip-logs");
    let _ = fs::remove_dir_all(&obj_dir);
    fs::create_dir_all(&obj_dir).unwrap();
    fs::create_dir_all(&log_dir).unwrap();

    let global_targets = match tc.backend {
        Backend::Rocm => list_env("HIPFP8_OFFLOAD_ARCH", "gfx942;gfx950"),
        Backend::Cuda => list_env("HIPFP8_CUDA_ARCH", "90"),
    };
    for t in &global_targets {
        let ok = match tc.backend {
            Backend::Rocm => t.starts_with("gfx") && t.len() > 3,
            Backend::Cuda => t.trim_end_matches(['a', 'f']).parse::<u32>().is_ok(),
        };
        assert!(ok, "bad {} target {t:?}", tc.backend.name());
    }

    let strict = env::var("HIPFP8_STRICT").is_ok_and(|v| v == "1");
    let mut units = Vec::new();
    for path in sources {
        let rel = path
            .strip_prefix(hip_dir)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let text =
            fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        match plan::plan_unit(tc, &rel, path, &text, &global_targets) {
            Ok(Some(u)) => units.push(u),
            Ok(None) => {}
            Err(skip) if strict => panic!("HIPFP8_STRICT=1: hip/{rel} cannot be built: {skip}"),
            Err(skip) => warn(&format!("skipping hip/{rel}: {skip}")),
        }
    }

    let hits = compile::compile_all(tc, hip_dir, &units, &obj_dir, &log_dir);
    let targets = link::link(tc, &out_dir, &obj_dir, &units, &global_targets);

    if let Some(dir) = env_path("HIPFP8_EXPORT_OBJECTS") {
        compile::export_objects(tc, &dir, &units, &obj_dir);
    }
    eprintln!(
        "hipfp8: {} TUs for {} ({}), {} from the object cache",
        units.len(),
        tc.backend.name(),
        targets,
        hits
    );
}
