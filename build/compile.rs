//! Compiling the translation units, in parallel, through the content-keyed object cache.
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::plan::Unit;
use crate::toolchain::{Backend, Toolchain, env_path};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::parse::quoted_includes;
use crate::warn;

/// Digest of every file under `hip_dir` that `unit` includes, directly or through other
/// headers (`#include "..."`, resolved against the including file's folder, then `hip_dir`),
/// in the order first reached: a header change invalidates exactly the objects that see it.
/// Includes that resolve outside `hip_dir` are the toolchain's (CUTLASS, CK), already part of
/// the key through the toolchain identity.
pub fn include_digest(hip_dir: &Path, unit: &Path) -> String {
    let root = hip_dir
        .canonicalize()
        .unwrap_or_else(|_| hip_dir.to_path_buf());
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut stack = vec![unit.to_path_buf()];
    let mut h = Fnv128::new();
    while let Some(f) = stack.pop() {
        let text = fs::read_to_string(&f).unwrap_or_default();
        let dir = f.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut next = Vec::new();
        for inc in quoted_includes(&text) {
            let found = [dir.join(&inc), root.join(&inc)]
                .into_iter()
                .filter_map(|p| p.canonicalize().ok())
                .find(|p| p.starts_with(&root) && p.is_file());
            if let Some(p) = found {
                if !seen.contains(&p) {
                    seen.push(p.clone());
                    h.str(&p.strip_prefix(&root).unwrap_or(&p).to_string_lossy());
                    h.bytes(&fs::read(&p).unwrap_or_default());
                    next.push(p);
                }
            }
        }
        // depth-first, in source order
        stack.extend(next.into_iter().rev());
    }
    h.hex()
}

pub fn obj_name(rel: &str) -> String {
    format!("{}.o", rel.trim_end_matches(".hip").replace('/', "__"))
}

pub fn compile_args(tc: &Toolchain, hip_dir: &Path, u: &Unit) -> Vec<String> {
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
pub fn compile_unit(
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
    key.str("hipfp8-obj-v2");
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

pub fn cache_dir() -> Option<PathBuf> {
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

pub fn export_objects(tc: &Toolchain, dir: &Path, units: &[Unit], obj_dir: &Path) {
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
pub struct Fnv128(u128);

impl Fnv128 {
    pub fn new() -> Self {
        Fnv128(0x6c62272e07bb014262b821756295c58d)
    }
    pub fn bytes(&mut self, b: &[u8]) {
        // Length first so that ("ab","c") and ("a","bc") hash differently.
        for x in (b.len() as u64).to_le_bytes().iter().chain(b) {
            self.0 ^= *x as u128;
            self.0 = self.0.wrapping_mul(0x0000000001000000000000000000013B);
        }
    }
    pub fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    pub fn hex(&self) -> String {
        format!("{:032x}", self.0)
    }
}

/// Compile every unit (`jobs` at a time; `HIPFP8_JOBS`, else cargo's NUM_JOBS) into
/// `obj_dir`, taking objects from the cache where the key (compiler identity, arguments,
/// source, digest of the hip/ headers the unit includes) matches. Returns the number of cache hits;
/// panics naming every unit that failed.
pub fn compile_all(
    tc: &Toolchain,
    hip_dir: &Path,
    units: &[Unit],
    obj_dir: &Path,
    log_dir: &Path,
) -> usize {
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
                        obj_dir,
                        log_dir,
                        cache_dir.as_deref(),
                        &include_digest(hip_dir, &u.path),
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

    hits.load(Ordering::Relaxed)
}
