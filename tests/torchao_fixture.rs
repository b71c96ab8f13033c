//! Bit-exact agreement with torchao's eager reference functions.
//!
//! `tests/fixtures/torchao_fixture.bin` was produced by `tests/fixtures/gen_torchao.py` with
//! torch + torchao on the GPU machine (versions and device are in the file's `meta` lines and
//! printed by these tests). It holds, for every quantization op torchao has an eager reference
//! for, small inputs with special values (zero rows, bf16/f32 max, subnormals, ties, NaN, Inf)
//! and torchao's outputs, in hipfp8's memory layouts.
//!
//! Comparison rules:
//! * FP8 bytes: equal, except where torchao's byte is a NaN code of the format (either sign:
//!   torch keeps the NaN's sign), ours must be exactly the canonical positive NaN code
//!   (`Fp8Format::nan_code`: 0x7F OCP, 0x80 FNUZ). That is the only NaN latitude.
//! * scales, amax: equal f32 bits (two NaNs are equal).
//! * Documented differences (see [`Discrepancy`]) are accepted only in their exact form, and
//!   then both sides are checked against their own scale: torchao's bytes must equal our
//!   encode(x * torchao's scale) and ours must equal encode(x * our scale).

use std::collections::HashMap;
use std::fmt::Write as _;

use hipfp8::bf16;
use hipfp8::format::Fp8Format;
use hipfp8::scaling::{amax_combine, amax_to_scale};
use hipfp8::{CastParams, Context, HpSrc, MxParams, MxRounding, Scaling, StreamRef};

const FIXTURE: &[u8] = include_bytes!("fixtures/torchao_fixture.bin");

// ------------------------------------------------------------------------------ the file

enum Data {
    U8(Vec<u8>),
    Bf16(Vec<bf16>),
    F32(Vec<f32>),
    I32(Vec<i32>),
}

struct Fixture {
    meta: Vec<(String, String)>,
    cases: Vec<Case>,
    tensors: HashMap<String, Data>,
}

struct Case {
    kv: Vec<(String, String)>,
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take(2).try_into().unwrap())
    }
    fn u8(&mut self) -> u8 {
        self.take(1)[0]
    }
}

fn load() -> Fixture {
    let mut r = Reader { b: FIXTURE, pos: 0 };
    assert_eq!(r.take(8), b"HFP8TAO1", "not a hipfp8 torchao fixture");
    let tlen = r.u32() as usize;
    let text = std::str::from_utf8(r.take(tlen)).unwrap().to_string();
    let nt = r.u32();
    let mut tensors = HashMap::new();
    for _ in 0..nt {
        let nl = r.u16() as usize;
        let name = std::str::from_utf8(r.take(nl)).unwrap().to_string();
        let code = r.u8();
        let n = r.u32() as usize;
        let d = match code {
            0 => Data::U8(r.take(n).to_vec()),
            1 => Data::Bf16(
                r.take(2 * n)
                    .chunks(2)
                    .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])))
                    .collect(),
            ),
            2 => Data::F32(
                r.take(4 * n)
                    .chunks(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect(),
            ),
            3 => Data::I32(
                r.take(4 * n)
                    .chunks(4)
                    .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
                    .collect(),
            ),
            _ => panic!("bad dtype code {code}"),
        };
        tensors.insert(name, d);
    }
    assert_eq!(r.pos, FIXTURE.len(), "trailing bytes in fixture");
    let mut meta = Vec::new();
    let mut cases = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("meta ") {
            let (k, v) = rest.split_once(' ').unwrap_or((rest, ""));
            meta.push((k.to_string(), v.to_string()));
        } else if let Some(rest) = line.strip_prefix("case ") {
            let mut it = rest.split_whitespace();
            let id = it.next().unwrap().to_string();
            let mut kv = vec![("id".to_string(), id)];
            kv.extend(it.map(|p| {
                let (k, v) = p.split_once('=').unwrap();
                (k.to_string(), v.to_string())
            }));
            cases.push(Case { kv });
        }
    }
    Fixture {
        meta,
        cases,
        tensors,
    }
}

impl Case {
    fn get(&self, k: &str) -> &str {
        self.kv
            .iter()
            .find(|(a, _)| a == k)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("case lacks {k}"))
    }
    fn has(&self, k: &str) -> bool {
        self.kv.iter().any(|(a, _)| a == k)
    }
    fn usize(&self, k: &str) -> usize {
        self.get(k).parse().unwrap()
    }
    fn op(&self) -> &str {
        self.get("op")
    }
    fn fmt(&self) -> Fp8Format {
        self.get("fmt").parse().unwrap()
    }
    fn pow2(&self) -> bool {
        self.has("pow2") && self.get("pow2") == "1"
    }
    fn label(&self) -> String {
        let mut s = String::new();
        for (k, v) in &self.kv {
            if !v.starts_with('t') || k == "dtype" {
                let _ = write!(s, "{k}={v} ");
            }
        }
        s
    }
}

