//! `cargo run --release`: reports the backend, device and native FP8 format, runs every op on
//! the best device present, and prints a table of time, GB/s over minimal bytes (each input
//! read once, each output written once) and the result of checking the outputs against an
//! independent oracle recomputed here from the written rules (docs/OPS.md, `format.rs`,
//! `scaling.rs`): quantization must be exact; the GEMMs report their error against an f64
//! reference (on large shapes over a strided sample of their outputs, said in the row).
//!
//! Flags: `--shapes small|bench` (default small: quick on a CPU), `--format F` (auto,
//! auto-e5m2, e4m3fn, e5m2, e4m3fnuz, e5m2fnuz), `--pow2`, `--json`; `--knobs` prints the runtime knob registry (hip/knobs.h) and exits.
//! Progress goes to stderr.

use std::process::ExitCode;
use std::time::Instant;

use hipfp8::device::DeviceCopy;
use hipfp8::route::DispatchShape;
use hipfp8::scaling::{amax_combine, amax_to_scale};
use hipfp8::{
    BackendKind, CastParams, Context, DeviceBuffer, Dst, Event, FormatChoice, Fp8Format,
    GemmParams, GemmPlan, GroupedOp, HpSrc, MxParams, MxRounding, Scaling, Src, Stream, StreamRef,
    bf16,
};
use rayon::prelude::*;

const NONE: usize = usize::MAX;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Shapes {
    Small,
    Bench,
}

struct Args {
    shapes: Shapes,
    format: FormatChoice,
    pow2: bool,
    json: bool,
}

const USAGE: &str = "usage: hipfp8 [--shapes small|bench] [--format auto|auto-e5m2|e4m3fn|e5m2|e4m3fnuz|e5m2fnuz] [--pow2] [--json] | --knobs";

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        shapes: Shapes::Small,
        format: FormatChoice::Auto,
        pow2: false,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--shapes" => {
                a.shapes = match it.next().as_deref() {
                    Some("small") => Shapes::Small,
                    Some("bench") => Shapes::Bench,
                    other => return Err(format!("--shapes takes small|bench, got {other:?}")),
                }
            }
            "--format" => {
                let v = it.next().ok_or("--format needs a value")?;
                a.format = match v.as_str() {
                    "auto" => FormatChoice::Auto,
                    "auto-e5m2" => FormatChoice::AutoE5M2,
                    f => FormatChoice::Exact(f.parse::<Fp8Format>()?),
                }
            }
            "--pow2" => a.pow2 = true,
            "--json" => a.json = true,
            "--knobs" => {
                // The runtime knob registry (hip/knobs.h), the same table as the README's.
                print!("{}", hipfp8::knobs::markdown_table());
                std::process::exit(0);
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(a)
}

/// One line of the table.
struct Row {
    op: String,
    shape: String,
    /// Median seconds per call; None when the op was not run (see `check`).
    secs: Option<f64>,
    bytes: f64,
    flops: f64,
    /// The oracle comparison, e.g. "exact" or "17 bytes, 0 scales differ".
    check: String,
    ok: bool,
}

// ---------------------------------------------------------------------------- inputs

/// Deterministic pseudo-normal values; rows get different magnitudes so scales differ.
fn gen_f32(n: usize, row_len: usize, seed: u64) -> Vec<f32> {
    let mut v = vec![0f32; n];
    v.par_chunks_mut(1 << 16).enumerate().for_each(|(ci, ch)| {
        let mut s = seed ^ (ci as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for (i, o) in ch.iter_mut().enumerate() {
            let mut u = 0f32;
            for _ in 0..4 {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                u += (s >> 40) as f32 / (1u64 << 24) as f32;
            }
            let idx = ci * (1 << 16) + i;
            let row = idx / row_len.max(1);
            *o = (u - 2.0) * 1.7 * f32::powi(2.0, (row % 9) as i32 - 4);
        }
    });
    v
}

fn gen_bf16(n: usize, row_len: usize, seed: u64) -> Vec<bf16> {
    gen_f32(n, row_len, seed)
        .par_iter()
        .map(|&x| bf16::from_f32(x))
        .collect()
}

/// END offsets of `g` groups over `total`: Zipf-like sizes (s = 1.2) in multiples of 16 with
/// two empty groups when `skewed`, else equal sizes.
fn group_offs(total: usize, g: usize, skewed: bool) -> Vec<i32> {
    if !skewed {
        return (1..=g).map(|i| (total * i / g) as i32).collect();
    }
    let w: Vec<f64> = (0..g).map(|i| 1.0 / ((i + 1) as f64).powf(1.2)).collect();
    let sum: f64 = w.iter().sum();
    let mut sizes: Vec<usize> = w
        .iter()
        .map(|x| ((x / sum * total as f64) as usize) / 16 * 16)
        .collect();
    if g >= 4 {
        sizes[g - 2] = 0;
        sizes[g - 3] = 0;
    }
    let used: usize = sizes.iter().sum();
    sizes[0] += total - used;
    sizes
        .iter()
        .scan(0, |end, s| {
            *end += s;
            Some(*end as i32)
        })
        .collect()
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn groups_of(offs: &[i32]) -> Vec<(usize, usize)> {
    let mut s = 0;
    offs.iter()
        .map(|&e| {
            let r = (s, e as usize);
            s = e as usize;
            r
        })
        .collect()
}

/// Padded END offsets (every group rounded up to a multiple of 16 rows) and the rows they
/// cover.
fn padded_ends(offs: &[i32]) -> (Vec<i32>, usize) {
    let mut ends = Vec::new();
    let mut rows = 0;
    for (a, b) in groups_of(offs) {
        rows += (b - a).div_ceil(16) * 16;
        ends.push(rows as i32);
    }
    (ends, rows)
}

/// Every output row of groups laid out back to back up to `ends` (the END offsets of the
/// output rows; `offs` itself when unpadded): `f(group, output row, its input row or None
/// for a padding row)`.
fn for_padded_rows(offs: &[i32], ends: &[i32], mut f: impl FnMut(usize, usize, Option<usize>)) {
    let mut ps = 0;
    for (gi, ((a, b), &pe)) in groups_of(offs).into_iter().zip(ends).enumerate() {
        for pr in ps..pe as usize {
            let src = a + (pr - ps);
            f(gi, pr, (src < b).then_some(src));
        }
        ps = pe as usize;
    }
}

// ---------------------------------------------------------------------------- oracle

/// A visitor over every written output element of a scalar-scale op:
/// (output id, output index, input id, input index or NONE for a padding zero, scale index).
type Visit<'v> = &'v mut dyn FnMut(usize, usize, usize, usize, usize);

/// Recompute amax -> scale -> encode for every group from the inputs and compare with the
/// op's outputs. Returns (bytes that differ, scales that differ).
fn oracle_scalar(
    fmt: Fp8Format,
    pow2: bool,
    xs: &[&[bf16]],
    outs: &[&[u8]],
    scales: &[f32],
    visit: &dyn Fn(Visit),
) -> (usize, usize) {
    let val = |inp: usize, xi: usize| {
        if xi == NONE {
            0.0
        } else {
            xs[inp][xi].to_f32()
        }
    };
    let mut amax = vec![0f32; scales.len()];
    visit(&mut |_, _, inp, xi, g| amax[g] = amax_combine(amax[g], val(inp, xi)));
    let want: Vec<f32> = amax.iter().map(|&a| amax_to_scale(a, fmt, pow2)).collect();
    let bad_scales = want
        .iter()
        .zip(scales)
        .filter(|(w, s)| w.to_bits() != s.to_bits() && !(w.is_nan() && s.is_nan()))
        .count();
    let mut bad = 0;
    visit(&mut |o, oi, inp, xi, g| {
        if outs[o][oi] != fmt.encode(val(inp, xi) * want[g]) {
            bad += 1;
        }
    });
    (bad, bad_scales)
}

fn verdict(bad_bytes: usize, bad_scales: usize) -> (String, bool) {
    if bad_bytes == 0 && bad_scales == 0 {
        ("exact".into(), true)
    } else {
        (
            format!("{bad_bytes} bytes, {bad_scales} scales differ"),
            false,
        )
    }
}

/// docs/OPS.md "MXFP8": the E8M0 code of a block and the multiplier its data is encoded with.
fn mx_rule(amax: f32, fmt: Fp8Format, r: MxRounding) -> (u8, f32) {
    let emax = if fmt == Fp8Format::E4M3Fn { 8 } else { 15 };
    if amax.is_nan() {
        return (
            0xFF,
            if r == MxRounding::Floor {
                0.0
            } else {
                f32::NAN
            },
        );
    }
    let p2 = |e: i32| (2f64).powi(e) as f32;
    if r == MxRounding::Floor {
        let e = (((amax.to_bits() >> 23) & 0xFF) as i32 - 127 - emax).clamp(-127, 128);
        return ((e + 127) as u8, p2(-e.max(-126)));
    }
    if amax.is_infinite() {
        return (0xFE, p2(-127));
    }
    let d = amax / fmt.max_finite();
    let e = if d == 0.0 {
        -127
    } else {
        // smallest e with d <= 2^e, exactly in f64
        let mut e = (d as f64).log2().floor() as i32 - 1;
        while (d as f64) > (2f64).powi(e) {
            e += 1;
        }
        e.clamp(-127, 127)
    };
    if e == -127 {
        (0, 1.0)
    } else {
        ((e + 127) as u8, p2(-e))
    }
}

// ---------------------------------------------------------------------------- buffers

/// Memory of the context's kind: host vectors for the CPU backend, device buffers for a GPU.
enum Buf<T: DeviceCopy> {
    Host(Vec<T>),
    Dev(DeviceBuffer<T>),
}

impl<T: DeviceCopy + Default> Buf<T> {
    fn src(&self) -> Src<'_, T> {
        match self {
            Buf::Host(v) => v.as_slice().into(),
            Buf::Dev(d) => d.src(),
        }
    }
    fn dst(&mut self) -> Dst<'_, T> {
        match self {
            Buf::Host(v) => v.as_mut_slice().into(),
            Buf::Dev(d) => d.dst(),
        }
    }
    /// The contents, on the host.
    fn get(&self) -> Result<Vec<T>, String> {
        match self {
            Buf::Host(v) => Ok(v.clone()),
            Buf::Dev(d) => d.to_vec().map_err(|e| e.to_string()),
        }
    }
}

