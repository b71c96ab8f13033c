//! Builds every C and C++ program in `ffi_examples/` with `-std=c11` / `-std=c++17 -Wall
//! -Wextra -Wpedantic -Werror` against BOTH the static and the shared library and runs each
//! on the CPU backend; every program checks its own results and exits non-zero on a
//! mismatch. Also installs the library with `scripts/install-c-lib.sh` and builds an example
//! through the generated pkg-config files.
//!
//! The libraries: the crate declares `staticlib` and `cdylib`, so the library build that
//! `cargo test` does for these tests also leaves `libhipfp8.a` and `libhipfp8.so` in
//! `target/<profile>/deps`, next to this test binary: nothing else needs building. If they
//! are missing (an unusual build layout), `cargo build --lib` builds them into a private
//! target directory. `HIPFP8_LIB_DIR` points the tests at other copies (a test bundle).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use support::*;

/// What a static link of the Rust staticlib needs from the system: rustc's
/// `--print native-static-libs` for x86_64-unknown-linux-gnu, plus the C++ runtime of the
/// kernel launchers in a GPU build and libamdhip64 in a ROCm one (cudart is bundled in the
/// archive). HIPFP8_NATIVE_STATIC_LIBS replaces the list.
fn native_static_libs() -> Vec<String> {
    if let Ok(v) = std::env::var("HIPFP8_NATIVE_STATIC_LIBS") {
        return v.split_whitespace().map(String::from).collect();
    }
    let mut libs: Vec<String> = Vec::new();
    match hipfp8::device::built_backend() {
        "cuda" => libs.push("-lstdc++".into()),
        "rocm" => {
            if let Ok(d) = std::env::var("HIPFP8_ROCM_LIB_DIR") {
                libs.push(format!("-L{d}"));
                libs.push(format!("-Wl,-rpath,{d}"));
            }
            libs.extend(["-lamdhip64".into(), "-lstdc++".into()]);
        }
        _ => {}
    }
    libs.extend(
        "-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
            .split(' ')
            .map(String::from),
    );
    libs
}

/// Directory holding libhipfp8.a and libhipfp8.so, or None (after printing why) when this
/// test binary runs outside cargo (a GPU test bundle) and neither is at hand.
fn lib_dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let has_both = |d: &Path| exists(&d.join("libhipfp8.a")) && exists(&d.join("libhipfp8.so"));
        // An explicit location (e.g. a test bundle) wins.
        if let Some(d) = std::env::var_os("HIPFP8_LIB_DIR").map(PathBuf::from) {
            assert!(
                has_both(&d),
                "HIPFP8_LIB_DIR={} has no libhipfp8.a and libhipfp8.so",
                d.display()
            );
            return Some(d);
        }
        // deps/ first: it is rewritten by every library build of this test run.
        for d in [deps_dir(), profile_dir()] {
            if has_both(&d) {
                return Some(d);
            }
        }
        if !under_cargo() {
            return None;
        }
        let target = profile_dir().join("ffi-examples-target");
        eprintln!(
            "libhipfp8.a/.so not next to the test binary: building them into {}",
            target.display()
        );
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        run(Command::new(cargo)
            .args(["build", "--lib", "--manifest-path"])
            .arg(root().join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&target));
        let d = target.join("debug");
        assert!(
            has_both(&d),
            "cargo build --lib did not produce libhipfp8.a and libhipfp8.so in {}",
            d.display()
        );
        Some(d)
    })
    .as_deref()
}

