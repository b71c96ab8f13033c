//! The floor plan of docs/ARCHITECTURE.md, checked: every `crate::<module>` path in a file of
//! src/ (outside lib.rs and src/bin/) names its own top-level module or one on a lower floor.
//! (Circles inside one module's folder are `module-cycles.py`'s job.)

use std::fs;
use std::path::{Path, PathBuf};

/// Top-level modules and their floors (docs/ARCHITECTURE.md).
const FLOORS: &[(&str, u32)] = &[
    ("sys", 0),
    ("error", 0),
    ("knobs", 0),
    ("format", 1),
    ("view", 2),
    ("params", 2),
    ("scaling", 2),
    ("validate", 3),
    ("runtime", 4),
    ("reference", 4),
    ("workspace", 5),
    ("context", 6),
    ("dispatch", 7),
    ("quant", 8),
    ("cast_transpose", 8),
    ("mx", 8),
    ("grouped_gemm", 8),
    ("moe", 8),
    ("route", 8),
    ("recipe", 9),
    ("ffi", 10),
];

fn floor(m: &str) -> Option<u32> {
    FLOORS.iter().find(|(n, _)| *n == m).map(|&(_, f)| f)
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn strip_comments(t: &str) -> String {
    t.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment after each `crate::` (also inside `use crate::{a, b}` groups).
fn referenced_modules(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let t = strip_comments(text);
    let key = ["crate", "::"].concat();
    let mut rest = t.as_str();
    while let Some(i) = rest.find(&key) {
        let before = rest[..i].chars().last();
        rest = &rest[i + key.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let seg = item.trim().split("::").next().unwrap_or("").trim();
                if !seg.is_empty() {
                    out.push(seg.to_string());
                }
            }
            continue;
        }
        let seg: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        out.push(seg);
    }
    out
}

#[test]
fn every_module_uses_only_lower_floors() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    let mut bad = Vec::new();
    let mut checked = 0;
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let top = top.trim_end_matches(".rs").to_string();
        if top == "lib" || top == "bin" {
            continue;
        }
        let own = floor(&top).unwrap_or_else(|| {
            panic!("{rel:?}: module `{top}` has no floor in tests/architecture.rs (and docs/ARCHITECTURE.md)")
        });
        for m in referenced_modules(&fs::read_to_string(f).unwrap()) {
            checked += 1;
            let Some(fl) = floor(&m) else {
                // A crate-root item (`crate::Context`) or a macro: not a module edge.
                continue;
            };
            if m != top && fl >= own {
                bad.push(format!("{rel:?} (floor {own}) uses `{m}` (floor {fl})"));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} crate paths found: parser broken?"
    );
    assert!(bad.is_empty(), "floor violations:\n{}", bad.join("\n"));
}

#[test]
fn parser_reads_paths_and_groups() {
    let text = [
        "use crate",
        "::view::{Src, Dst};\nuse crate",
        "::{context, params::CastParams};\n// crate",
        "::ffi in a comment\nlet x = $crate",
        "::runtime::check_status(1);\n",
    ]
    .concat();
    assert_eq!(
        referenced_modules(&text),
        ["view", "context", "params", "runtime"]
    );
}
