//! The per-file plan: which `hip/**/*.hip` files are translation units for this backend,
//! with which targets, flags and launchers (path components `rocm_only` / `cuda_only`, the
//! `// hipfp8-build:` directives).
use std::env;
use std::fs;
use std::path::{Path, PathBuf};

use crate::parse::{directives, launchers, split_list, split_list_ws};
use crate::toolchain::{Backend, Toolchain, ck_includes, cutlass_includes};

/// One translation unit and its resolved compile settings.
pub struct Unit {
    /// Path relative to hip/, with '/' separators.
    pub rel: String,
    pub path: PathBuf,
    /// Offload targets (gfx942...) or CUDA arch entries (90, 90a...).
    pub targets: Vec<String>,
    pub extra_flags: Vec<String>,
    pub launchers: Vec<String>,
}

pub fn walk(dir: &Path, sources: &mut Vec<PathBuf>, headers: &mut Vec<PathBuf>) {
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

/// Decide whether and how a file is compiled for this backend. Ok(None) = not for this
/// backend (silent); Err = wanted but cannot be built here (warned).
pub fn plan_unit(
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
