//! The launcher prototypes are written once, in `hip/launchers.h` and the family headers it
//! includes (`hip/runtime.h`, `hip/quant/launchers.h`, `hip/grouped_gemm/launchers.h`):
//! - every `.hip` file includes its family's header, so the C++ compiler checks each
//!   definition's types against its prototype (`extern "C"` functions cannot overload: a
//!   mismatch is a compile error, shown here on the host compiler);
//! - the definitions also use the prototypes' parameter NAMES (a swapped `(m, k)` has the
//!   right types: this test compares the names);
//! - `src/sys/launchers.rs` is bindgen's output for the headers, turned into `foreign!`
//!   entries (each a real declaration when build.rs compiled the symbol, else a stub). It
//!   is committed; [`sys_launchers_are_bindgen_output`] regenerates it and fails on any
//!   difference (`BLESS=1 cargo test --test sys_bindings` rewrites it). bindgen loads
//!   libclang at run time: without it the test prints a skip line, unless
//!   `HIPFP8_REQUIRE_BINDGEN=1` (set by .ci/run, which installs libclang) makes it a failure.

mod support;

use std::collections::BTreeMap;
use std::process::Command;

use support::*;

const GENERATED: &str = "src/sys/launchers.rs";

/// bindgen's Rust for hip/launchers.h, or None when libclang cannot be loaded.
fn bindgen_output() -> Option<String> {
    let header = root().join("hip/launchers.h");
    let run = move || {
        bindgen::Builder::default()
            .header(header.to_str().unwrap())
            .clang_args([
                "-x",
                "c",
                "-std=c11",
                "-DHIPFP8_BINDGEN",
                "-Wno-pragma-once-outside-header",
            ])
            .allowlist_function("hipfp8_.*")
            .allowlist_type("hipfp8_device_props")
            .blocklist_type("hipStream_t")
            .blocklist_type("hipEvent_t")
            .ctypes_prefix("::std::ffi")
            .merge_extern_blocks(true)
            .sort_semantically(false)
            .formatter(bindgen::Formatter::Prettyplease)
            .generate()
            .map(|b| b.to_string())
    };
    // Without libclang, bindgen panics when it tries to load it.
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(run);
    std::panic::set_hook(prev);
    match r {
        Ok(Ok(s)) => Some(s),
        Ok(Err(e)) => panic!("bindgen failed on hip/launchers.h: {e}"),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let why = format!("bindgen could not run (libclang not found?): {msg}");
            assert!(
                std::env::var("HIPFP8_REQUIRE_BINDGEN").as_deref() != Ok("1"),
                "HIPFP8_REQUIRE_BINDGEN=1 but {why} (Debian: apt-get install libclang1-14 \
                 libclang-common-14-dev)"
            );
            println!("HIPFP8_SKIP sys_launchers_are_bindgen_output: {why}");
            None
        }
    }
}

/// Collapse runs of whitespace into one space.
fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One `foreign!` entry: `"name" => pub fn name(args) -> c_int;`, wrapped at 100 columns.
fn entry(docs: &[String], name: &str, params: &str) -> String {
    let mut out = String::new();
    for d in docs {
        out.push_str(&format!("    {}\n", d.trim_end()));
    }
    let one = format!("    \"{name}\" => pub fn {name}({params}) -> c_int;");
    if one.len() <= 100 {
        out.push_str(&one);
        out.push('\n');
        return out;
    }
    out.push_str(&format!("    \"{name}\" => pub fn {name}(\n"));
    let mut line = String::from("       ");
    for p in params.split(", ") {
        if line.len() + p.len() + 2 > 100 {
            out.push_str(line.trim_end());
            out.push('\n');
            line = String::from("       ");
        }
        line.push(' ');
        line.push_str(p);
        line.push(',');
    }
    out.push_str(line.trim_end_matches(','));
    out.push_str(") -> c_int;\n");
    out
}

