//! Build script: compiles every `hip/**/*.hip` into `libhipfp8_kernels.a` and links it.
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

use std::collections::BTreeSet;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

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

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Backend {
    Rocm,
    Cuda,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Rocm => "rocm",
            Backend::Cuda => "cuda",
        }
    }
}

/// A usable GPU compiler plus what the final link needs.
struct Toolchain {
    backend: Backend,
    compiler: PathBuf,
    /// ROCm root (include/ck lookup) or CUDA root.
    root: PathBuf,
    /// Directory holding libamdhip64.so / libcudart_static.a.
    lib_dir: PathBuf,
    /// `compiler --version` output: part of the object cache key.
    identity: String,
}

/// One translation unit and its resolved compile settings.
struct Unit {
    /// Path relative to hip/, with '/' separators.
    rel: String,
    path: PathBuf,
    /// Offload targets (gfx942...) or CUDA arch entries (90, 90a...).
    targets: Vec<String>,
    extra_flags: Vec<String>,
    launchers: Vec<String>,
}

fn main() {
    for v in ENV_VARS {
        println!("cargo::rerun-if-env-changed={v}");
    }
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=hip");
    println!("cargo::rustc-check-cfg=cfg(hipfp8_gpu)");
    println!("cargo::rustc-check-cfg=cfg(hipfp8_rocm)");
    println!("cargo::rustc-check-cfg=cfg(hipfp8_cuda)");
    println!("cargo::rustc-check-cfg=cfg(hipfp8_launcher, values(any()))");
    // Versioned SONAME libhipfp8.so.<HIPFP8_ABI_VERSION> (src/ffi/mod.rs; tests/ffi_examples.rs and
    // python/tests/test_cmake.py fail when they disagree).
    println!("cargo::rustc-cdylib-link-arg=-Wl,-soname,libhipfp8.so.2");

    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let hip_dir = manifest_dir.join("hip");
    let mut sources = Vec::new();
    let mut headers = Vec::new();
    walk(&hip_dir, &mut sources, &mut headers);
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
            find_rocm()
                .unwrap_or_else(|why| panic!("HIPFP8_BACKEND=rocm but ROCm is not usable: {why}")),
        ),
        "cuda" => Some(
            find_cuda()
                .unwrap_or_else(|why| panic!("HIPFP8_BACKEND=cuda but CUDA is not usable: {why}")),
        ),
        "auto" | "" => match (find_rocm(), find_cuda()) {
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
    build_gpu(&tc, &hip_dir, &sources, &headers);
}

fn warn(msg: &str) {
    println!("cargo::warning=hipfp8: {msg}");
}

fn walk(dir: &Path, sources: &mut Vec<PathBuf>, headers: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, sources, headers);
        } else {
            match p.extension().and_then(|e| e.to_str()) {
                Some("hip") => sources.push(p),
                Some("h" | "hpp" | "cuh" | "inc" | "inl") => headers.push(p),
                _ => {}
            }
        }
    }
}

fn list_env(var: &str, default: &str) -> Vec<String> {
    let v = env::var(var).unwrap_or_default();
    let v = if v.trim().is_empty() {
        default.to_string()
    } else {
        v
    };
    split_list(&v)
}

