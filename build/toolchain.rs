//! Toolchain discovery: hipcc (ROCm) or nvcc (CUDA), their library directories, the
//! identity string that keys the object cache, and the CUTLASS / Composable Kernel include
//! directories a translation unit may require.
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::parse::split_list;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Backend {
    Rocm,
    Cuda,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Rocm => "rocm",
            Backend::Cuda => "cuda",
        }
    }
}

/// A usable GPU compiler plus what the final link needs.
pub struct Toolchain {
    pub backend: Backend,
    pub compiler: PathBuf,
    /// ROCm root (include/ck lookup) or CUDA root.
    pub root: PathBuf,
    /// Directory holding libamdhip64.so / libcudart_static.a.
    pub lib_dir: PathBuf,
    /// `compiler --version` output: part of the object cache key.
    pub identity: String,
}

pub fn list_env(var: &str, default: &str) -> Vec<String> {
    let v = env::var(var).unwrap_or_default();
    let v = if v.trim().is_empty() {
        default.to_string()
    } else {
        v
    };
    split_list(&v)
}

pub fn env_path(var: &str) -> Option<PathBuf> {
    env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

pub fn which(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

pub fn run_capture(cmd: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

pub fn find_rocm() -> Result<Toolchain, String> {
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

pub fn find_cuda() -> Result<Toolchain, String> {
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

pub fn cutlass_includes() -> Result<Vec<String>, String> {
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
pub fn fetched_cutlass() -> Option<PathBuf> {
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

pub fn ck_includes(tc: &Toolchain) -> Result<Vec<String>, String> {
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