/// The committed form of bindgen's output: its types as they are, its functions as
/// `foreign!` entries (src/sys.rs defines the macro and the handle types).
fn render(bindgen: &str) -> String {
    let text = bindgen
        .replace("::std::ffi::", "")
        .replace("::std::os::raw::", "");
    let mut types = String::new();
    let mut fns = String::new();
    let mut docs: Vec<String> = Vec::new();
    let mut in_extern = false;
    let mut pending: Option<String> = None;
    let mut block: Option<String> = None;
    for line in text.lines() {
        let t = line.trim();
        // prettyplease prints a multi-line doc comment as one `/** ... */` block.
        if in_extern && (block.is_some() || t.starts_with("/**")) {
            let b = block.get_or_insert_with(String::new);
            b.push_str(line.trim_start_matches(' '));
            b.push('\n');
            if t.ends_with("*/") {
                let b = block.take().unwrap();
                let inner = b
                    .trim_end()
                    .trim_start_matches("/**")
                    .trim_end_matches("*/");
                docs.extend(inner.lines().map(|l| format!("///{}", l.trim_end())));
            }
            continue;
        }
        if !in_extern {
            if t == "unsafe extern \"C\" {" || t == "extern \"C\" {" {
                in_extern = true;
            } else if !t.starts_with("/* automatically generated") {
                types.push_str(line);
                types.push('\n');
            }
            continue;
        }
        if let Some(p) = pending.as_mut() {
            p.push(' ');
            p.push_str(t);
        } else if t == "}" {
            in_extern = false;
            continue;
        } else if t.starts_with("///") {
            docs.push(t.to_string());
            continue;
        } else if let Some(lit) = t.strip_prefix("#[doc = \"") {
            let lit = lit.strip_suffix("\"]").expect("one-line doc attribute");
            docs.push(format!(
                "///{}",
                lit.replace("\\\"", "\"").replace("\\\\", "\\")
            ));
            continue;
        } else if t.starts_with("pub fn ") {
            pending = Some(t.to_string());
        } else if !t.is_empty() {
            panic!("unexpected line in bindgen's extern block: {t}");
        }
        if pending.as_ref().is_some_and(|p| p.ends_with(';')) {
            let p = squash(&pending.take().unwrap());
            let rest = p.strip_prefix("pub fn ").unwrap();
            let (name, rest) = rest.split_once('(').unwrap();
            let (params, ret) = rest.rsplit_once(')').unwrap();
            assert_eq!(
                ret.trim(),
                "-> c_int;",
                "{name}: every launcher returns int"
            );
            let params = squash(params.trim().trim_end_matches(','));
            let params = params.replace("( ", "(").replace(" )", ")");
            fns.push_str(&entry(&docs, name, &params));
            docs.clear();
        }
    }
    let used: Vec<&str> = ["c_char", "c_int", "c_uint", "c_ulonglong", "c_void"]
        .into_iter()
        .filter(|c| c == &"c_int" || fns.contains(c) || types.contains(c))
        .collect();
    format!(
        "// GENERATED from hip/launchers.h by bindgen (tests/sys_bindings.rs): do not edit.\n\
         // `BLESS=1 cargo test --test sys_bindings` rewrites this file.\n\
         #![allow(non_snake_case)] // parameter names are the C prototypes' (M, N, K)\n\
         \n\
         use std::ffi::{{{}}};\n\
         \n\
         use super::{{NOT_BUILT, hipEvent_t, hipStream_t}};\n\
         \n\
         {}\n\
         foreign! {{\n{}}}\n",
        used.join(", "),
        types.trim(),
        fns
    )
}

#[test]
fn sys_launchers_are_bindgen_output() {
    let Some(raw) = bindgen_output() else { return };
    let fresh = render(&raw);
    let path = root().join(GENERATED);
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, &fresh).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != fresh {
        let diff_line = committed
            .lines()
            .zip(fresh.lines())
            .position(|(a, b)| a != b)
            .map_or(committed.lines().count().min(fresh.lines().count()), |i| i);
        panic!(
            "{GENERATED} is stale against hip/launchers.h (first difference at line {}): run \
             `BLESS=1 cargo test --test sys_bindings` and commit the result",
            diff_line + 1
        );
    }
}

/// `(return + name, parameter list)` of every prototype or definition in `text` that starts
/// with `marker` (`HIPFP8_DECL` for the headers, `HIPFP8_EXTERN` for definitions).
fn signatures(text: &str, marker: &str) -> BTreeMap<String, String> {
    let text: String = text
        .lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = BTreeMap::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find(marker) {
        rest = &rest[i + marker.len()..];
        let Some(open) = rest.find('(') else { break };
        let head = squash(&rest[..open]);
        if head.contains('#') || head.contains(';') || head.is_empty() {
            continue; // the macro definition itself
        }
        let close = open + rest[open..].find(')').unwrap();
        let name = head.rsplit(' ').next().unwrap().to_string();
        out.insert(name, squash(&rest[open + 1..close]).replace(" *", "*"));
    }
    out
}