fn split_list(v: &str) -> Vec<String> {
    v.split([';', ',', ' '])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

fn env_path(var: &str) -> Option<PathBuf> {
    env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn which(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn run_capture(cmd: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

// ---------------------------------------------------------------------------------- ROCm

fn find_rocm() -> Result<Toolchain, String> {
    let mut tried = Vec::new();
    let mut cand: Vec<(PathBuf, PathBuf)> = Vec::new(); // (hipcc, root)
    for var in ["ROCM_PATH", "HIP_PATH"] {
        if let Some(root) = env_path(var) {
            cand.push((root.join("bin/hipcc"), root));
        }
    }
    if let Some(hipconfig) = which("hipconfig") {
        let root = run_capture(&hipconfig, &["--rocmpath"]).map(PathBuf::from);
        // A hipcc beside hipconfig first: for wrapper installs (a chroot toolchain) the
        // path hipconfig reports only exists inside the chroot.
        if let Some(dir) = hipconfig.parent() {
            cand.push((
                dir.join("hipcc"),
                root.clone().unwrap_or_else(|| dir.join("..")),
            ));
        }
        if let Some(r) = root {
            cand.push((r.join("bin/hipcc"), r));
        }
    }
    cand.push((
        PathBuf::from("/opt/rocm/bin/hipcc"),
        PathBuf::from("/opt/rocm"),
    ));

    let Some((hipcc, root)) = cand.into_iter().find(|(h, _)| {
        tried.push(h.display().to_string());
        h.is_file()
    }) else {
        return Err(format!("hipcc not found (tried {})", tried.join(", ")));
    };
    let identity = run_capture(&hipcc, &["--version"])
        .ok_or_else(|| format!("{} --version failed", hipcc.display()))?;

    let mut lib_dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = env_path("HIPFP8_ROCM_LIB_DIR") {
        lib_dirs.push(d);
    }
    for sub in ["lib", "lib64", "lib/x86_64-linux-gnu"] {
        lib_dirs.push(root.join(sub));
    }
    let lib_dir = lib_dirs.iter().find(|d| d.join("libamdhip64.so").exists()).cloned().ok_or_else(|| {
        format!(
            "hipcc found at {} but no libamdhip64.so in {} (set HIPFP8_ROCM_LIB_DIR, or build inside the ROCm root)",
            hipcc.display(),
            lib_dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
        )
    })?;
    Ok(Toolchain {
        backend: Backend::Rocm,
        compiler: hipcc,
        root,
        lib_dir,
        identity,
    })
}

// ---------------------------------------------------------------------------------- CUDA

fn find_cuda() -> Result<Toolchain, String> {
    let mut cand: Vec<PathBuf> = Vec::new();
    if let Some(n) = env_path("NVCC") {
        cand.push(n);
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = env_path(var) {
            cand.push(root.join("bin/nvcc"));
        }
    }
    if let Some(n) = which("nvcc") {
        cand.push(n);
    }
    let nvcc = cand.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        if cand.is_empty() {
            "nvcc not found (NVCC, CUDA_HOME, CUDA_PATH unset; not on PATH)".to_string()
        } else {
            format!(
                "nvcc not found (tried {})",
                cand.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    })?;
    // root = the directory above bin/ (follow symlinks: PyPI wheels link cuda -> nvidia/cu13).
    let real = fs::canonicalize(&nvcc).unwrap_or_else(|_| nvcc.clone());
    let root = real
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .ok_or("nvcc has no parent dir")?;
    let lib_dir = ["lib64", "lib", "targets/x86_64-linux/lib"]
        .iter()
        .map(|s| root.join(s))
        .find(|d| d.join("libcudart_static.a").exists())
        .ok_or_else(|| format!("libcudart_static.a not found under {}", root.display()))?;
    let mut identity = run_capture(&nvcc, &["--version"])
        .ok_or_else(|| format!("{} --version failed", nvcc.display()))?;
    // The host compiler is part of the object's identity too.
    let ccbin = env::var("NVCC_CCBIN").unwrap_or_else(|_| "c++".into());
    if let Some(v) = run_capture(Path::new(&ccbin), &["--version"])
        .or_else(|| which(&ccbin).and_then(|p| run_capture(&p, &["--version"])))
    {
        identity.push('\n');
        identity.push_str(&v);
    }
    Ok(Toolchain {
        backend: Backend::Cuda,
        compiler: nvcc,
        root,
        lib_dir,
        identity,
    })
}

// ---------------------------------------------------------------------------------- build

fn build_gpu(tc: &Toolchain, hip_dir: &Path, sources: &[PathBuf], headers: &[PathBuf]) {
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

    // Digest of every header under hip/: any header change invalidates every cached object
    // (coarse, but headers are few and a wrong cache hit would be far worse).
    let mut hdr = Fnv128::new();
    for h in headers {
        hdr.str(&h.strip_prefix(hip_dir).unwrap_or(h).to_string_lossy());
        hdr.bytes(&fs::read(h).unwrap_or_default());
    }
    let header_digest = hdr.hex();

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
        match plan_unit(tc, &rel, path, &text, &global_targets) {
            Ok(Some(u)) => units.push(u),
            Ok(None) => {}
            Err(skip) if strict => panic!("HIPFP8_STRICT=1: hip/{rel} cannot be built: {skip}"),
            Err(skip) => warn(&format!("skipping hip/{rel}: {skip}")),
        }
    }

    let cache_dir = cache_dir();
    let jobs = env::var("HIPFP8_JOBS")
        .ok()
        .or_else(|| env::var("NUM_JOBS").ok())
        .and_then(|j| j.parse::<usize>().ok())
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
        })
        .max(1);

    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::<String>::new());
    let hits = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..jobs.min(units.len()).max(1) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(u) = units.get(i) else { break };
                    match compile_unit(
                        tc,
                        hip_dir,
                        u,
                        &obj_dir,
                        &log_dir,
                        cache_dir.as_deref(),
                        &header_digest,
                    ) {
                        Ok(hit) => {
                            if hit {
                                hits.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(e) => failures.lock().unwrap().push(e),
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("{f}");
        }
        panic!(
            "{} of {} HIP translation units failed to compile with {} (see messages above; HIPFP8_BACKEND=cpu builds without GPU code)",
            failures.len(),
            units.len(),
            tc.compiler.display()
        );
    }

    // Archive. A fresh archive each time: `ar r` would keep members of deleted sources.
    let lib = out_dir.join("libhipfp8_kernels.a");
    let _ = fs::remove_file(&lib);
    let ar = env::var("AR").unwrap_or_else(|_| "ar".into());
    let objs: Vec<PathBuf> = units
        .iter()
        .map(|u| obj_dir.join(obj_name(&u.rel)))
        .collect();
    if !objs.is_empty() {
        let st = Command::new(&ar).arg("crs").arg(&lib).args(&objs).status();
        match st {
            Ok(s) if s.success() => {}
            other => panic!("{ar} crs {} failed: {other:?}", lib.display()),
        }
        println!("cargo::rustc-link-search=native={}", out_dir.display());
        println!("cargo::rustc-link-lib=static=hipfp8_kernels");
    }

    match tc.backend {
        Backend::Rocm => {
            println!("cargo::rustc-link-search=native={}", tc.lib_dir.display());
            println!("cargo::rustc-link-lib=dylib=amdhip64");
            if !is_system_lib_dir(&tc.lib_dir) {
                println!("cargo::rustc-link-arg=-Wl,-rpath,{}", tc.lib_dir.display());
            }
            println!("cargo::rustc-cfg=hipfp8_rocm");
        }
        Backend::Cuda => {
            println!("cargo::rustc-link-search=native={}", tc.lib_dir.display());
            println!("cargo::rustc-link-lib=static=cudart_static");
            for l in ["dl", "rt", "pthread"] {
                println!("cargo::rustc-link-lib=dylib={l}");
            }
            println!("cargo::rustc-cfg=hipfp8_cuda");
        }
    }
    println!("cargo::rustc-link-lib=dylib=stdc++");
    println!("cargo::rustc-cfg=hipfp8_gpu");

    let mut launchers = BTreeSet::new();
    for u in &units {
        launchers.extend(u.launchers.iter().cloned());
    }
    for l in &launchers {
        println!("cargo::rustc-cfg=hipfp8_launcher=\"{l}\"");
    }
    let targets = match tc.backend {
        Backend::Rocm => global_targets.join(";"),
        Backend::Cuda => global_targets
            .iter()
            .map(|t| format!("sm_{t}"))
            .collect::<Vec<_>>()
            .join(";"),
    };
    println!(
        "cargo::rustc-env=HIPFP8_BUILD_BACKEND={}",
        tc.backend.name()
    );
    println!("cargo::rustc-env=HIPFP8_BUILD_TARGETS={targets}");
    println!(
        "cargo::rustc-env=HIPFP8_BUILD_LAUNCHERS={}",
        launchers.iter().cloned().collect::<Vec<_>>().join(",")
    );
    println!("cargo::metadata=backend={}", tc.backend.name());

    if let Some(dir) = env_path("HIPFP8_EXPORT_OBJECTS") {
        export_objects(tc, &dir, &units, &obj_dir);
    }
    eprintln!(
        "hipfp8: {} TUs for {} ({}), {} from the object cache",
        units.len(),
        tc.backend.name(),
        targets,
        hits.load(Ordering::Relaxed)
    );
}

fn is_system_lib_dir(d: &Path) -> bool {
    matches!(
        d.to_str(),
        Some(
            "/usr/lib"
                | "/usr/lib64"
                | "/usr/lib/x86_64-linux-gnu"
                | "/lib"
                | "/lib64"
                | "/lib/x86_64-linux-gnu"
        )
    )
}

/// Decide whether and how a file is compiled for this backend. Ok(None) = not for this
/// backend (silent); Err = wanted but cannot be built here (warned).
fn plan_unit(
    tc: &Toolchain,
    rel: &str,
    path: &Path,
    text: &str,
    global: &[String],
) -> Result<Option<Unit>, String> {
    let comps: Vec<&str> = rel.split('/').collect();
    if comps.contains(&"rocm_only") && tc.backend != Backend::Rocm {
        return Ok(None);
    }
    if comps.contains(&"cuda_only") && tc.backend != Backend::Cuda {
        return Ok(None);
    }
    let mut targets = global.to_vec();
    let mut extra = split_list_ws(&env::var("HIPFP8_EXTRA_FLAGS").unwrap_or_default());
    for (key, value) in directives(text) {
        match key.as_str() {
            "backend" => {
                let want = value.trim();
                if want != "rocm" && want != "cuda" {
                    return Err(format!("unknown backend={want:?} directive"));
                }
                if want != tc.backend.name() {
                    return Ok(None);
                }
            }
            "offload-arch" => {
                if tc.backend == Backend::Rocm {
                    let want = split_list(&value);
                    targets.retain(|t| want.contains(t));
                    if targets.is_empty() {
                        return Ok(None); // per-target TU for a target we don't build
                    }
                }
            }
            "cuda-arch" => {
                if tc.backend == Backend::Cuda {
                    targets = split_list(&value);
                }
            }
            "flags" => extra.extend(split_list_ws(&value)),
            "rocm-flags" if tc.backend == Backend::Rocm => extra.extend(split_list_ws(&value)),
            "cuda-flags" if tc.backend == Backend::Cuda => extra.extend(split_list_ws(&value)),
            "rocm-flags" | "cuda-flags" => {}
            "requires" => {
                for lib in split_list(&value) {
                    match lib.as_str() {
                        "cutlass" => {
                            if tc.backend == Backend::Cuda {
                                extra.extend(cutlass_includes()?);
                            }
                        }
                        "ck" => {
                            if tc.backend == Backend::Rocm {
                                extra.extend(ck_includes(tc)?);
                            }
                        }
                        other => return Err(format!("unknown requires={other:?}")),
                    }
                }
            }
            other => return Err(format!("unknown directive key {other:?}")),
        }
    }
    Ok(Some(Unit {
        rel: rel.to_string(),
        path: path.to_path_buf(),
        targets,
        extra_flags: extra,
        launchers: launchers(text),
    }))
}

fn split_list_ws(v: &str) -> Vec<String> {
    v.split_whitespace().map(String::from).collect()
}

/// `// hipfp8-build: key=value` lines of the leading comment block.
fn directives(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if l.is_empty() {
            continue;
        }
        let Some(c) = l.strip_prefix("//") else { break };
        if let Some(d) = c.trim().strip_prefix("hipfp8-build:") {
            if let Some((k, v)) = d.split_once('=') {
                out.push((k.trim().to_string(), v.trim().to_string()));
            } else {
                out.push((d.trim().to_string(), String::new()));
            }
        }
    }
    out
}