impl Buf<bf16> {
    fn hp(&self) -> HpSrc<'_> {
        HpSrc::Bf16(self.src())
    }
}

/// A grouped GEMM case on the host: the op and its groups, FP8 codes, END offsets, DEQUANT
/// scales, the output's length.
struct GemmCase {
    op: GroupedOp,
    groups: usize,
    flops: f64,
    a: Vec<u8>,
    b: Vec<u8>,
    offs: Vec<i32>,
    sa: Vec<f32>,
    sb: Vec<f32>,
    out_len: usize,
}

/// A GEMM case staged in the context's memory, with its output.
struct GemmBufs {
    a: Buf<u8>,
    b: Buf<u8>,
    offs: Buf<i32>,
    sa: Buf<f32>,
    sb: Buf<f32>,
    out: Buf<bf16>,
}

/// The arguments of a GEMM launch: a, b, offs, scale_a, scale_b, out.
type GemmArgs<'a> = (
    Src<'a, u8>,
    Src<'a, u8>,
    Src<'a, i32>,
    Src<'a, f32>,
    Src<'a, f32>,
    Dst<'a, bf16>,
);

impl GemmBufs {
    fn args(&mut self) -> GemmArgs<'_> {
        let (a, b, offs) = (self.a.src(), self.b.src(), self.offs.src());
        (a, b, offs, self.sa.src(), self.sb.src(), self.out.dst())
    }
}

// ---------------------------------------------------------------------------- ops

struct Bench<'c> {
    ctx: &'c Context,
    /// GPU contexts: the stream every op runs on (timed with events).
    stream: Option<Stream>,
    fmt: Fp8Format,
    p: CastParams,
    pow2: bool,
    budget: f64,
    rows: Vec<Row>,
    json: bool,
}

/// What a case measured: seconds per call (None: not run), bytes and flops per call, the
/// oracle comparison.
struct Measured {
    secs: Option<f64>,
    bytes: usize,
    flops: f64,
    check: (String, bool),
}

type OpResult = Result<Measured, String>;

/// A case that ran: `secs` per call, `bytes` and `flops` per call, the check.
fn done(secs: f64, bytes: usize, flops: f64, check: (String, bool)) -> OpResult {
    Ok(Measured {
        secs: Some(secs),
        bytes,
        flops,
        check,
    })
}