fn files_under(dir: &std::path::Path, ext: &str, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files_under(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

/// Every definition has a prototype with the same parameter types AND names, and every
/// prototype a definition; every defining file includes a launcher header.
#[test]
fn definitions_match_prototypes_by_name() {
    let hip = root().join("hip");
    let mut headers = Vec::new();
    files_under(&hip, "h", &mut headers);
    let mut protos = BTreeMap::new();
    for h in &headers {
        protos.extend(signatures(
            &std::fs::read_to_string(h).unwrap(),
            "HIPFP8_DECL",
        ));
    }
    assert!(protos.len() > 50, "only {} prototypes found", protos.len());
    let mut sources = Vec::new();
    files_under(&hip, "hip", &mut sources);
    let mut defined = BTreeMap::new();
    let mut bad = Vec::new();
    for s in &sources {
        let text = std::fs::read_to_string(s).unwrap();
        let defs = signatures(&text, "HIPFP8_EXTERN");
        if !defs.is_empty() && !text.contains("launchers.h\"") && !text.contains("runtime.h\"") {
            bad.push(format!(
                "{s:?} defines launchers but includes no launcher header"
            ));
        }
        for (name, params) in defs {
            match protos.get(&name) {
                None => bad.push(format!("{name} ({s:?}) has no prototype in hip/**/*.h")),
                Some(p) if *p != params => bad.push(format!(
                    "{name} ({s:?}):\n  definition ({params})\n  prototype  ({p})"
                )),
                Some(_) => {}
            }
            defined.insert(name, ());
        }
    }
    for name in protos.keys() {
        if !defined.contains_key(name) {
            bad.push(format!(
                "prototype {name} has no definition in hip/**/*.hip"
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn signature_parser_reads_names_and_types() {
    let s = signatures(
        "#define HIPFP8_EXTERN extern \"C\"\n// HIPFP8_EXTERN int commented(int a);\n\
         HIPFP8_EXTERN int f(const void* x, int64_t m,\n    int64_t k) noexcept {",
        "HIPFP8_EXTERN",
    );
    assert_eq!(s.len(), 1);
    assert_eq!(s["f"], "const void* x, int64_t m, int64_t k");
}

/// The headers compile on their own as C11 and C++17 with -Werror (bindgen's view and the
/// kernels' view), and a definition that differs from its prototype in one parameter type
/// does NOT compile: the check the .hip files get from including their header.
#[test]
fn headers_compile_and_mismatches_do_not() {
    let hip = root().join("hip");
    let compile = |compiler: &str, std: &str, file: &str, body: &str| -> bool {
        let dir = scratch(&format!("sys-bindings-{file}"));
        let src = dir.join(file);
        std::fs::write(&src, body).unwrap();
        Command::new(compiler)
            .arg(std)
            .args(WARN_FLAGS)
            .args(["-fsyntax-only", "-DHIPFP8_BINDGEN", "-I"])
            .arg(&hip)
            .arg(&src)
            .output()
            .expect("compiler runs")
            .status
            .success()
    };
    if !have_tool("launcher headers compile", &cc()) || !have_tool("launcher headers", &cxx()) {
        return;
    }
    let inc = "#include \"launchers.h\"\n#include \"launchers.h\"\n";
    assert!(compile(
        &cc(),
        "-std=c11",
        "h.c",
        &format!("{inc}int main(void) {{ return 0; }}\n")
    ));
    let good = "HIPFP8_EXTERN_TEST int hipfp8_rowwise_2d_launch(const void* x, uint8_t* out, \
                float* scales, int64_t m, int64_t k, int format, int pow2, int in_dtype, \
                hipStream_t stream) noexcept { return x && out && scales && m && k && format \
                && pow2 && in_dtype && stream; }\nint main() { return 0; }\n";
    let pre = format!("{inc}#define HIPFP8_EXTERN_TEST extern \"C\"\n");
    assert!(compile(
        &cxx(),
        "-std=c++17",
        "good.cpp",
        &format!("{pre}{good}")
    ));
    let bad = good.replace("int64_t m,", "int32_t m,");
    assert!(
        !compile(&cxx(), "-std=c++17", "bad.cpp", &format!("{pre}{bad}")),
        "a definition with an int32_t where the prototype has int64_t compiled"
    );
}
