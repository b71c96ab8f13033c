//! Linking: the static archive of the kernel objects, the runtime library of the backend,
//! and what the Rust side sees (`cfg(hipfp8_gpu)`, `cfg(hipfp8_launcher = "NAME")`, the
//! HIPFP8_BUILD_* environment).

use std::collections::BTreeSet;
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::compile::obj_name;
use crate::plan::Unit;
use crate::toolchain::{Backend, Toolchain};

/// Archive the objects, emit the link directives and cfgs; returns the targets string
/// (`gfx942;gfx950`, `sm_90`).
pub fn link(
    tc: &Toolchain,
    out_dir: &Path,
    obj_dir: &Path,
    units: &[Unit],
    global_targets: &[String],
) -> String {
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
    for u in units {
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

    targets
}

pub fn is_system_lib_dir(d: &Path) -> bool {
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