impl Bench<'_> {
    fn put<T: DeviceCopy + Default>(&self, v: &[T]) -> Result<Buf<T>, String> {
        match self.ctx.backend() {
            BackendKind::Cpu => Ok(Buf::Host(v.to_vec())),
            BackendKind::Gpu => DeviceBuffer::from_host(self.ctx, v)
                .map(Buf::Dev)
                .map_err(|e| e.to_string()),
        }
    }

    fn zeros<T: DeviceCopy + Default>(&self, n: usize) -> Result<Buf<T>, String> {
        self.put(&vec![T::default(); n])
    }

    fn stream(&self) -> StreamRef {
        self.stream.as_ref().map(|s| s.handle()).unwrap_or_default()
    }

    /// Seconds per call of `f` (which launches one op on `stream`), after a warm-up call.
    /// CPU: median wall time of at least 3 calls, more while under budget. GPU: events around
    /// a batch of back-to-back launches, sized from a first timed call; the mean per call.
    fn time(&self, mut f: impl FnMut(StreamRef) -> hipfp8::Result<()>) -> Result<f64, String> {
        let e = |e: hipfp8::Error| e.to_string();
        let st = self.stream();
        f(st).map_err(e)?;
        match &self.stream {
            None => {
                let start = Instant::now();
                let mut ts = Vec::new();
                while ts.len() < 3 || (start.elapsed().as_secs_f64() < self.budget && ts.len() < 50)
                {
                    let t = Instant::now();
                    f(st).map_err(e)?;
                    ts.push(t.elapsed().as_secs_f64());
                }
                ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
                Ok(ts[ts.len() / 2])
            }
            Some(s) => {
                let (a, b) = (
                    Event::new(self.ctx).map_err(e)?,
                    Event::new(self.ctx).map_err(e)?,
                );
                let mut batch = |n: usize| -> Result<f64, String> {
                    a.record(s).map_err(e)?;
                    for _ in 0..n {
                        f(st).map_err(e)?;
                    }
                    b.record(s).map_err(e)?;
                    b.synchronize().map_err(e)?;
                    Ok(a.elapsed_ms(&b).map_err(e)? as f64 * 1e-3 / n as f64)
                };
                let first = batch(1)?;
                let n = ((self.budget / first.max(1e-6)) as usize).clamp(3, 200);
                batch(n)
            }
        }
    }

    fn push(&mut self, op: &str, shape: &str, m: Measured) {
        if !self.json {
            eprintln!("  {op} {shape}: {}", m.check.0);
        }
        self.rows.push(Row {
            op: op.into(),
            shape: shape.into(),
            secs: m.secs,
            bytes: m.bytes as f64,
            flops: m.flops,
            check: m.check.0,
            ok: m.check.1,
        });
    }

    /// Run one op case and record its row; an error (from allocation, the op or a copy)
    /// becomes a failed row.
    fn run(&mut self, op: &str, shape: String, f: impl FnOnce(&Self, &str) -> OpResult) {
        eprintln!("running {op} {shape} ...");
        let m = f(self, op).unwrap_or_else(|e| Measured {
            secs: None,
            bytes: 0,
            flops: 0.0,
            check: (format!("error: {e}"), false),
        });
        self.push(op, &shape, m);
    }

    /// A scalar-scale cast of the bf16 input `x` into `x.len()` codes and `ns` scales:
    /// stage it, time `launch` (input, codes, scales, stream), compare with the oracle over
    /// `visit`. Seconds per call and (bytes, scales) that differ.
    fn scalar_cast(
        &self,
        x: &[bf16],
        ns: usize,
        mut launch: impl FnMut(HpSrc<'_>, Dst<'_, u8>, Dst<'_, f32>, StreamRef) -> hipfp8::Result<()>,
        visit: &dyn Fn(Visit),
    ) -> Result<(f64, (usize, usize)), String> {
        let xb = self.put(x)?;
        let (mut ob, mut sb) = (self.zeros::<u8>(x.len())?, self.zeros::<f32>(ns)?);
        let t = self.time(|st| launch(xb.hp(), ob.dst(), sb.dst(), st))?;
        let (o, s) = (ob.get()?, sb.get()?);
        Ok((
            t,
            oracle_scalar(self.fmt, self.pow2, &[x], &[&o], &s, visit),
        ))
    }

    fn rowwise_2d(&self, m: usize, k: usize) -> OpResult {
        let x = gen_bf16(m * k, k, 1);
        let (t, r) = self.scalar_cast(
            &x,
            m,
            |x, o, s, st| self.ctx.rowwise_2d(&self.p, m, k, x, o, s, st),
            &|v: Visit| {
                for i in 0..m {
                    for j in 0..k {
                        v(0, i * k + j, 0, i * k + j, i);
                    }
                }
            },
        )?;
        done(t, 3 * m * k + 4 * m, 0.0, verdict(r.0, r.1))
    }

    fn tensorwise(&self, m: usize, k: usize) -> OpResult {
        let n = m * k;
        let x = gen_bf16(n, k, 2);
        let xb = self.put(&x)?;
        let (mut ob, mut sb, mut ab) = (
            self.zeros::<u8>(n)?,
            self.zeros::<f32>(1)?,
            self.zeros::<f32>(1)?,
        );
        let t = self.time(|st| {
            self.ctx
                .tensorwise(&self.p, n, xb.hp(), ob.dst(), sb.dst(), ab.dst(), st)
        })?;
        let (o, s, a) = (ob.get()?, sb.get()?, ab.get()?);
        let (bb, mut bs) = oracle_scalar(self.fmt, self.pow2, &[&x], &[&o], &s, &|v: Visit| {
            for i in 0..n {
                v(0, i, 0, i, 0);
            }
        });
        let amax = x.iter().fold(0f32, |acc, v| amax_combine(acc, v.to_f32()));
        bs += usize::from(amax.to_bits() != a[0].to_bits());
        done(t, 3 * n + 8, 0.0, verdict(bb, bs))
    }

    fn cast_transpose(&self, m: usize, k: usize, scaling: Scaling) -> OpResult {
        let tw = scaling == Scaling::Tensorwise;
        let x = gen_bf16(m * k, k, 3);
        let xb = self.put(&x)?;
        let (mut ob, mut otb) = (self.zeros::<u8>(m * k)?, self.zeros::<u8>(m * k)?);
        let (ns, nst) = if tw { (1, 1) } else { (m, k) };
        let (mut sb, mut stb) = (self.zeros::<f32>(ns)?, self.zeros::<f32>(nst)?);
        let t = self.time(|st| {
            self.ctx.cast_transpose(
                &self.p,
                scaling,
                m,
                k,
                xb.hp(),
                ob.dst(),
                otb.dst(),
                sb.dst(),
                stb.dst(),
                st,
            )
        })?;
        let (o, ot) = (ob.get()?, otb.get()?);
        let all: Vec<f32> = sb.get()?.into_iter().chain(stb.get()?).collect();
        let r = oracle_scalar(self.fmt, self.pow2, &[&x], &[&o, &ot], &all, &|v: Visit| {
            for i in 0..m {
                for j in 0..k {
                    v(0, i * k + j, 0, i * k + j, if tw { 0 } else { i });
                    v(1, j * m + i, 0, i * k + j, if tw { ns } else { ns + j });
                }
            }
        });
        done(t, 4 * m * k + 4 * all.len(), 0.0, verdict(r.0, r.1))
    }

    /// Delayed scaling: a given scale of twice the exact one (as if amax had halved since the
    /// history was taken), so the largest values saturate; codes, transpose and amax checked.
    fn cast_transpose_scaled(&self, m: usize, k: usize) -> OpResult {
        let x = gen_bf16(m * k, k, 3);
        let amax = x.iter().fold(0f32, |acc, v| amax_combine(acc, v.to_f32()));
        let given = 2.0 * amax_to_scale(amax, self.fmt, false);
        let xb = self.put(&x)?;
        let gb = self.put(&[given])?;
        let (mut ob, mut otb) = (self.zeros::<u8>(m * k)?, self.zeros::<u8>(m * k)?);
        let mut ab = self.zeros::<f32>(1)?;
        let pg = CastParams::new(self.p.format, false);
        let t = self.time(|st| {
            self.ctx.cast_transpose_scaled(
                &pg,
                m,
                k,
                xb.hp(),
                gb.src(),
                ob.dst(),
                otb.dst(),
                ab.dst(),
                st,
            )
        })?;
        let (o, ot, a) = (ob.get()?, otb.get()?, ab.get()?);
        let mut bad = 0;
        for i in 0..m {
            for j in 0..k {
                let want = self.fmt.encode(x[i * k + j].to_f32() * given);
                bad += usize::from(o[i * k + j] != want) + usize::from(ot[j * m + i] != want);
            }
        }
        let bad_amax = usize::from(a[0].to_bits() != amax.to_bits());
        done(t, 4 * m * k + 8, 0.0, verdict(bad, bad_amax))
    }

    /// `per_group_colwise` (groups along the rows of the (m, k) input, a scale per group and
    /// column) or `per_group_rowwise` (groups along its columns, a scale per group and row).
    fn per_group(&self, op: &str, m: usize, k: usize, g: usize, skewed: bool) -> OpResult {
        let rowwise = op == "per_group_rowwise";
        let x = gen_bf16(m * k, k, if rowwise { 7 } else { 4 });
        let offs = group_offs(if rowwise { k } else { m }, g, skewed);
        let ns = g * if rowwise { m } else { k };
        let offb = self.put(&offs)?;
        let (t, r) = self.scalar_cast(
            &x,
            ns,
            |x, o, s, st| {
                let offs = offb.src();
                if rowwise {
                    self.ctx.per_group_rowwise(&self.p, m, k, x, offs, o, s, st)
                } else {
                    self.ctx.per_group_colwise(&self.p, m, k, x, offs, o, s, st)
                }
            },
            &|v: Visit| {
                for (gi, (a, b)) in groups_of(&offs).into_iter().enumerate() {
                    if rowwise {
                        for r in 0..m {
                            for c in a..b {
                                v(0, r * k + c, 0, r * k + c, gi * m + r);
                            }
                        }
                    } else {
                        for r in a..b {
                            for c in 0..k {
                                v(0, c * m + r, 0, r * k + c, gi * k + c);
                            }
                        }
                    }
                }
            },
        )?;
        done(t, 3 * m * k + 4 * ns, 0.0, verdict(r.0, r.1))
    }

    /// `per_group_colwise_dual`, or `per_group_colwise_dual_padded`: every group's rows
    /// rounded up to a multiple of 16 in outputs of `m_cap` rows (zeros in the padding and
    /// past the last group), the padded END offsets written.
    fn per_group_colwise_dual(
        &self,
        op: &str,
        m: usize,
        k1: usize,
        k2: usize,
        g: usize,
        skewed: bool,
    ) -> OpResult {
        let padded = op == "per_group_colwise_dual_padded";
        let (seed1, seed2) = if padded { (12, 13) } else { (5, 6) };
        let (x1, x2) = (gen_bf16(m * k1, k1, seed1), gen_bf16(m * k2, k2, seed2));
        let offs = group_offs(m, g, skewed);
        let m_cap = if padded {
            (m + 15 * g).next_multiple_of(16)
        } else {
            m
        };
        let (x1b, x2b, offb) = (self.put(&x1)?, self.put(&x2)?, self.put(&offs)?);
        let (mut o1b, mut s1b) = (self.zeros::<u8>(m_cap * k1)?, self.zeros::<f32>(g * k1)?);
        let (mut o2b, mut s2b) = (self.zeros::<u8>(m_cap * k2)?, self.zeros::<f32>(g * k2)?);
        let mut pb = if padded {
            Some(self.zeros::<i32>(g)?)
        } else {
            None
        };
        let t = self.time(|st| {
            let (x1, x2, offs) = (x1b.hp(), x2b.hp(), offb.src());
            let (o1, s1, o2, s2) = (o1b.dst(), s1b.dst(), o2b.dst(), s2b.dst());
            let p = &self.p;
            match &mut pb {
                Some(pb) => self.ctx.per_group_colwise_dual_padded(
                    p,
                    m,
                    k1,
                    k2,
                    m_cap,
                    x1,
                    x2,
                    offs,
                    o1,
                    s1,
                    o2,
                    s2,
                    pb.dst(),
                    st,
                ),
                None => self
                    .ctx
                    .per_group_colwise_dual(p, m, k1, k2, x1, x2, offs, o1, s1, o2, s2, st),
            }
        })?;
        let (o1, o2) = (o1b.get()?, o2b.get()?);
        let all: Vec<f32> = s1b.get()?.into_iter().chain(s2b.get()?).collect();
        let (ends, rows) = if padded {
            padded_ends(&offs)
        } else {
            (offs.clone(), m)
        };
        let (bb, mut bs) = oracle_scalar(
            self.fmt,
            self.pow2,
            &[&x1, &x2],
            &[&o1, &o2],
            &all,
            &|v: Visit| {
                for_padded_rows(&offs, &ends, |gi, pr, src| {
                    for c in 0..k1 {
                        let xi = src.map_or(NONE, |r| r * k1 + c);
                        v(0, c * m_cap + pr, 0, xi, gi * k1 + c);
                    }
                    for c in 0..k2 {
                        let xi = src.map_or(NONE, |r| r * k2 + c);
                        v(1, c * m_cap + pr, 1, xi, g * k1 + gi * k2 + c);
                    }
                });
            },
        );
        // The rows past the last (padded) group are zero.
        let tail = |o: &[u8], k: usize| {
            (0..k)
                .map(|c| {
                    o[c * m_cap + rows..(c + 1) * m_cap]
                        .iter()
                        .filter(|&&b| b != 0)
                        .count()
                })
                .sum::<usize>()
        };
        let bb = bb + tail(&o1, k1) + tail(&o2, k2);
        if let Some(pb) = &pb {
            bs += usize::from(pb.get()? != ends);
        }
        done(
            t,
            2 * m * (k1 + k2) + m_cap * (k1 + k2) + 4 * all.len(),
            0.0,
            verdict(bb, bs),
        )
    }

    fn expert_3d(&self, op: &str, e: usize, k: usize, n: usize) -> OpResult {
        let transpose_rhs = op == "rowwise_3d_transpose_rhs";
        let x = gen_bf16(e * k * n, k, 8);
        let ns = if transpose_rhs { e * k } else { e * n };
        let (t, r) = self.scalar_cast(
            &x,
            ns,
            |x, o, s, st| {
                if transpose_rhs {
                    self.ctx
                        .rowwise_3d_transpose_rhs(&self.p, e, k, n, x, o, s, st)
                } else {
                    self.ctx.colwise_3d(&self.p, e, k, n, x, o, s, st)
                }
            },
            &|v: Visit| {
                for ei in 0..e {
                    for nn in 0..n {
                        for kk in 0..k {
                            let xi = ei * k * n + nn * k + kk;
                            if transpose_rhs {
                                v(0, ei * n * k + kk * n + nn, 0, xi, ei * k + kk);
                            } else {
                                v(0, xi, 0, xi, ei * n + nn);
                            }
                        }
                    }
                }
            },
        )?;
        done(t, 3 * e * k * n + 4 * ns, 0.0, verdict(r.0, r.1))
    }

    fn blockwise(&self, op: &str, m: usize, k: usize) -> OpResult {
        let square = op == "blockwise_128x128";
        let x = gen_bf16(m * k, k, 9);
        let kb = k.div_ceil(128);
        let ns = if square { m.div_ceil(128) * kb } else { m * kb };
        let (t, r) = self.scalar_cast(
            &x,
            ns,
            |x, o, s, st| {
                if square {
                    self.ctx.blockwise_128x128(&self.p, m, k, x, o, s, st)
                } else {
                    self.ctx.blockwise_1x128(&self.p, m, k, x, o, s, st)
                }
            },
            &|v: Visit| {
                for i in 0..m {
                    for j in 0..k {
                        let g = if square {
                            (i / 128) * kb + j / 128
                        } else {
                            i * kb + j / 128
                        };
                        v(0, i * k + j, 0, i * k + j, g);
                    }
                }
            },
        )?;
        done(t, 3 * m * k + 4 * ns, 0.0, verdict(r.0, r.1))
    }

    fn rowwise_2d_padded(&self, m: usize, k: usize, g: usize, skewed: bool) -> OpResult {
        let x = gen_bf16(m * k, k, 10);
        let offs = group_offs(m, g, skewed);
        let m_cap = m + 15 * g;
        let (xb, offb) = (self.put(&x)?, self.put(&offs)?);
        let (mut ob, mut sb, mut pb) = (
            self.zeros::<u8>(m_cap * k)?,
            self.zeros::<f32>(m_cap)?,
            self.zeros::<i32>(g)?,
        );
        let t = self.time(|st| {
            let (x, offs, o, s, po) = (xb.hp(), offb.src(), ob.dst(), sb.dst(), pb.dst());
            self.ctx
                .rowwise_2d_padded(&self.p, m, k, m_cap, x, offs, o, s, po, st)
        })?;
        let (o, s, po) = (ob.get()?, sb.get()?, pb.get()?);
        let (ends, rows) = padded_ends(&offs);
        let (bb, mut bs) = oracle_scalar(
            self.fmt,
            self.pow2,
            &[&x],
            &[&o],
            &s[..rows],
            &|v: Visit| {
                for_padded_rows(&offs, &ends, |_, pr, src| {
                    for j in 0..k {
                        v(0, pr * k + j, 0, src.map_or(NONE, |r| r * k + j), pr);
                    }
                });
            },
        );
        bs += usize::from(po != ends);
        done(t, 2 * m * k + rows * k + 4 * rows, 0.0, verdict(bb, bs))
    }

    /// The MoE dispatch (route.rs): t tokens, top-`topk` of `g` experts (a fixed shuffle of the
    /// slots, Zipf or equal group sizes that are not multiples of 16), groups padded to 16.
    /// Oracle: the padded layout by its definition, then amax -> scale -> encode per padded
    /// row and per padded group's column; the rows past the last group zero in both layouts.
    fn moe_dispatch(&self, t: usize, k: usize, topk: usize, g: usize, skewed: bool) -> OpResult {
        let m = t * topk;
        let x = gen_bf16(t * k, k, 14);
        // Slot order: i -> i * step mod m with a step coprime to m (a permutation); group
        // ends moved off the multiples of 16 (kept non-decreasing).
        let step = (7919..)
            .step_by(2)
            .find(|s| gcd(*s, m.max(1)) == 1)
            .unwrap_or(1);
        let perm: Vec<i32> = (0..m).map(|i| ((i * step) % m.max(1)) as i32).collect();
        let mut offs = group_offs(m, g, skewed);
        for i in 0..g.saturating_sub(1) {
            let prev = if i == 0 { 0 } else { offs[i - 1] };
            offs[i] = (offs[i] - (i % 7) as i32).max(prev);
        }
        let s = DispatchShape {
            t,
            k,
            topk,
            align: 16,
            m_cap: m + 15 * g,
        };
        let (xb, pb, ob) = (self.put(&x)?, self.put(&perm)?, self.put(&offs)?);
        let (mut padb, mut rowb) = (self.zeros::<i32>(g)?, self.zeros::<i32>(m)?);
        let (mut o1, mut s1) = (self.zeros::<u8>(s.m_cap * k)?, self.zeros::<f32>(s.m_cap)?);
        let (mut o2, mut s2) = (self.zeros::<u8>(s.m_cap * k)?, self.zeros::<f32>(g * k)?);
        let time = self.time(|st| {
            self.ctx.moe_dispatch_dual(
                &self.p.into(),
                s,
                xb.hp(),
                pb.src(),
                ob.src(),
                padb.dst(),
                rowb.dst(),
                o1.dst(),
                s1.dst(),
                o2.dst(),
                s2.dst(),
                st,
            )
        })?;
        let (pad, rows, out, out_col) = (padb.get()?, rowb.get()?, o1.get()?, o2.get()?);
        let ns = s.m_cap;
        let all: Vec<f32> = s1.get()?.into_iter().chain(s2.get()?).collect();
        // The definition: each group's slots in perm order, then zero rows up to 16.
        let (mut want_pad, mut src) = (Vec::new(), vec![NONE; ns]);
        let mut want_rows = vec![-1i32; m];
        let (mut lo, mut at) = (0usize, 0usize);
        for &end in &offs {
            for (i, &sl) in perm[lo..end as usize].iter().enumerate() {
                want_rows[sl as usize] = (at + i) as i32;
                src[at + i] = sl as usize / topk;
            }
            at += (end as usize - lo).div_ceil(16) * 16;
            want_pad.push(at as i32);
            lo = end as usize;
        }
        let (bb, mut bs) = oracle_scalar(
            self.fmt,
            self.pow2,
            &[&x],
            &[&out, &out_col],
            &all,
            &|v: Visit| {
                let mut gs = 0;
                for (gi, &ge) in want_pad.iter().enumerate() {
                    for (pr, &sr) in src.iter().enumerate().take(ge as usize).skip(gs) {
                        for j in 0..k {
                            let xi = if sr == NONE { NONE } else { sr * k + j };
                            v(0, pr * k + j, 0, xi, pr);
                            v(1, j * ns + pr, 0, xi, ns + gi * k + j);
                        }
                    }
                    gs = ge as usize;
                }
                for pr in at..ns {
                    for j in 0..k {
                        v(0, pr * k + j, 0, NONE, pr);
                    }
                }
            },
        );
        let tail_bytes = (0..k)
            .flat_map(|j| (at..ns).map(move |pr| j * ns + pr))
            .filter(|&i| out_col[i] != 0)
            .count();
        bs += usize::from(pad != want_pad) + usize::from(rows != want_rows);
        let bytes = 2 * t * k + 2 * ns * k + 4 * (ns + g * k + m);
        done(time, bytes, 0.0, verdict(bb + tail_bytes, bs))
    }

    fn mxfp8(&self, op: &str, m: usize, k: usize) -> OpResult {
        let dim1 = op.starts_with("mxfp8_dim1");
        let rounding = if op.ends_with("floor") {
            MxRounding::Floor
        } else {
            MxRounding::Rceil
        };
        // MX elements are OCP only: use the OCP flavour of the chosen element width.
        let fmt = match self.fmt {
            Fp8Format::E4M3FnUz => Fp8Format::E4M3Fn,
            Fp8Format::E5M2FnUz => Fp8Format::E5M2,
            f => f,
        };
        let x = gen_bf16(m * k, k, 11);
        let xb = self.put(&x)?;
        let p = MxParams::new(fmt, rounding);
        let ns = if dim1 {
            k * m.div_ceil(32)
        } else {
            m * k.div_ceil(32)
        };
        let (mut ob, mut sb) = (self.zeros::<u8>(m * k)?, self.zeros::<u8>(ns)?);
        let t = self.time(|st| {
            if dim1 {
                self.ctx
                    .mxfp8_dim1(&p, m, k, xb.hp(), ob.dst(), sb.dst(), st)
            } else {
                self.ctx
                    .mxfp8_dim0(&p, m, k, xb.hp(), ob.dst(), sb.dst(), st)
            }
        })?;
        let (o, s) = (ob.get()?, sb.get()?);
        // Oracle: blocks of 32 along k (dim0) or along m (dim1, output (k, m)).
        let (mut bad, mut bad_s) = (0usize, 0usize);
        let (outer, inner) = if dim1 { (k, m) } else { (m, k) };
        let nb = inner.div_ceil(32);
        for a in 0..outer {
            for b in 0..nb {
                let idx: Vec<(usize, usize)> = (b * 32..((b + 1) * 32).min(inner))
                    .map(|i| {
                        if dim1 {
                            (i * k + a, a * m + i)
                        } else {
                            (a * k + i, a * k + i)
                        }
                    })
                    .collect();
                let amax = idx
                    .iter()
                    .fold(0f32, |acc, &(xi, _)| amax_combine(acc, x[xi].to_f32()));
                let (code, mult) = mx_rule(amax, fmt, rounding);
                bad_s += usize::from(s[a * nb + b] != code);
                bad += idx
                    .iter()
                    .filter(|&&(xi, oi)| o[oi] != fmt.encode(x[xi].to_f32() * mult))
                    .count();
            }
        }
        done(t, 3 * m * k + ns, 0.0, verdict(bad, bad_s))
    }

    /// FP8 codes for a GEMM operand (encoded pseudo-normal values).
    fn fp8_operand(&self, n: usize, seed: u64) -> Vec<u8> {
        gen_f32(n, 64, seed)
            .par_iter()
            .map(|&v| self.fmt.encode(v * 16.0))
            .collect()
    }

    /// The operands of a grouped GEMM case (`groups` groups) on Zipf-skewed groups: FP8
    /// codes from `seed` and `seed + 1`, DEQUANT scales `2^-(i % pa + 4)` for a and
    /// `1 / (1 + i % pb)` for b, `lens` = [a, b, scale_a, scale_b]. Err: the row of a case
    /// the CPU backend would take too long for.
    fn gemm_case(
        &self,
        gop: GroupedOp,
        groups: usize,
        lens: [usize; 4],
        (seed, pa, pb): (u64, usize, usize),
    ) -> Result<GemmCase, Measured> {
        let ((x, y, z), extent, out_len) = match gop {
            GroupedOp::TwoD3D { m, n, k } => ((m, k, n), m, m * n),
            GroupedOp::TwoD2D { n, mt, k } => ((n, mt, k), mt, groups * n * k),
            GroupedOp::Blockwise2D3D { .. } | GroupedOp::Blockwise2D2D { .. } => {
                unreachable!("the CLI runs the scalar-scaled GEMMs")
            }
        };
        let flops = 2.0 * (x * y * z) as f64;
        if let Some(skipped) = self.skip_gemm(flops) {
            return Err(skipped);
        }
        Ok(GemmCase {
            op: gop,
            groups,
            flops,
            a: self.fp8_operand(lens[0], seed),
            b: self.fp8_operand(lens[1], seed + 1),
            offs: group_offs(extent, groups, true),
            sa: (0..lens[2])
                .map(|i| f32::powi(2.0, -((i % pa) as i32) - 4))
                .collect(),
            sb: (0..lens[3])
                .map(|i| 1.0 / (1.0 + (i % pb) as f32))
                .collect(),
            out_len,
        })
    }

    /// Run a GEMM case: stage it, plan it, time `launch`, check every output against `want`
    /// (the f64 reference of output `i`, given the decode table of the format).
    fn gemm(
        &self,
        c: &GemmCase,
        mut launch: impl FnMut(&Context, &GemmParams, &mut GemmBufs, StreamRef) -> hipfp8::Result<()>,
        want: impl Fn(&[f64], usize) -> f64 + Sync,
    ) -> OpResult {
        let mut d = GemmBufs {
            a: self.put(&c.a)?,
            b: self.put(&c.b)?,
            offs: self.put(&c.offs)?,
            sa: self.put(&c.sa)?,
            sb: self.put(&c.sb)?,
            out: self.zeros(c.out_len)?,
        };
        let gp = GemmParams::new(self.fmt, self.fmt);
        let plan = self
            .ctx
            .grouped_gemm_plan(&gp, c.op, c.groups, None)
            .map_err(|e| e.to_string())?;
        let t = self.time(|st| launch(self.ctx, &gp, &mut d, st))?;
        let out = d.out.get()?;
        // f64 reference on the dequantized operands: every output, or on shapes whose oracle
        // would take more than ORACLE_MACS multiply-adds, every `stride`-th output (an odd
        // stride, so the sample walks through every row, column and group).
        let dec: Vec<f64> = (0..=255u8).map(|c| self.fmt.decode(c) as f64).collect();
        let stride = ((c.flops / 2.0 / ORACLE_MACS).ceil() as usize).max(1) | 1;
        let (err, mag) = out
            .par_iter()
            .enumerate()
            .step_by(stride)
            .map(|(i, o)| {
                let r = want(&dec, i);
                ((o.to_f64() - r).abs(), r.abs())
            })
            .reduce(|| (0.0, 0.0), |x, y| (x.0.max(y.0), x.1.max(y.1)));
        let bytes = c.a.len() + c.b.len() + 2 * c.out_len + 4 * (c.sa.len() + c.sb.len());
        let (mut text, ok) = gemm_verdict(err, mag, &plan);
        if stride > 1 {
            text = format!("{text} (1 output in {stride} checked)");
        }
        done(t, bytes, c.flops, (text, ok))
    }

    fn gemm_2d3d(&self, m: usize, k: usize, n: usize, e: usize) -> OpResult {
        let gop = GroupedOp::TwoD3D { m, n, k };
        let lens = [m * k, e * k * n, m, e * n];
        let c = match self.gemm_case(gop, e, lens, (12, 5, 7)) {
            Ok(c) => c,
            Err(skipped) => return Ok(skipped),
        };
        let mut group_of_row = vec![0usize; m];
        for (g, (r0, r1)) in groups_of(&c.offs).into_iter().enumerate() {
            group_of_row[r0..r1].iter_mut().for_each(|x| *x = g);
        }
        let launch = |ctx: &Context, gp: &GemmParams, d: &mut GemmBufs, st| {
            let (a, b, offs, sa, sb, out) = d.args();
            ctx.grouped_gemm_2d3d(gp, m, k, n, e, a, b, offs, sa, sb, out, st)
        };
        self.gemm(&c, launch, |dec, idx| {
            let (i, j) = (idx / n, idx % n);
            let g = group_of_row[i];
            let bcol = &c.b[g * n * k + j * k..][..k];
            let dot: f64 = c.a[i * k..][..k]
                .iter()
                .zip(bcol)
                .map(|(&x, &y)| dec[x as usize] * dec[y as usize])
                .sum();
            dot * c.sa[i] as f64 * c.sb[g * n + j] as f64
        })
    }

    fn gemm_2d2d(&self, n: usize, mt: usize, k: usize, g: usize) -> OpResult {
        let gop = GroupedOp::TwoD2D { n, mt, k };
        let lens = [n * mt, mt * k, g * n, g * k];
        let c = match self.gemm_case(gop, g, lens, (14, 3, 5)) {
            Ok(c) => c,
            Err(skipped) => return Ok(skipped),
        };
        let groups = groups_of(&c.offs);
        let launch = |ctx: &Context, gp: &GemmParams, d: &mut GemmBufs, st| {
            let (a, b, offs, sa, sb, out) = d.args();
            ctx.grouped_gemm_2d2d(gp, n, mt, k, a, b, offs, sa, sb, out, st)
        };
        self.gemm(&c, launch, |dec, idx| {
            // out[(gg * n + i) * k + j]
            let (gg, i, j) = (idx / (n * k), idx / k % n, idx % k);
            let (m0, m1) = groups[gg];
            let dot: f64 = (m0..m1)
                .map(|q| dec[c.a[i * mt + q] as usize] * dec[c.b[j * mt + q] as usize])
                .sum();
            dot * c.sa[gg * n + i] as f64 * c.sb[gg * k + j] as f64
        })
    }

    /// The CPU backend's reference GEMM is not meant for DeepSeek-size problems: the row of
    /// a case not run.
    fn skip_gemm(&self, flops: f64) -> Option<Measured> {
        (self.ctx.backend() == BackendKind::Cpu && flops > 2e10).then(|| Measured {
            secs: None,
            bytes: 0,
            flops,
            check: (
                format!("not run: {flops:.1e} FLOP is too much for the CPU backend"),
                true,
            ),
        })
    }
}