/// Names of functions defined as `HIPFP8_EXTERN <ret> NAME(...) ... {`.
fn launchers(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let src = strip_comments(text);
    let mut rest = src.as_str();
    while let Some(pos) = rest.find("HIPFP8_EXTERN") {
        rest = &rest[pos + "HIPFP8_EXTERN".len()..];
        let Some(paren) = rest.find('(') else { break };
        let head = &rest[..paren];
        if head.contains(';') || head.contains('{') || head.contains('#') {
            continue; // a macro definition or something else, not a function
        }
        let name: String = head
            .trim_end()
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        // Definition, not declaration: after the parameter list the next `{` comes before `;`.
        let after = &rest[paren..];
        let (semi, brace) = (after.find(';'), after.find('{'));
        let defined = match (semi, brace) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(s), Some(b)) => b < s,
        };
        if !name.is_empty() && defined {
            out.push(name);
        }
    }
    out
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && i + 1 < b.len() && b[i + 1] == b'/' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'/' && i + 1 < b.len() && b[i + 1] == b'*' {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
        } else {
            // Copy one UTF-8 character.
            let ch = text[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn cutlass_includes() -> Result<Vec<String>, String> {
    let dir = env_path("HIPFP8_CUTLASS_DIR")
        .or_else(|| env_path("CUTLASS_DIR"))
        .or_else(fetched_cutlass)
        .ok_or(
            "needs CUTLASS: set HIPFP8_CUTLASS_DIR (a CUTLASS checkout, or the nvidia-cutlass wheel's \
             cutlass_library/source), or run scripts/fetch-cutlass.sh",
        )?;
    let mut incs = Vec::new();
    for sub in ["include", "tools/util/include", "."] {
        let d = dir.join(sub);
        if d.join("cutlass").is_dir() {
            incs.push("-isystem".to_string());
            incs.push(d.display().to_string());
        }
    }
    if incs.is_empty() {
        return Err(format!(
            "no cutlass/ headers under {} (include/ or .)",
            dir.display()
        ));
    }
    Ok(incs)
}

/// The newest `.toolchains/cutlass/<version>/` that scripts/fetch-cutlass.sh unpacked.
fn fetched_cutlass() -> Option<PathBuf> {
    let base = PathBuf::from(env::var("CARGO_MANIFEST_DIR").ok()?).join(".toolchains/cutlass");
    println!("cargo::rerun-if-changed={}", base.display());
    let mut vers: Vec<PathBuf> = fs::read_dir(&base)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("include/cutlass/cutlass.h").is_file())
        .collect();
    vers.sort();
    vers.pop()
}

fn ck_includes(tc: &Toolchain) -> Result<Vec<String>, String> {
    if let Some(d) = env_path("HIPFP8_CK_DIR") {
        let inc = if d.join("include/ck/ck.hpp").exists() {
            d.join("include")
        } else {
            d
        };
        if !inc.join("ck/ck.hpp").exists() {
            return Err(format!("HIPFP8_CK_DIR={} has no ck/ck.hpp", inc.display()));
        }
        return Ok(vec!["-isystem".into(), inc.display().to_string()]);
    }
    // hipcc searches <rocm>/include itself; only check the headers are there.
    if tc.root.join("include/ck/ck.hpp").exists() {
        Ok(Vec::new())
    } else {
        Err(format!(
            "needs Composable Kernel: no ck/ck.hpp under {}/include (set HIPFP8_CK_DIR)",
            tc.root.display()
        ))
    }
}

fn obj_name(rel: &str) -> String {
    format!("{}.o", rel.trim_end_matches(".hip").replace('/', "__"))
}

fn compile_args(tc: &Toolchain, hip_dir: &Path, u: &Unit) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    match tc.backend {
        Backend::Rocm => {
            a.extend(["-c", "-x", "hip", "-std=c++17", "-O3", "-fPIC", "-Wall"].map(String::from));
            for t in &u.targets {
                a.push(format!("--offload-arch={t}"));
            }
        }
        Backend::Cuda => {
            a.extend(
                [
                    "-c",
                    "-x",
                    "cu",
                    "-std=c++17",
                    "-O3",
                    "-Xcompiler",
                    "-fPIC,-Wall",
                    "-lineinfo",
                ]
                .map(String::from),
            );
            for t in &u.targets {
                a.push("-gencode".into());
                a.push(format!("arch=compute_{t},code=[sm_{t},compute_{t}]"));
            }
        }
    }
    a.push(format!("-I{}", hip_dir.display()));
    a.extend(u.extra_flags.iter().cloned());
    a
}