impl Fixture {
    fn u8s(&self, c: &Case, k: &str) -> &[u8] {
        match &self.tensors[c.get(k)] {
            Data::U8(v) => v,
            _ => panic!("{k} is not u8"),
        }
    }
    fn f32s(&self, c: &Case, k: &str) -> &[f32] {
        match &self.tensors[c.get(k)] {
            Data::F32(v) => v,
            _ => panic!("{k} is not f32"),
        }
    }
    fn i32s(&self, c: &Case, k: &str) -> &[i32] {
        match &self.tensors[c.get(k)] {
            Data::I32(v) => v,
            _ => panic!("{k} is not i32"),
        }
    }
    /// The input as f32 values (bf16 widens exactly).
    fn xf(&self, c: &Case, k: &str) -> Vec<f32> {
        match &self.tensors[c.get(k)] {
            Data::Bf16(v) => v.iter().map(|b| b.to_f32()).collect(),
            Data::F32(v) => v.clone(),
            _ => panic!("{k} is not a float input"),
        }
    }
    fn hp(&self, c: &Case, k: &str) -> HpSrc<'_> {
        match &self.tensors[c.get(k)] {
            Data::Bf16(v) => v.into(),
            Data::F32(v) => v.into(),
            _ => panic!("{k} is not a float input"),
        }
    }
    fn meta(&self, k: &str) -> &str {
        self.meta
            .iter()
            .find(|(a, _)| a == k)
            .map(|(_, v)| v.as_str())
            .unwrap_or("?")
    }
}

// ------------------------------------------------------------------------------ the plan
// For every scalar-scale op: which input element lands in which output byte, under which
// scale (group). Written from docs/OPS.md's layouts, independently of the CPU backend.

struct Elem {
    out: usize, // index into the case's output list
    idx: usize, // byte index in that output
    x: f32,     // the input value
    group: usize,
}

struct Plan {
    /// fixture keys of the FP8 outputs, in order.
    outs: Vec<&'static str>,
    /// torchao's scale per group (forward scales; blockwise cases store reciprocals).
    their_scales: Vec<f32>,
    reciprocal: bool,
    elems: Vec<Elem>,
}

fn groups_of(offs: &[i32]) -> Vec<(usize, usize)> {
    let mut s = 0usize;
    offs.iter()
        .map(|&e| {
            let g = (s, e as usize);
            s = e as usize;
            g
        })
        .collect()
}

fn plan(fx: &Fixture, c: &Case) -> Option<Plan> {
    let op = c.op();
    let mut elems = Vec::new();
    let mut scales: Vec<f32> = Vec::new();
    let mut reciprocal = false;
    let outs: Vec<&'static str>;
    match op {
        "rowwise_2d" | "cast_transpose_rowwise" | "tensorwise" | "cast_transpose_tensorwise" => {
            let (m, k) = (c.usize("m"), c.usize("k"));
            let x = fx.xf(c, "x");
            let tensorwise = op.contains("tensorwise");
            scales.extend_from_slice(fx.f32s(c, "scales"));
            for i in 0..m {
                for j in 0..k {
                    let g = if tensorwise { 0 } else { i };
                    elems.push(Elem {
                        out: 0,
                        idx: i * k + j,
                        x: x[i * k + j],
                        group: g,
                    });
                }
            }
            if op.starts_with("cast_transpose") {
                let base = scales.len();
                scales.extend_from_slice(fx.f32s(c, "scales_t"));
                for i in 0..m {
                    for j in 0..k {
                        let g = if tensorwise { base } else { base + j };
                        elems.push(Elem {
                            out: 1,
                            idx: j * m + i,
                            x: x[i * k + j],
                            group: g,
                        });
                    }
                }
                outs = vec!["out", "out_t"];
            } else {
                outs = vec!["out"];
            }
        }
        "per_group_colwise" | "per_group_colwise_dual" => {
            let m = c.usize("m");
            let offs = fx.i32s(c, "offs");
            let parts: Vec<(&str, &str, &str, usize)> = if op == "per_group_colwise" {
                vec![("x", "out", "scales", c.usize("k"))]
            } else {
                vec![
                    ("x1", "out1", "scales1", c.usize("k1")),
                    ("x2", "out2", "scales2", c.usize("k2")),
                ]
            };
            let mut o = Vec::new();
            for (pi, (xk, ok, sk, k)) in parts.into_iter().enumerate() {
                let x = fx.xf(c, xk);
                let base = scales.len();
                scales.extend_from_slice(fx.f32s(c, sk));
                for (g, (s, e)) in groups_of(offs).into_iter().enumerate() {
                    for r in s..e {
                        for col in 0..k {
                            elems.push(Elem {
                                out: pi,
                                idx: col * m + r,
                                x: x[r * k + col],
                                group: base + g * k + col,
                            });
                        }
                    }
                }
                o.push(ok);
            }
            outs = o;
        }
        "per_group_rowwise" => {
            let (m, k) = (c.usize("m"), c.usize("k"));
            let x = fx.xf(c, "x");
            scales.extend_from_slice(fx.f32s(c, "scales"));
            for (g, (s, e)) in groups_of(fx.i32s(c, "offs")).into_iter().enumerate() {
                for r in 0..m {
                    for col in s..e {
                        elems.push(Elem {
                            out: 0,
                            idx: r * k + col,
                            x: x[r * k + col],
                            group: g * m + r,
                        });
                    }
                }
            }
            outs = vec!["out"];
        }
        "colwise_3d" | "rowwise_3d_transpose_rhs" => {
            let (ne, k, n) = (c.usize("e"), c.usize("k"), c.usize("n"));
            let x = fx.xf(c, "x");
            scales.extend_from_slice(fx.f32s(c, "scales"));
            for e in 0..ne {
                for nn in 0..n {
                    for kk in 0..k {
                        let xi = e * k * n + nn * k + kk;
                        let (idx, g) = if op == "colwise_3d" {
                            (xi, e * n + nn)
                        } else {
                            (e * n * k + kk * n + nn, e * k + kk)
                        };
                        elems.push(Elem {
                            out: 0,
                            idx,
                            x: x[xi],
                            group: g,
                        });
                    }
                }
            }
            outs = vec!["out"];
        }
        "blockwise_1x128" | "blockwise_128x128" => {
            let (m, k) = (c.usize("m"), c.usize("k"));
            let x = fx.xf(c, "x");
            scales.extend_from_slice(fx.f32s(c, "inv_scales"));
            reciprocal = true;
            let kb = k.div_ceil(128);
            for i in 0..m {
                for j in 0..k {
                    let g = if op == "blockwise_1x128" {
                        i * kb + j / 128
                    } else {
                        (i / 128) * kb + j / 128
                    };
                    elems.push(Elem {
                        out: 0,
                        idx: i * k + j,
                        x: x[i * k + j],
                        group: g,
                    });
                }
            }
            outs = vec!["out"];
        }
        "rowwise_2d_padded" => {
            let k = c.usize("k");
            let x = fx.xf(c, "x");
            let po = fx.i32s(c, "padded_offs");
            scales.extend_from_slice(fx.f32s(c, "scales"));
            let mut pstart = 0usize;
            for (g, (s, e)) in groups_of(fx.i32s(c, "offs")).into_iter().enumerate() {
                let pend = po[g] as usize;
                for pr in pstart..pend {
                    let src = s + (pr - pstart);
                    for j in 0..k {
                        let v = if src < e { x[src * k + j] } else { 0.0 };
                        elems.push(Elem {
                            out: 0,
                            idx: pr * k + j,
                            x: v,
                            group: pr,
                        });
                    }
                }
                pstart = pend;
            }
            outs = vec!["out"];
        }
        _ => return None,
    }
    Some(Plan {
        outs,
        their_scales: scales,
        reciprocal,
        elems,
    })
}