/// bf16 output of f32-accumulated sums: error relative to the largest output within 2^-7
/// (bf16 rounding alone is up to 2^-8 of a value; the rest is accumulation-order slack).
/// The oracle comparison, with the implementation that ran (no silent slow path).
/// Multiply-adds the CLI's f64 GEMM oracle spends on one case at most (tens of seconds on
/// a few cores); larger cases check a strided sample of their outputs.
const ORACLE_MACS: f64 = 2e10;

fn gemm_verdict(err: f64, mag: f64, plan: &GemmPlan) -> (String, bool) {
    let rel = if mag > 0.0 { err / mag } else { err };
    (
        format!("max rel err {rel:.1e} [{}]", plan.describe()),
        rel <= 2f64.powi(-7),
    )
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("error: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    // CPU backend: host vectors, wall-clock medians. GPU backend: inputs staged in device
    // buffers, ops launched on one stream and timed with events, outputs copied back for the
    // oracle (not yet run on a GPU: the GPU ops arrive with issues 5 and 6).
    let ctx = Context::best();
    let fmt = ctx.resolve(args.format);
    let header = format!(
        "hipfp8 {} | backend {:?} | device {} | arch {} | native FP8 {} / {} | format {} | pow2 scales {} | shapes {}",
        env!("CARGO_PKG_VERSION"),
        ctx.backend(),
        ctx.device_name(),
        ctx.arch(),
        ctx.native_format(),
        ctx.resolve(FormatChoice::AutoE5M2),
        fmt,
        args.pow2,
        if args.shapes == Shapes::Small {
            "small"
        } else {
            "bench"
        },
    );
    eprintln!("{header}");
    let stream = match ctx.backend() {
        BackendKind::Cpu => None,
        BackendKind::Gpu => match Stream::new(&ctx) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!(
                    "error: cannot create a stream on {}: {e}",
                    ctx.device_name()
                );
                return ExitCode::FAILURE;
            }
        },
    };
    let small = args.shapes == Shapes::Small;
    let mut b = Bench {
        ctx: &ctx,
        stream,
        fmt,
        p: CastParams::new(fmt, args.pow2),
        pow2: args.pow2,
        // per op: CPU wall-clock budget; GPU: the batch is sized to about this long
        budget: match (small, ctx.backend()) {
            (true, BackendKind::Cpu) => 0.05,
            (false, BackendKind::Cpu) => 1.0,
            _ => 0.05,
        },
        rows: Vec::new(),
        json: args.json,
    };
    // Small: awkward sizes (partial 32/128 blocks), Zipf-skewed groups with empty ones.
    // Bench: the DeepSeek-V3 / Llama3-8B shapes of the benchmark plan, balanced groups
    // (rowwise_2d_padded and the GEMMs use Zipf-skewed groups in both).
    let (m, h, i) = if small {
        (2048, 1000, 512)
    } else {
        (32768, 7168, 2048)
    };
    let (g, skew) = if small { (8, true) } else { (32, false) };
    let (dm, dk) = if small { (1024, 1000) } else { (8192, 4096) };
    let rm = if small { 1024 } else { m };
    b.run("rowwise_2d", format!("({rm},{h})"), |b, _| {
        b.rowwise_2d(rm, h)
    });
    b.run("tensorwise", format!("({dm},{dk})"), |b, _| {
        b.tensorwise(dm, dk)
    });
    for (name, sc) in [
        ("cast_transpose tensorwise", Scaling::Tensorwise),
        ("cast_transpose rowwise", Scaling::Rowwise),
    ] {
        b.run(name, format!("({dm},{dk})"), |b, _| {
            b.cast_transpose(dm, dk, sc)
        });
    }
    b.run(
        "cast_transpose given scale",
        format!("({dm},{dk})"),
        |b, _| b.cast_transpose_scaled(dm, dk),
    );
    let ck = if small { 512 } else { h };
    b.run(
        "per_group_colwise",
        format!("({m},{ck}) {g} groups"),
        |b, op| b.per_group(op, m, ck, g, skew),
    );
    let (k1, k2) = if small { (256, 384) } else { (i, h) };
    b.run(
        "per_group_colwise_dual",
        format!("({m},{k1})+({m},{k2}) {g} groups"),
        |b, op| b.per_group_colwise_dual(op, m, k1, k2, g, skew),
    );
    // The padded wgrad cast on Zipf-skewed (unaligned) groups in both shape sets.
    b.run(
        "per_group_colwise_dual_padded",
        format!("({m},{k1})+({m},{k2}) {g} groups"),
        |b, op| b.per_group_colwise_dual(op, m, k1, k2, g, true),
    );
    let rr = if small { 512 } else { h };
    b.run(
        "per_group_rowwise",
        format!("({rr},{m}) {g} groups"),
        |b, op| b.per_group(op, rr, m, g, skew),
    );
    let (e, ek, en) = if small {
        (8, 512, 200)
    } else {
        (32, 7168, 2048)
    };
    for name in ["colwise_3d", "rowwise_3d_transpose_rhs"] {
        b.run(name, format!("({e},{ek},{en})"), |b, op| {
            b.expert_3d(op, e, ek, en)
        });
    }
    b.run("blockwise_1x128", format!("({dm},{h})"), |b, op| {
        b.blockwise(op, dm, h)
    });
    let (wm, wk) = if small { (300, 1000) } else { (7168, 4096) };
    b.run("blockwise_128x128", format!("({wm},{wk})"), |b, op| {
        b.blockwise(op, wm, wk)
    });
    for name in [
        "mxfp8_dim0 floor",
        "mxfp8_dim0 rceil",
        "mxfp8_dim1 floor",
        "mxfp8_dim1 rceil",
    ] {
        b.run(name, format!("({dm},{h})"), |b, op| b.mxfp8(op, dm, h));
    }
    b.run(
        "rowwise_2d_padded",
        format!("({m},{ck}) {g} groups"),
        |b, _| b.rowwise_2d_padded(m, ck, g, true),
    );
    let (rt, rk) = if small { (300, 256) } else { (4096, h) };
    b.run(
        "moe_dispatch_dual",
        format!("({rt},{rk}) top-8 of {g}, pad 16"),
        |b, _| b.moe_dispatch(rt, rk, 8, g, true),
    );
    let (gm, gk, gn) = if small { (1024, 512, 256) } else { (m, h, i) };
    b.run(
        "grouped_gemm_2d3d",
        format!("({gm},{gk})x({g},{gk},{gn})"),
        |b, _| b.gemm_2d3d(gm, gk, gn, g),
    );
    let (wn, wmt, wkk) = if small { (256, 1024, 512) } else { (i, m, h) };
    b.run(
        "grouped_gemm_2d2d",
        format!("({wn},{wmt})x({wmt},{wkk}) {g} groups"),
        |b, _| b.gemm_2d2d(wn, wmt, wkk, g),
    );

    let all_ok = b.rows.iter().all(|r| r.ok);
    if args.json {
        println!("{}", to_json(&ctx, fmt, &args, &b.rows));
    } else {
        println!("{header}");
        println!(
            "{:<28} {:<34} {:>12} {:>9} {:>9}  check vs oracle",
            "op", "shape", "time", "GB/s", "TFLOP/s"
        );
        for r in &b.rows {
            let (t, gbs, tf) = match r.secs {
                Some(s) => (
                    fmt_time(s),
                    if r.bytes > 0.0 {
                        format!("{:.1}", r.bytes / s / 1e9)
                    } else {
                        "-".into()
                    },
                    if r.flops > 0.0 {
                        format!("{:.3}", r.flops / s / 1e12)
                    } else {
                        "-".into()
                    },
                ),
                None => ("-".into(), "-".into(), "-".into()),
            };
            println!(
                "{:<28} {:<34} {:>12} {:>9} {:>9}  {}",
                r.op, r.shape, t, gbs, tf, r.check
            );
        }
        println!(
            "GB/s counts minimal bytes (inputs read once, outputs written once). {}",
            if all_ok {
                "All checks passed."
            } else {
                "SOME CHECKS FAILED."
            }
        );
    }
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn fmt_time(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.1} us", s * 1e6)
    }
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn to_json(ctx: &Context, fmt: Fp8Format, args: &Args, rows: &[Row]) -> String {
    let num = |v: Option<f64>| v.map(|x| format!("{x:e}")).unwrap_or_else(|| "null".into());
    let rows: Vec<String> = rows
        .iter()
        .map(|r| {
            let gbs = r.secs.filter(|_| r.bytes > 0.0).map(|s| r.bytes / s / 1e9);
            let tf = r.secs.filter(|_| r.flops > 0.0).map(|s| r.flops / s / 1e12);
            format!(
                "{{\"op\":{},\"shape\":{},\"seconds\":{},\"min_bytes\":{},\"gbps\":{},\"tflops\":{},\"check\":{},\"ok\":{}}}",
                json_str(&r.op),
                json_str(&r.shape),
                num(r.secs),
                r.bytes,
                num(gbs),
                num(tf),
                json_str(&r.check),
                r.ok
            )
        })
        .collect();
    format!(
        "{{\"version\":{},\"backend\":{},\"device\":{},\"arch\":{},\"native_format\":{},\"format\":{},\"pow2\":{},\"shapes\":{},\"rows\":[{}]}}",
        json_str(env!("CARGO_PKG_VERSION")),
        json_str(&format!("{:?}", ctx.backend())),
        json_str(ctx.device_name()),
        json_str(ctx.arch()),
        json_str(ctx.native_format().name()),
        json_str(fmt.name()),
        args.pow2,
        json_str(if args.shapes == Shapes::Small {
            "small"
        } else {
            "bench"
        }),
        rows.join(",")
    )
}