/// Compile one unit (or take it from the cache). Returns whether it was a cache hit.
fn compile_unit(
    tc: &Toolchain,
    hip_dir: &Path,
    u: &Unit,
    obj_dir: &Path,
    log_dir: &Path,
    cache: Option<&Path>,
    header_digest: &str,
) -> Result<bool, String> {
    let args = compile_args(tc, hip_dir, u);
    let obj = obj_dir.join(obj_name(&u.rel));
    let src = fs::read(&u.path).map_err(|e| format!("read {}: {e}", u.path.display()))?;
    let mut key = Fnv128::new();
    key.str("hipfp8-obj-v1");
    key.str(tc.backend.name());
    key.str(&tc.compiler.display().to_string());
    key.str(&tc.identity);
    key.str(&env::var("NVCC_CCBIN").unwrap_or_default());
    for a in &args {
        key.str(a);
    }
    key.str(&u.rel);
    key.bytes(&src);
    key.str(header_digest);
    let key = key.hex();

    if let Some(c) = cache {
        let cached = c.join(format!("{key}.o"));
        if cached.is_file() && fs::copy(&cached, &obj).is_ok() {
            return Ok(true);
        }
    }

    let mut cmd = Command::new(&tc.compiler);
    cmd.args(&args).arg(&u.path).arg("-o").arg(&obj);
    let t0 = std::time::Instant::now();
    let out = cmd
        .output()
        .map_err(|e| format!("hipfp8: cannot run {}: {e}", tc.compiler.display()))?;
    let secs = t0.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let log = log_dir.join(format!("{}.log", obj_name(&u.rel)));
    let _ = fs::write(
        &log,
        format!(
            "{:?}\n{}\n{}",
            cmd,
            String::from_utf8_lossy(&out.stdout),
            stderr
        ),
    );
    if !out.status.success() {
        return Err(format!(
            "hipfp8: compiling hip/{} failed ({}):\n{:?}\n{}{}",
            u.rel,
            out.status,
            cmd,
            String::from_utf8_lossy(&out.stdout),
            stderr
        ));
    }
    let warnings = stderr.lines().filter(|l| l.contains("warning")).count();
    if warnings > 0 {
        let first: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("warning"))
            .take(3)
            .collect();
        warn(&format!(
            "hip/{}: {warnings} compiler warning(s), first: {} (full log {})",
            u.rel,
            first.join(" | "),
            log.display()
        ));
    }
    eprintln!(
        "hipfp8: compiled hip/{} for {} in {secs:.1}s",
        u.rel,
        u.targets.join(";")
    );
    if let Some(c) = cache {
        // Write-then-rename so concurrent builds never see a half-written object.
        let tmp = c.join(format!("{key}.o.tmp{}", std::process::id()));
        if fs::copy(&obj, &tmp).is_ok() && fs::rename(&tmp, c.join(format!("{key}.o"))).is_err() {
            let _ = fs::remove_file(&tmp);
        }
    }
    Ok(false)
}