/// The compilers and libraries a test needs, or false after printing why it skips (only
/// possible outside cargo; see `have_tool`).
fn ready(test: &str, tools: &[&str]) -> bool {
    if !tools.iter().all(|t| have_tool(test, t)) {
        return false;
    }
    if lib_dir().is_none() {
        println!(
            "HIPFP8_SKIP {test}: no libhipfp8.a/.so next to the test binary (set HIPFP8_LIB_DIR)"
        );
        return false;
    }
    true
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Link {
    Static,
    Shared,
}

/// Compile and link one example; returns the executable.
fn build(src: &Path, link: Link) -> PathBuf {
    let stem = src.file_stem().unwrap().to_str().unwrap();
    let cpp = src.extension().is_some_and(|e| e == "cpp");
    let dir = scratch(&format!("examples-{stem}-{link:?}"));
    let exe = dir.join(stem);
    let mut cmd = Command::new(if cpp { cxx() } else { cc() });
    cmd.arg(if cpp { "-std=c++17" } else { "-std=c11" })
        .args(WARN_FLAGS)
        .arg("-I")
        .arg(root().join("include"))
        .arg("-I")
        .arg(root().join("ffi_examples"))
        .arg(src)
        .arg("-o")
        .arg(&exe);
    let lib = lib_dir().unwrap();
    match link {
        // The archive by path, so the linker cannot pick the .so instead.
        Link::Static => cmd.arg(lib.join("libhipfp8.a")).args(native_static_libs()),
        Link::Shared => cmd
            .arg("-L")
            .arg(soname_link(lib))
            .arg("-l:libhipfp8.so")
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-lm"),
    };
    run(&mut cmd);
    exe
}

/// The dynamic dependencies of an executable, from its ELF dynamic section.
fn needed(exe: &Path) -> String {
    let out = Command::new("readelf").arg("-d").arg(exe).output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        _ => String::new(), // no binutils: the link mode is then not double-checked
    }
}

fn run_example(exe: &Path) -> String {
    // cargo puts target/<profile> on LD_LIBRARY_PATH, which outranks the executable's RUNPATH:
    // a stale libhipfp8.so there (from an earlier `cargo build`) would be loaded instead of
    // the one this test linked against. Point the loader at the linked library explicitly.
    let out = run(Command::new(exe)
        .env("RAYON_NUM_THREADS", "2")
        .env("LD_LIBRARY_PATH", lib_dir().unwrap()));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn examples() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("ffi_examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "c" || e == "cpp"))
        .collect();
    v.sort();
    v
}

fn build_and_run(name: &str) {
    let src = examples()
        .into_iter()
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with(name))
        .unwrap_or_else(|| panic!("no example {name}* in ffi_examples/"));
    let cpp = src.extension().is_some_and(|e| e == "cpp");
    if !ready(name, &[if cpp { cxx() } else { cc() }.as_str()]) {
        return;
    }
    for link in [Link::Static, Link::Shared] {
        let exe = build(&src, link);
        let deps = needed(&exe);
        if !deps.is_empty() {
            assert_eq!(
                deps.contains("libhipfp8.so"),
                link == Link::Shared,
                "{link:?} build of {name}: unexpected dynamic dependencies:\n{deps}"
            );
        }
        let out = run_example(&exe);
        print!("[{link:?}] {out}");
        assert!(
            out.contains(": OK"),
            "{name} ({link:?}) did not report OK:\n{out}"
        );
    }
}

#[test]
fn example_01_quantize_rowwise() {
    build_and_run("01_");
}

#[test]
fn example_02_per_group_colwise() {
    build_and_run("02_");
}

#[test]
fn example_03_cast_transpose() {
    build_and_run("03_");
}

#[test]
fn example_04_mxfp8() {
    build_and_run("04_");
}

#[test]
fn example_05_grouped_gemm() {
    build_and_run("05_");
}

#[test]
fn example_06_moe_experts_recipe() {
    build_and_run("06_");
}

/// Each numbered example has a test above (a new example without one fails here), and both
/// languages are represented.
#[test]
fn every_example_is_tested() {
    let ex = examples();
    let names: Vec<String> = ex
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for (i, n) in names.iter().enumerate() {
        assert!(
            n.starts_with(&format!("{:02}_", i + 1)),
            "examples must be numbered 01_.. without gaps: {names:?}"
        );
    }
    assert_eq!(names.len(), 6, "update the example_* tests: {names:?}");
    assert!(names.iter().any(|n| n.ends_with(".c")) && names.iter().any(|n| n.ends_with(".cpp")));
}

// ---- pkg-config ---------------------------------------------------------------------------

