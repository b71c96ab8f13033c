//! The C ABI's compatibility guard: every ABI-visible declaration of `include/hipfp8.h`
//! (function prototypes, struct layouts, enumerator values, `#define` constants), normalised,
//! is recorded with the `HIPFP8_ABI_VERSION` it belongs to in `tests/abi/hipfp8.abi`.
//!
//! * A recorded declaration that changed or disappeared while `HIPFP8_ABI_VERSION` stayed
//!   the same fails: an incompatible change must bump the version (src/ffi/mod.rs).
//! * New declarations (additions do not bump the version) and a bumped version fail until
//!   the record is rewritten with `BLESS=1 cargo test --test abi`, so the record stays
//!   complete; blessing refuses to record a changed declaration under an unchanged version.

mod support;

use std::collections::BTreeMap;

use support::root;

/// Declarations of a header: name -> normalised text. Enumerators and struct/enum/function
/// names are keys of their own, so adding one is an addition, not a change.
fn declarations(header: &str) -> (u64, BTreeMap<String, String>) {
    let mut out = BTreeMap::new();
    let mut abi = None;
    let mut code = String::new();
    let mut in_comment = false;
    for line in header.lines() {
        let mut l = line.to_string();
        // Strip /* ... */ comments (may span lines) and // comments.
        let mut kept = String::new();
        let mut rest = l.as_str();
        loop {
            if in_comment {
                match rest.find("*/") {
                    Some(i) => {
                        rest = &rest[i + 2..];
                        in_comment = false;
                    }
                    None => break,
                }
            } else {
                match rest.find("/*") {
                    Some(i) => {
                        kept.push_str(&rest[..i]);
                        rest = &rest[i + 2..];
                        in_comment = true;
                    }
                    None => {
                        kept.push_str(rest);
                        break;
                    }
                }
            }
        }
        l = kept;
        if let Some(i) = l.find("//") {
            l.truncate(i);
        }
        let t = l.trim();
        if let Some(def) = t.strip_prefix("#define ") {
            let mut it = def.splitn(2, char::is_whitespace);
            let name = it.next().unwrap_or("").to_string();
            let value = it.next().unwrap_or("").trim().to_string();
            if name == "HIPFP8_ABI_VERSION" {
                abi = value.parse().ok();
            } else if !name.starts_with("HIPFP8_VERSION") && name != "HIPFP8_H" && !value.is_empty()
            {
                out.insert(format!("define {name}"), value);
            }
            continue;
        }
        if t.starts_with('#') || t == "extern \"C\" {" || t == "}  // extern \"C\"" {
            continue;
        }
        code.push_str(t);
        code.push(' ');
    }
    // `extern "C" {` / its closing brace may survive on one line with other text.
    let code = code.replace("extern \"C\" {", " ");
    // Top-level statements end with ';' at brace depth 0.
    let mut depth = 0i32;
    let mut stmt = String::new();
    for ch in code.chars() {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth < 0 {
                    // The extern "C" block's closing brace.
                    depth = 0;
                    continue;
                }
            }
            _ => {}
        }
        stmt.push(ch);
        if ch == ';' && depth == 0 {
            record(&normalise(&stmt), &mut out);
            stmt.clear();
        }
    }
    (abi.expect("HIPFP8_ABI_VERSION is not defined"), out)
}

fn normalise(s: &str) -> String {
    let mut r = String::new();
    for w in s.split_whitespace() {
        if !r.is_empty() {
            r.push(' ');
        }
        r.push_str(w);
    }
    for (a, b) in [
        (" ,", ","),
        ("( ", "("),
        (" )", ")"),
        (" ;", ";"),
        (" *", "*"),
    ] {
        r = r.replace(a, b);
    }
    r
}

fn record(stmt: &str, out: &mut BTreeMap<String, String>) {
    if stmt.is_empty() || stmt == ";" {
        return;
    }
    if let (Some(open), Some(close)) = (stmt.find('{'), stmt.rfind('}')) {
        let head = stmt[..open].trim();
        let body = &stmt[open + 1..close];
        // `enum NAME : uint32_t`, `typedef struct NAME`: the word after enum/struct.
        let words: Vec<&str> = head.split_whitespace().collect();
        let name = words
            .iter()
            .position(|w| *w == "enum" || *w == "struct")
            .and_then(|i| words.get(i + 1))
            .or(words.last())
            .unwrap_or(&"")
            .to_string();
        if head.contains("enum") {
            // One entry per enumerator (its value), so new enumerators are additions.
            let mut next = 0i64;
            for e in body.split(',').map(str::trim).filter(|e| !e.is_empty()) {
                let (n, v) = match e.split_once('=') {
                    Some((n, v)) => (n.trim(), v.trim().parse::<i64>().unwrap_or(next)),
                    None => (e, next),
                };
                out.insert(format!("enumerator {name}::{n}"), v.to_string());
                next = v + 1;
            }
        } else {
            out.insert(format!("struct {name}"), normalise(body));
        }
        return;
    }
    if stmt.starts_with("typedef") {
        out.insert(stmt.to_string(), String::new());
        return;
    }
    if let Some(paren) = stmt.find('(') {
        let name = stmt[..paren].split_whitespace().last().unwrap_or("");
        let name = name.trim_start_matches('*');
        out.insert(format!("fn {name}"), stmt.to_string());
        return;
    }
    out.insert(format!("decl {stmt}"), String::new());
}