fn cache_dir() -> Option<PathBuf> {
    let v = env::var("HIPFP8_OBJ_CACHE").unwrap_or_default();
    let dir = match v.as_str() {
        "0" | "off" | "no" | "false" => return None,
        "" => env_path("XDG_CACHE_HOME")
            .or_else(|| env_path("HOME").map(|h| h.join(".cache")))?
            .join("hipfp8/objects"),
        d => PathBuf::from(d),
    };
    fs::create_dir_all(&dir).ok()?;
    Some(dir)
}

fn export_objects(tc: &Toolchain, dir: &Path, units: &[Unit], obj_dir: &Path) {
    let d = dir.join(tc.backend.name());
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap_or_else(|e| panic!("HIPFP8_EXPORT_OBJECTS {}: {e}", d.display()));
    let mut manifest = String::from("# source\tobject\ttargets\tlaunchers\n");
    for u in units {
        let name = obj_name(&u.rel);
        fs::copy(obj_dir.join(&name), d.join(&name)).unwrap();
        let _ = writeln!(
            manifest,
            "hip/{}\t{}\t{}\t{}",
            u.rel,
            name,
            u.targets.join(";"),
            u.launchers.join(",")
        );
    }
    fs::write(d.join("manifest.tsv"), manifest).unwrap();
}

/// FNV-1a, 128-bit: a dependency-free content hash for the object cache key.
struct Fnv128(u128);

impl Fnv128 {
    fn new() -> Self {
        Fnv128(0x6c62272e07bb014262b821756295c58d)
    }
    fn bytes(&mut self, b: &[u8]) {
        // Length first so that ("ab","c") and ("a","bc") hash differently.
        for x in (b.len() as u64).to_le_bytes().iter().chain(b) {
            self.0 ^= *x as u128;
            self.0 = self.0.wrapping_mul(0x0000000001000000000000000000013B);
        }
    }
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    fn hex(&self) -> String {
        format!("{:032x}", self.0)
    }
}