// ------------------------------------------------------------------------------ checking

/// A documented, understood difference between torchao's eager code and hipfp8's rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Discrepancy {
    /// pow2 scales: torchao computes exp2(floor(log2(s))) with an f32 log2; for a scale s a
    /// few ulp below 2^j, log2(s) rounds to exactly j, so torchao's scale is 2^j > s (data can
    /// then exceed the format's max before saturation). hipfp8 rounds down exactly from the
    /// exponent bits: 2^(j-1).
    Pow2Log2RoundsUp,
    /// MXFP8 RCEIL: torchao takes ceil(log2(d)), d = amax / max, with an f32 log2, which rounds
    /// to the exact integer j when d is a few ulp above 2^j: its exponent is one lower than the
    /// exact ceil (docs/OPS.md: "computed exactly from d's bits"), and the block's largest
    /// elements saturate.
    MxRceilLog2RoundsDown,
}

fn byte_ok(fmt: Fp8Format, ours: u8, theirs: u8) -> bool {
    if fmt.is_nan_code(theirs) {
        ours == fmt.nan_code()
    } else {
        ours == theirs
    }
}

fn same_f32(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Classify a scale mismatch for a forward-scale group, or None if unexplained.
fn classify(fmt: Fp8Format, pow2: bool, amax: f32, ours: f32, theirs: f32) -> Option<Discrepancy> {
    let exact = amax_to_scale(amax, fmt, false);
    if pow2
        && theirs == 2.0 * ours
        && exact < theirs
        && exact as f64 >= theirs as f64 * (1.0 - 1e-6)
    {
        return Some(Discrepancy::Pow2Log2RoundsUp);
    }
    None
}

#[derive(Default)]
struct Tally {
    cases: usize,
    groups: usize,
    bytes: usize,
    nan_bytes: usize,
    failures: Vec<String>,
    discrepancies: HashMap<(String, Discrepancy), usize>,
}

impl Tally {
    fn fail(&mut self, msg: String) {
        if self.failures.len() < 60 {
            self.failures.push(msg);
        } else if self.failures.len() == 60 {
            self.failures.push("... more failures omitted".into());
        }
    }
}

/// Check one case. `ours` = our FP8 outputs (in plan order) and our per-group scales, or None
/// to check torchao's bytes against our encode rule + their own scales (no op call needed).
fn check_case(fx: &Fixture, c: &Case, p: &Plan, ours: Option<(&[Vec<u8>], &[f32])>, t: &mut Tally) {
    let fmt = c.fmt();
    let pow2 = c.pow2();
    let label = c.label();
    t.cases += 1;
    // Group amax (NaN-propagating), from the plan's element list.
    let mut amax = vec![0.0f32; p.their_scales.len()];
    let mut seen = vec![false; p.their_scales.len()];
    for e in &p.elems {
        amax[e.group] = amax_combine(amax[e.group], e.x);
        seen[e.group] = true;
    }
    let our_rule: Vec<f32> = amax.iter().map(|&a| amax_to_scale(a, fmt, pow2)).collect();
    // Per group: which scale each side's bytes must follow.
    let mut their_eff = vec![0.0f32; amax.len()];
    let mut our_eff = vec![0.0f32; amax.len()];
    for g in 0..amax.len() {
        if !seen[g] {
            continue;
        }
        t.groups += 1;
        let mine = ours.map(|(_, s)| s[g]).unwrap_or(our_rule[g]);
        if ours.is_some() && !same_f32(mine, our_rule[g]) {
            t.fail(format!(
                "{label}group {g}: our op's scale {mine:e} != our rule's {:e}",
                our_rule[g]
            ));
        }
        let theirs = p.their_scales[g];
        if p.reciprocal {
            // torchao returns 1/s computed in f32; s itself follows the same rule as ours.
            if !same_f32(1.0f32 / mine, theirs) {
                t.fail(format!(
                    "{label}group {g} (amax {:e}): 1/our scale {:e} != torchao's {theirs:e}",
                    amax[g],
                    1.0 / mine
                ));
            }
            their_eff[g] = mine;
            our_eff[g] = mine;
        } else if same_f32(mine, theirs) {
            their_eff[g] = theirs;
            our_eff[g] = mine;
        } else if let Some(d) = classify(fmt, pow2, amax[g], mine, theirs) {
            *t.discrepancies.entry((c.op().to_string(), d)).or_default() += 1;
            their_eff[g] = theirs;
            our_eff[g] = mine;
        } else {
            t.fail(format!(
                "{label}group {g} (amax {:e}): scale ours {mine:e} != torchao {theirs:e}",
                amax[g]
            ));
            their_eff[g] = theirs;
            our_eff[g] = mine;
        }
    }
    let theirs_out: Vec<&[u8]> = p.outs.iter().map(|k| fx.u8s(c, k)).collect();
    for e in &p.elems {
        let tb = theirs_out[e.out][e.idx];
        t.bytes += 1;
        if fmt.is_nan_code(tb) {
            t.nan_bytes += 1;
        }
        // torchao's byte against our encode rule applied with torchao's scale.
        let want_theirs = fmt.encode(e.x * their_eff[e.group]);
        if !byte_ok(fmt, want_theirs, tb) {
            t.fail(format!(
                "{label}{}[{}]: torchao {tb:#04x} != encode({:e} * {:e}) = {want_theirs:#04x}",
                p.outs[e.out], e.idx, e.x, their_eff[e.group]
            ));
        }
        if let Some((ob, _)) = ours {
            let b = ob[e.out][e.idx];
            let same_scale = same_f32(their_eff[e.group], our_eff[e.group]);
            let ok = if same_scale {
                byte_ok(fmt, b, tb)
            } else {
                b == fmt.encode(e.x * our_eff[e.group])
            };
            if !ok {
                t.fail(format!(
                    "{label}{}[{}] x={:e}: ours {b:#04x}, torchao {tb:#04x} (scales {:e} / {:e})",
                    p.outs[e.out], e.idx, e.x, our_eff[e.group], their_eff[e.group]
                ));
            }
        }
    }
}

fn report(name: &str, fx: &Fixture, t: &Tally) {
    eprintln!(
        "torchao fixture [{name}] (torch {}, torchao {}, generated on {}): {} cases, {} scale groups, {} bytes ({} NaN) compared",
        fx.meta("torch"),
        fx.meta("torchao"),
        fx.meta("device"),
        t.cases,
        t.groups,
        t.bytes,
        t.nan_bytes
    );
    let mut d: Vec<_> = t.discrepancies.iter().collect();
    d.sort_by_key(|(k, _)| format!("{k:?}"));
    for ((op, kind), n) in d {
        eprintln!("  documented difference {kind:?} in {op}: {n} groups");
    }
    for f in &t.failures {
        eprintln!("  MISMATCH {f}");
    }
}

// ------------------------------------------------------------------------------ tests

#[test]
fn fixture_was_generated_by_torchao_without_errors() {
    let fx = load();
    assert_ne!(fx.meta("torchao"), "?");
    assert_ne!(fx.meta("torch"), "?");
    // torchao's eager path runs on the GPU in training: the references were run there.
    assert_ne!(
        fx.meta("device"),
        "cpu",
        "fixture was generated without a GPU"
    );
    for c in &fx.cases {
        assert_eq!(c.get("ran_on"), "cuda", "{}", c.label());
    }
    let errors: Vec<_> = fx.meta.iter().filter(|(k, _)| k == "error").collect();
    assert!(
        errors.is_empty(),
        "the generator recorded errors: {errors:?}"
    );
    let mut ops: Vec<&str> = fx.cases.iter().map(|c| c.op()).collect();
    ops.sort();
    ops.dedup();
    for op in [
        "rowwise_2d",
        "tensorwise",
        "cast_transpose_rowwise",
        "cast_transpose_tensorwise",
        "per_group_colwise",
        "per_group_colwise_dual",
        "per_group_rowwise",
        "colwise_3d",
        "rowwise_3d_transpose_rhs",
        "mxfp8_dim0",
        "mxfp8_dim1",
        "blockwise_1x128",
        "blockwise_128x128",
        "rowwise_2d_padded",
    ] {
        assert!(ops.contains(&op), "fixture has no {op} cases");
    }
}

/// Needs no op implementation: torchao's bytes == our encode(x * torchao's scale) for every
/// element, and torchao's scales == our amax_to_scale(amax) (documented differences aside).
/// This pins `format.rs` + `scaling.rs` to torchao on every op's cases.
#[test]
fn torchao_outputs_follow_our_encode_and_scale_rules() {
    let fx = load();
    let mut t = Tally::default();
    for c in &fx.cases {
        if let Some(p) = plan(&fx, c) {
            check_case(&fx, c, &p, None, &mut t);
        } else if c.op().starts_with("mxfp8") {
            check_mx(&fx, c, None, &mut t);
        } else {
            t.fail(format!("{}: no plan for this op", c.label()));
        }
        if c.op() == "tensorwise" {
            let x = fx.xf(c, "x");
            let a = x.iter().fold(0.0f32, |a, &v| amax_combine(a, v));
            let theirs = fx.f32s(c, "amax")[0];
            if !same_f32(a, theirs) {
                t.fail(format!(
                    "{}amax ours {a:e} != torchao {theirs:e}",
                    c.label()
                ));
            }
        }
    }
    report("rules", &fx, &t);
    assert_eq!(t.cases, fx.cases.len());
    assert!(
        t.failures.is_empty(),
        "{} mismatches (see stderr)",
        t.failures.len()
    );
}

// ------------------------------------------------------------------------------ MXFP8
// hipfp8's documented rule (docs/OPS.md "MXFP8"), written out here to classify any difference
// from torchao; the op test compares the CPU backend's mxfp8 ops to the same fixture.

fn emax_elem(fmt: Fp8Format) -> i32 {
    match fmt {
        Fp8Format::E4M3Fn => 8,
        Fp8Format::E5M2 => 15,
        _ => panic!("MXFP8 has no {fmt} elements"),
    }
}

/// Our rule's E8M0 byte for a block amax (docs/OPS.md "MXFP8").
fn mx_rule_scale(fmt: Fp8Format, rceil: bool, amax: f32) -> u8 {
    if amax.is_nan() {
        return 0xFF;
    }
    let e: i32 = if rceil {
        if amax.is_infinite() {
            return 0xFE;
        }
        // ceil(log2(d)) of the f32 quotient, exactly from its bits.
        let d = amax / fmt.max_finite();
        let (ef, mf) = (((d.to_bits() >> 23) & 0xFF) as i32, d.to_bits() & 0x7F_FFFF);
        if d == 0.0 {
            -127
        } else if ef == 0 {
            // subnormal: d = mf * 2^-149
            (32 - (mf - 1).leading_zeros()) as i32 - 149
        } else {
            ef - 127 + i32::from(mf != 0)
        }
        .clamp(-127, 127)
    } else {
        // exponent field of amax (0 and subnormals read as -127), minus emax of the element.
        (((amax.to_bits() >> 23) & 0xFF) as i32 - 127 - emax_elem(fmt)).clamp(-127, 128)
    };
    (e + 127) as u8
}

/// Our rule's element encoding under a block scale byte: the same multiplier as torchao's.
fn mx_rule_data(fmt: Fp8Format, rceil: bool, byte: u8, x: f32) -> u8 {
    fmt.encode(x * torchao_mx_multiplier(rceil, byte))
}

/// What torchao 0.18's eager `to_mx` multiplies the block by, given its scale byte.
fn torchao_mx_multiplier(rceil: bool, byte: u8) -> f32 {
    if rceil {
        match byte {
            255 => f32::NAN,
            254 => 2f32.powi(-127),
            0 => 1.0,
            b => 2f32.powi(127 - b as i32),
        }
    } else {
        let scale = if byte == 255 {
            f32::INFINITY
        } else {
            2f32.powi(byte as i32 - 127).max(f32::MIN_POSITIVE)
        };
        1.0 / scale
    }
}

/// Blocks of an MXFP8 case: (x values, their data indices, scale index), in our layouts.
fn mx_blocks(fx: &Fixture, c: &Case) -> Vec<(Vec<f32>, Vec<usize>, usize)> {
    let (m, k) = (c.usize("m"), c.usize("k"));
    let x = fx.xf(c, "x");
    let mut v = Vec::new();
    if c.op() == "mxfp8_dim0" {
        let nb = k.div_ceil(32);
        for i in 0..m {
            for b in 0..nb {
                let idx: Vec<usize> = (b * 32..((b + 1) * 32).min(k)).map(|j| i * k + j).collect();
                v.push((idx.iter().map(|&q| x[q]).collect(), idx, i * nb + b));
            }
        }
    } else {
        // dim1: out (K, M) row-major; blocks of 32 along m for each column j of x.
        let nb = m.div_ceil(32);
        for j in 0..k {
            for b in 0..nb {
                let rows: Vec<usize> = (b * 32..((b + 1) * 32).min(m)).collect();
                let xs = rows.iter().map(|&i| x[i * k + j]).collect();
                v.push((xs, rows.iter().map(|&i| j * m + i).collect(), j * nb + b));
            }
        }
    }
    v
}

/// Check an MXFP8 case: torchao's bytes against torchao's own arithmetic (validates our
/// reading of its code), and our rule (or our op's output, when given) against torchao.
fn check_mx(fx: &Fixture, c: &Case, ours: Option<(&[u8], &[u8])>, t: &mut Tally) {
    let fmt = c.fmt();
    let rceil = c.get("mode") == "rceil";
    let label = c.label();
    let (tdata, tscale) = (fx.u8s(c, "out"), fx.u8s(c, "scales"));
    t.cases += 1;
    for (xs, idx, si) in mx_blocks(fx, c) {
        t.groups += 1;
        let amax = xs.iter().fold(0.0f32, |a, &v| amax_combine(a, v));
        let tb = tscale[si];
        let rule_b = mx_rule_scale(fmt, rceil, amax);
        let our_b = ours.map(|(_, s)| s[si]).unwrap_or(rule_b);
        if our_b != rule_b {
            t.fail(format!("{label}block {si} (amax {amax:e}): our op's scale {our_b:#04x} != rule {rule_b:#04x}"));
        }
        let mult = torchao_mx_multiplier(rceil, tb);
        let mut data_differs = false;
        for (&x, &i) in xs.iter().zip(&idx) {
            t.bytes += 1;
            let td = tdata[i];
            if fmt.is_nan_code(td) {
                t.nan_bytes += 1;
            }
            let want_t = fmt.encode(x * mult);
            if !byte_ok(fmt, want_t, td) {
                t.fail(format!("{label}block {si} [{i}] x={x:e}: torchao {td:#04x} != its own arithmetic {want_t:#04x}"));
            }
            let ob = ours
                .map(|(d, _)| d[i])
                .unwrap_or_else(|| mx_rule_data(fmt, rceil, our_b, x));
            if ob != mx_rule_data(fmt, rceil, our_b, x) {
                t.fail(format!(
                    "{label}block {si} [{i}] x={x:e}: our op {ob:#04x} != rule {:#04x}",
                    mx_rule_data(fmt, rceil, our_b, x)
                ));
            }
            if !byte_ok(fmt, ob, td) {
                data_differs = true;
            }
        }
        if our_b == tb && !data_differs {
            continue;
        }
        let kind = if rceil && tb < 0xFE && our_b == tb + 1 && {
            // amax / max is within a few f32 ulp above 2^(tb - 127).
            let r = amax as f64 / fmt.max_finite() as f64 / 2f64.powi(tb as i32 - 127);
            r > 1.0 && r < 1.0 + 1e-6
        } {
            Some(Discrepancy::MxRceilLog2RoundsDown)
        } else {
            None
        };
        match kind {
            Some(d) => *t.discrepancies.entry((c.op().to_string(), d)).or_default() += 1,
            None => t.fail(format!(
                "{label}block {si} (amax {amax:e}): scale ours {our_b:#04x} torchao {tb:#04x}, data differs: {data_differs}"
            )),
        }
    }
}

fn ctx() -> Context {
    Context::cpu()
}

/// Our op's outputs for one case: FP8 outputs in plan order and scales in plan group order
/// (MXFP8: data, E8M0 scale bytes). Also checks outputs the plan does not cover (amax,
/// padded offsets) into `t`.
enum Ours {
    Scalar(Vec<Vec<u8>>, Vec<f32>),
    Mx(Vec<u8>, Vec<u8>),
}

fn run_op(ctx: &Context, fx: &Fixture, c: &Case, t: &mut Tally) -> Ours {
    let s = StreamRef::DEFAULT;
    let cp = || CastParams::new(c.fmt(), c.pow2());
    let m = if c.has("m") { c.usize("m") } else { 0 };
    let k = if c.has("k") { c.usize("k") } else { 0 };
    let label = c.label();
    match c.op() {
        "rowwise_2d" => {
            let (mut o, mut sc) = (vec![0u8; m * k], vec![0f32; m]);
            ctx.rowwise_2d(
                &cp(),
                m,
                k,
                fx.hp(c, "x"),
                (&mut o).into(),
                (&mut sc).into(),
                s,
            )
            .unwrap();
            Ours::Scalar(vec![o], sc)
        }
        "tensorwise" => {
            let (mut o, mut sc, mut am) = (vec![0u8; m * k], vec![0f32; 1], vec![0f32; 1]);
            ctx.tensorwise(
                &cp(),
                m * k,
                fx.hp(c, "x"),
                (&mut o).into(),
                (&mut sc).into(),
                (&mut am).into(),
                s,
            )
            .unwrap();
            let theirs = fx.f32s(c, "amax")[0];
            if !same_f32(am[0], theirs) {
                t.fail(format!(
                    "{label}amax ours {:e} != torchao {theirs:e}",
                    am[0]
                ));
            }
            Ours::Scalar(vec![o], sc)
        }
        "cast_transpose_rowwise" | "cast_transpose_tensorwise" => {
            let tw = c.op().ends_with("tensorwise");
            let scaling = if tw {
                Scaling::Tensorwise
            } else {
                Scaling::Rowwise
            };
            let (mut o, mut ot) = (vec![0u8; m * k], vec![0u8; m * k]);
            let (mut sc, mut st) = if tw {
                (vec![0f32; 1], vec![0f32; 1])
            } else {
                (vec![0f32; m], vec![0f32; k])
            };
            ctx.cast_transpose(
                &cp(),
                scaling,
                m,
                k,
                fx.hp(c, "x"),
                (&mut o).into(),
                (&mut ot).into(),
                (&mut sc).into(),
                (&mut st).into(),
                s,
            )
            .unwrap();
            sc.extend_from_slice(&st);
            Ours::Scalar(vec![o, ot], sc)
        }
        "per_group_colwise" => {
            let offs = fx.i32s(c, "offs");
            let (mut o, mut sc) = (vec![0u8; m * k], vec![0f32; offs.len() * k]);
            ctx.per_group_colwise(
                &cp(),
                m,
                k,
                fx.hp(c, "x"),
                offs.into(),
                (&mut o).into(),
                (&mut sc).into(),
                s,
            )
            .unwrap();
            Ours::Scalar(vec![o], sc)
        }
        "per_group_colwise_dual" => {
            let offs = fx.i32s(c, "offs");
            let (k1, k2) = (c.usize("k1"), c.usize("k2"));
            let (mut o1, mut s1) = (vec![0u8; m * k1], vec![0f32; offs.len() * k1]);
            let (mut o2, mut s2) = (vec![0u8; m * k2], vec![0f32; offs.len() * k2]);
            ctx.per_group_colwise_dual(
                &cp(),
                m,
                k1,
                k2,
                fx.hp(c, "x1"),
                fx.hp(c, "x2"),
                offs.into(),
                (&mut o1).into(),
                (&mut s1).into(),
                (&mut o2).into(),
                (&mut s2).into(),
                s,
            )
            .unwrap();
            s1.extend_from_slice(&s2);
            Ours::Scalar(vec![o1, o2], s1)
        }
        "per_group_rowwise" => {
            let offs = fx.i32s(c, "offs");
            let (mut o, mut sc) = (vec![0u8; m * k], vec![0f32; offs.len() * m]);
            ctx.per_group_rowwise(
                &cp(),
                m,
                k,
                fx.hp(c, "x"),
                offs.into(),
                (&mut o).into(),
                (&mut sc).into(),
                s,
            )
            .unwrap();
            Ours::Scalar(vec![o], sc)
        }
        "colwise_3d" | "rowwise_3d_transpose_rhs" => {
            let (e, k, n) = (c.usize("e"), c.usize("k"), c.usize("n"));
            let mut o = vec![0u8; e * k * n];
            if c.op() == "colwise_3d" {
                let mut sc = vec![0f32; e * n];
                ctx.colwise_3d(
                    &cp(),
                    e,
                    k,
                    n,
                    fx.hp(c, "x"),
                    (&mut o).into(),
                    (&mut sc).into(),
                    s,
                )
                .unwrap();
                Ours::Scalar(vec![o], sc)
            } else {
                let mut sc = vec![0f32; e * k];
                ctx.rowwise_3d_transpose_rhs(
                    &cp(),
                    e,
                    k,
                    n,
                    fx.hp(c, "x"),
                    (&mut o).into(),
                    (&mut sc).into(),
                    s,
                )
                .unwrap();
                Ours::Scalar(vec![o], sc)
            }
        }
        "blockwise_1x128" => {
            let (mut o, mut sc) = (vec![0u8; m * k], vec![0f32; m * k.div_ceil(128)]);
            ctx.blockwise_1x128(
                &cp(),
                m,
                k,
                fx.hp(c, "x"),
                (&mut o).into(),
                (&mut sc).into(),
                s,
            )
            .unwrap();
            Ours::Scalar(vec![o], sc)
        }
        "blockwise_128x128" => {
            let (mut o, mut sc) = (
                vec![0u8; m * k],
                vec![0f32; m.div_ceil(128) * k.div_ceil(128)],
            );
            ctx.blockwise_128x128(
                &cp(),
                m,
                k,
                fx.hp(c, "x"),
                (&mut o).into(),
                (&mut sc).into(),
                s,
            )
            .unwrap();
            Ours::Scalar(vec![o], sc)
        }
        "rowwise_2d_padded" => {
            let offs = fx.i32s(c, "offs");
            let m_cap = m + 15 * offs.len();
            let (mut o, mut sc, mut po) = (
                vec![0u8; m_cap * k],
                vec![0f32; m_cap],
                vec![0i32; offs.len()],
            );
            ctx.rowwise_2d_padded(
                &cp(),
                m,
                k,
                m_cap,
                fx.hp(c, "x"),
                offs.into(),
                (&mut o).into(),
                (&mut sc).into(),
                (&mut po).into(),
                s,
            )
            .unwrap();
            let theirs = fx.i32s(c, "padded_offs");
            if po != theirs {
                t.fail(format!(
                    "{label}padded_offs ours {po:?} != torchao {theirs:?}"
                ));
            }
            let rows = *theirs.last().unwrap_or(&0) as usize;
            sc.truncate(rows);
            Ours::Scalar(vec![o], sc)
        }
        "mxfp8_dim0" | "mxfp8_dim1" => {
            let rounding = if c.get("mode") == "rceil" {
                MxRounding::Rceil
            } else {
                MxRounding::Floor
            };
            let p = MxParams::new(c.fmt(), rounding);
            let mut o = vec![0u8; m * k];
            if c.op() == "mxfp8_dim0" {
                let mut sc = vec![0u8; m * k.div_ceil(32)];
                ctx.mxfp8_dim0(
                    &p,
                    m,
                    k,
                    fx.hp(c, "x"),
                    (&mut o).into(),
                    (&mut sc).into(),
                    s,
                )
                .unwrap();
                Ours::Mx(o, sc)
            } else {
                let mut sc = vec![0u8; k * m.div_ceil(32)];
                ctx.mxfp8_dim1(
                    &p,
                    m,
                    k,
                    fx.hp(c, "x"),
                    (&mut o).into(),
                    (&mut sc).into(),
                    s,
                )
                .unwrap();
                Ours::Mx(o, sc)
            }
        }
        other => panic!("fixture op {other} has no hipfp8 op mapping"),
    }
}

/// Run every fixture case of the given ops through the CPU backend and compare.
fn check_ops(ops: &[&str], min_cases: usize) {
    let fx = load();
    let ctx = ctx();
    let mut t = Tally::default();
    for c in fx.cases.iter().filter(|c| ops.contains(&c.op())) {
        match run_op(&ctx, &fx, c, &mut t) {
            Ours::Scalar(outs, scales) => {
                let p = plan(&fx, c).expect("plan");
                check_case(&fx, c, &p, Some((&outs, &scales)), &mut t);
            }
            Ours::Mx(data, scales) => check_mx(&fx, c, Some((&data, &scales)), &mut t),
        }
    }
    report(&ops.join("+"), &fx, &t);
    assert!(t.cases >= min_cases, "only {} cases of {ops:?}", t.cases);
    assert!(
        t.failures.is_empty(),
        "{} mismatches vs torchao (see stderr)",
        t.failures.len()
    );
}

#[test]
fn rowwise_2d_matches_torchao() {
    check_ops(&["rowwise_2d"], 16);
}

#[test]
fn tensorwise_matches_torchao() {
    check_ops(&["tensorwise"], 100);
}

#[test]
fn cast_transpose_matches_torchao() {
    check_ops(
        &["cast_transpose_rowwise", "cast_transpose_tensorwise"],
        100,
    );
}

#[test]
fn per_group_ops_match_torchao() {
    check_ops(
        &[
            "per_group_colwise",
            "per_group_colwise_dual",
            "per_group_rowwise",
        ],
        48,
    );
}

#[test]
fn expert_3d_ops_match_torchao() {
    check_ops(&["colwise_3d", "rowwise_3d_transpose_rhs"], 32);
}

#[test]
fn blockwise_ops_match_torchao() {
    check_ops(&["blockwise_1x128", "blockwise_128x128"], 10);
}

#[test]
fn rowwise_2d_padded_matches_torchao() {
    check_ops(&["rowwise_2d_padded"], 16);
}

#[test]
fn mxfp8_matches_torchao() {
    check_ops(&["mxfp8_dim0", "mxfp8_dim1"], 16);
}

/// Every case in the fixture is covered by one of the op tests above.
#[test]
fn every_fixture_op_is_tested() {
    let fx = load();
    let tested = [
        "rowwise_2d",
        "tensorwise",
        "cast_transpose_rowwise",
        "cast_transpose_tensorwise",
        "per_group_colwise",
        "per_group_colwise_dual",
        "per_group_rowwise",
        "colwise_3d",
        "rowwise_3d_transpose_rhs",
        "blockwise_1x128",
        "blockwise_128x128",
        "rowwise_2d_padded",
        "mxfp8_dim0",
        "mxfp8_dim1",
    ];
    for c in &fx.cases {
        assert!(
            tested.contains(&c.op()),
            "fixture op {} is not tested",
            c.op()
        );
    }
}
