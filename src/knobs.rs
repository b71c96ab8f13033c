//! The runtime knob registry: environment variables that choose a code path (never a result),
//! each written once in `hip/knobs.h` (name, type, default, when it is read, what it changes).
//! The launchers read the kernel knobs from the same file (`hipfp8::knob`, hip/quant/common.hip);
//! the Rust side reads the host knobs through [`host_var`]; `hipfp8 --knobs` and the README's
//! table come from [`markdown_table`].

use std::sync::OnceLock;

const HEADER: &str = include_str!("../hip/knobs.h");

/// Who reads a knob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KnobSide {
    /// The kernel launchers (C++), once per process.
    Kernel,
    /// The Rust side.
    Host,
}

/// One entry of `hip/knobs.h`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Knob {
    pub side: KnobSide,
    /// The `ID` of the X-macro line (`CT_LDS`: C++ reads it as `knob(kKnob_CT_LDS)`).
    pub id: String,
    /// The environment variable.
    pub name: String,
    /// `int`, `bool` or the accepted words.
    pub ty: String,
    /// The value that applies when the variable is unset.
    pub default: String,
    /// When it is read (`once` per process, or `every call`).
    pub read: String,
    /// What it changes.
    pub what: String,
}

/// Every knob, in the order of `hip/knobs.h` (kernel knobs first).
pub fn registry() -> &'static [Knob] {
    static R: OnceLock<Vec<Knob>> = OnceLock::new();
    R.get_or_init(|| parse(HEADER).expect("hip/knobs.h parses"))
}

/// The value of a host knob's environment variable (None when unset). Panics when `name` is
/// not a host knob of the registry: every knob the Rust side reads is listed there.
pub fn host_var(name: &str) -> Option<String> {
    assert!(
        registry()
            .iter()
            .any(|k| k.side == KnobSide::Host && k.name == name),
        "{name} is not a host knob of hip/knobs.h"
    );
    std::env::var(name).ok()
}

/// The registry as a Markdown table (the README's, and `hipfp8 --knobs`).
pub fn markdown_table() -> String {
    let mut s = String::from(
        "| variable | read by | type | default | read | what it changes |\n|---|---|---|---|---|---|\n",
    );
    for k in registry() {
        let side = match k.side {
            KnobSide::Kernel => "kernels",
            KnobSide::Host => "host",
        };
        s.push_str(&format!(
            "| `{}` | {side} | {} | `{}` | {} | {} |\n",
            k.name,
            k.ty.replace('|', "\\|"),
            k.default,
            k.read,
            k.what
        ));
    }
    s
}

/// Parse the `HIPFP8_KERNEL_KNOBS` and `HIPFP8_HOST_KNOBS` X-macro lists of `text`.
pub fn parse(text: &str) -> Result<Vec<Knob>, String> {
    let mut out = Vec::new();
    for (macro_name, side) in [
        ("HIPFP8_KERNEL_KNOBS(X)", KnobSide::Kernel),
        ("HIPFP8_HOST_KNOBS(X)", KnobSide::Host),
    ] {
        let start = text
            .find(&format!("#define {macro_name}"))
            .ok_or_else(|| format!("no #define {macro_name}"))?;
        // The macro body: up to the first line that does not end with a continuation.
        let mut body = String::new();
        for line in text[start..].lines() {
            let cont = line.trim_end().ends_with('\\');
            body.push_str(line.trim_end().trim_end_matches('\\'));
            body.push(' ');
            if !cont {
                break;
            }
        }
        let body = &body[format!("#define {macro_name}").len()..];
        let mut rest = body;
        while let Some(i) = rest.find("X(") {
            rest = &rest[i + 2..];
            let (args, after) = split_args(rest)?;
            rest = after;
            let [id, name, ty, default, read, what]: [String; 6] = args
                .try_into()
                .map_err(|a: Vec<String>| format!("a knob needs 6 fields, got {a:?}"))?;
            let unq = |s: &str| -> Result<String, String> {
                s.strip_prefix('"')
                    .and_then(|s| s.strip_suffix('"'))
                    .map(String::from)
                    .ok_or_else(|| format!("{s} is not a string literal"))
            };
            out.push(Knob {
                side,
                id,
                name: unq(&name)?,
                ty: unq(&ty)?,
                default: unq(&default).unwrap_or(default),
                read: unq(&read)?,
                what: unq(&what)?,
            });
        }
    }
    Ok(out)
}

/// The comma-separated arguments up to the `)` that closes `X(`, and the text after it.
fn split_args(s: &str) -> Result<(Vec<String>, &str), String> {
    let mut args = Vec::new();
    let mut cur = String::new();
    let mut in_str = false;
    for (i, c) in s.char_indices() {
        match c {
            '"' => {
                in_str = !in_str;
                cur.push(c);
            }
            ',' if !in_str => args.push(std::mem::take(&mut cur).trim().to_string()),
            ')' if !in_str => {
                args.push(cur.trim().to_string());
                return Ok((args, &s[i + 1..]));
            }
            _ => {
                // Adjacent string literals ("a" "b") are not used: keep the text as written.
                cur.push(c);
            }
        }
    }
    Err("unterminated X(".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_lists_the_kernel_and_host_knobs() {
        let r = registry();
        assert_eq!(r.len(), 16, "{r:#?}");
        let ct = r.iter().find(|k| k.name == "HIPFP8_CT_LDS").unwrap();
        assert_eq!(
            (ct.side, ct.id.as_str(), ct.default.as_str()),
            (KnobSide::Kernel, "CT_LDS", "1")
        );
        let gb = r
            .iter()
            .find(|k| k.name == "HIPFP8_GROUPED_GEMM_BACKEND")
            .unwrap();
        assert_eq!((gb.side, gb.default.as_str()), (KnobSide::Host, "auto"));
        for k in r {
            assert!(k.name.starts_with("HIPFP8_") && !k.what.is_empty(), "{k:?}");
        }
    }

    #[test]
    fn parser_handles_commas_in_strings_and_rejects_short_lines() {
        let t = "#define HIPFP8_KERNEL_KNOBS(X) \\\n  X(A, \"HIPFP8_A\", \"int\", 0, \"once\", \"2, 4 or 8: x\")\n\
                 #define HIPFP8_HOST_KNOBS(X) \\\n  X(B, \"HIPFP8_B\", \"a|b\", \"a\", \"every call\", \"y\")\n";
        let k = parse(t).unwrap();
        assert_eq!(k.len(), 2);
        assert_eq!(k[0].what, "2, 4 or 8: x");
        assert_eq!(k[1].default, "a");
        assert!(
            parse("#define HIPFP8_KERNEL_KNOBS(X) X(A, \"B\")\n#define HIPFP8_HOST_KNOBS(X)\n")
                .is_err()
        );
    }

    #[test]
    #[should_panic(expected = "not a host knob")]
    fn unlisted_host_knobs_are_refused() {
        host_var("HIPFP8_NOT_A_KNOB");
    }
}