fn read_record(text: &str) -> (u64, BTreeMap<String, String>) {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("");
    let abi = first
        .strip_prefix("abi_version ")
        .and_then(|v| v.trim().parse().ok())
        .expect("tests/abi/hipfp8.abi must start with `abi_version N`");
    let map = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (k, v) = l.split_once('\t').unwrap_or((l, ""));
            (k.to_string(), v.to_string())
        })
        .collect();
    (abi, map)
}

fn write_record(abi: u64, decls: &BTreeMap<String, String>) -> String {
    let mut s = format!("abi_version {abi}\n");
    for (k, v) in decls {
        s.push_str(k);
        s.push('\t');
        s.push_str(v);
        s.push('\n');
    }
    s
}

/// Recorded declarations that are gone or different now.
fn changed(recorded: &BTreeMap<String, String>, now: &BTreeMap<String, String>) -> Vec<String> {
    recorded
        .iter()
        .filter(|(k, v)| now.get(*k) != Some(*v))
        .map(|(k, v)| match now.get(k) {
            None => format!("removed: {k} {v}"),
            Some(n) => format!("changed: {k}\n    was: {v}\n    now: {n}"),
        })
        .collect()
}

#[test]
fn abi_version_guards_every_declaration() {
    let header = std::fs::read_to_string(root().join("include/hipfp8.h")).unwrap();
    let (abi, now) = declarations(&header);
    let path = root().join("tests/abi/hipfp8.abi");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let (rec_abi, recorded) = if committed.is_empty() {
        (0, BTreeMap::new())
    } else {
        read_record(&committed)
    };
    let diffs = changed(&recorded, &now);
    if rec_abi == abi && !diffs.is_empty() {
        panic!(
            "include/hipfp8.h changed ABI-visible declarations but HIPFP8_ABI_VERSION is still \
             {abi}: bump it in src/ffi/mod.rs (then `BLESS=1 cargo test --test header` and \
             `BLESS=1 cargo test --test abi`).\n{}",
            diffs.join("\n")
        );
    }
    if std::env::var_os("BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, write_record(abi, &now)).unwrap();
        return;
    }
    assert!(
        rec_abi <= abi,
        "HIPFP8_ABI_VERSION went down ({rec_abi} recorded, {abi} now)"
    );
    let added: Vec<&String> = now.keys().filter(|k| !recorded.contains_key(*k)).collect();
    assert!(
        rec_abi == abi && added.is_empty(),
        "tests/abi/hipfp8.abi is out of date (recorded ABI {rec_abi}, header {abi}; new: {added:?}); \
         rewrite it with `BLESS=1 cargo test --test abi` and commit it"
    );
}

#[test]
fn the_guard_sees_changes() {
    let h = "#define HIPFP8_ABI_VERSION 3\n#define HIPFP8_X 4\n/* c */ typedef enum e { A = 0, B = 2, } e;\n\
             typedef struct d { size_t size; /* x */ uint32_t f; } d;\n\
             #ifdef __cplusplus\nextern \"C\" {\n#endif\nhipfp8_status f(const d *x,\n  uint32_t y);\n\
             #ifdef __cplusplus\n}  // extern \"C\"\n#endif\n";
    let (abi, d) = declarations(h);
    assert_eq!(abi, 3);
    assert_eq!(d["define HIPFP8_X"], "4");
    assert_eq!(d["enumerator e::B"], "2");
    assert_eq!(d["struct d"], "size_t size; uint32_t f;");
    assert_eq!(d["fn f"], "hipfp8_status f(const d*x, uint32_t y);");
    // A changed field type, a new argument, a renumbered enumerator: all changes.
    for edit in [
        h.replace("uint32_t f;", "uint64_t f;"),
        h.replace("uint32_t y);", "uint32_t y, int z);"),
        h.replace("B = 2", "B = 1"),
    ] {
        let (_, e) = declarations(&edit);
        assert!(!changed(&d, &e).is_empty(), "{edit}");
    }
    // An added enumerator or function is not a change.
    let (_, e) = declarations(&h.replace("B = 2, }", "B = 2, C = 3, }"));
    assert!(changed(&d, &e).is_empty());
    // The committed header parses into a non-trivial set.
    let header = std::fs::read_to_string(root().join("include/hipfp8.h")).unwrap();
    let (_, real) = declarations(&header);
    assert!(real.contains_key("fn hipfp8_grouped_gemm_2d3d"));
    assert!(real.contains_key("struct hipfp8_grouped_gemm_2d3d_desc"));
    assert!(real.len() > 50, "{}", real.len());
}