/// `pkg-config --cflags --libs NAME`, or the same computed from the .pc file when pkg-config
/// is not installed (variables, then Cflags and Libs).
fn pkg_config(pc_dir: &Path, name: &str) -> Vec<String> {
    let out = Command::new("pkg-config")
        .args(["--cflags", "--libs", name])
        .env("PKG_CONFIG_PATH", pc_dir)
        .output();
    if let Ok(o) = out {
        assert!(
            o.status.success(),
            "pkg-config {name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        return String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .map(String::from)
            .collect();
    }
    eprintln!("pkg-config is not installed: evaluating {name}.pc directly");
    let text = std::fs::read_to_string(pc_dir.join(format!("{name}.pc"))).unwrap();
    let mut vars: Vec<(String, String)> = Vec::new();
    let subst = |s: &str, vars: &[(String, String)]| {
        let mut s = s.to_string();
        for _ in 0..8 {
            for (k, v) in vars {
                s = s.replace(&format!("${{{k}}}"), v);
            }
        }
        s
    };
    let (mut cflags, mut libs) = (String::new(), String::new());
    for line in text.lines() {
        if let Some((k, v)) = line
            .split_once('=')
            .filter(|(k, _)| !k.contains(':') && !k.contains(' '))
        {
            let v = subst(v.trim(), &vars);
            vars.push((k.trim().to_string(), v));
        } else if let Some(v) = line.strip_prefix("Cflags:") {
            cflags = subst(v, &vars);
        } else if let Some(v) = line.strip_prefix("Libs:") {
            libs = subst(v, &vars);
        }
    }
    format!("{cflags} {libs}")
        .split_whitespace()
        .map(String::from)
        .collect()
}

#[test]
fn install_script_and_pkg_config() {
    if !ready("install_script_and_pkg_config", &[cc().as_str()]) {
        return;
    }
    let dir = scratch("install");
    let prefix = dir.join("prefix");
    run(Command::new("sh")
        .arg(root().join("scripts/install-c-lib.sh"))
        .arg("--prefix")
        .arg(&prefix)
        .arg("--from")
        .arg(lib_dir().unwrap()));
    let pc_dir = prefix.join("lib/pkgconfig");
    let pc = std::fs::read_to_string(pc_dir.join("hipfp8.pc")).unwrap();
    assert!(
        pc.contains(&format!("Version: {}", env!("CARGO_PKG_VERSION"))),
        "{pc}"
    );
    assert!(exists(&prefix.join("include/hipfp8.h")));

    let src = root().join("ffi_examples/01_quantize_rowwise.c");
    for (name, shared) in [("hipfp8", true), ("hipfp8-static", false)] {
        let exe = dir.join(format!("ex01-{name}"));
        let mut cmd = Command::new(cc());
        cmd.arg("-std=c11")
            .args(WARN_FLAGS)
            .arg("-I")
            .arg(root().join("ffi_examples"))
            .arg(&src);
        cmd.args(pkg_config(&pc_dir, name)).arg("-o").arg(&exe);
        if shared {
            cmd.arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()));
        }
        run(&mut cmd);
        let deps = needed(&exe);
        if !deps.is_empty() {
            assert_eq!(deps.contains("libhipfp8.so"), shared, "{name}: {deps}");
        }
        let out = run_example(&exe);
        assert!(out.contains("01_quantize_rowwise: OK"), "{name}: {out}");
    }
}

// ---- Python (ctypes on torch tensors) -------------------------------------------------------

/// Runs `ffi_examples/python/quantize_rowwise_torch.py` against the shared library. The
/// example needs torch and a GPU backend; elsewhere it prints why it skips and exits 0, which
/// this test shows but does not count as a pass of the GPU path.
#[test]
fn python_ctypes_example() {
    let script = root().join("ffi_examples/python/quantize_rowwise_torch.py");
    assert!(exists(&script));
    let lib = match lib_dir() {
        Some(d) => d.join("libhipfp8.so"),
        // A GPU test bundle carries the cdylib in ../lib/.
        None => deps_dir().join("../lib/libhipfp8.so"),
    };
    let Ok(out) = Command::new("python3")
        .arg(&script)
        .env("HIPFP8_LIB", &lib)
        .output()
    else {
        println!("HIPFP8_SKIP python_ctypes_example: python3 is not installed");
        return;
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    print!("{text}");
    assert!(out.status.success(), "the Python example failed:\n{text}");
    assert!(text.contains("SKIP") || text.contains(": OK"), "{text}");
}
