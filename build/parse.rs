//! Text parsers of the build script (no environment, no file system): per-file build
//! directives, launcher definitions, comment stripping, list splitting. Unit-tested by
//! tests/build_script.rs, which includes this file.

pub fn split_list(v: &str) -> Vec<String> {
    v.split([';', ',', ' '])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

pub fn split_list_ws(v: &str) -> Vec<String> {
    v.split_whitespace().map(String::from).collect()
}

/// `// hipfp8-build: key=value` lines of the leading comment block.
pub fn directives(text: &str) -> Vec<(String, String)> {
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
pub fn launchers(text: &str) -> Vec<String> {
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

pub fn strip_comments(text: &str) -> String {
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

/// The paths of a source's `#include "..."` lines outside comments (angle-bracket includes are
/// the toolchain's and are not followed).
pub fn quoted_includes(text: &str) -> Vec<String> {
    strip_comments(text)
        .lines()
        .filter_map(|l| {
            let l = l.trim_start().strip_prefix('#')?.trim_start();
            let rest = l.strip_prefix("include")?.trim_start();
            let rest = rest.strip_prefix('"')?;
            let end = rest.find('"')?;
            Some(rest[..end].to_string())
        })
        .collect()
}
