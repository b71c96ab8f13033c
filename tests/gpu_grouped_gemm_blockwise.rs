//! The blockwise-scaled grouped GEMMs (DeepSeek-V3 recipe; docs/OPS.md
//! `grouped_gemm_blockwise_2d3d`, and `_2d2d` in the `wgrad` module): the CPU backend and the C ABI on any machine, and on a GPU
//! the portable reference kernel (bit for bit == the CPU reference) and the vendor library
//! (CUTLASS sm_90; Composable Kernel on gfx942 / gfx950 for 2D x 3D) against the f64 reference
//! and the portable kernel.
//!
//! Without a GPU build or device the GPU tests print `HIPFP8_SKIP ...` and return (with
//! HIPFP8_REQUIRE_GPU=1 they fail instead). On sm_90 with the CUTLASS instance built, AUTO
//! must run CUTLASS for the E4M3 shapes here (a fallback fails).
//!
//! Tolerance per element (written down; S = sum over k of |a b sa sb|, kb = ceil(K/128)):
//! * CPU reference, portable kernel: `2^-8 |ref| + 2 (K + 2 kb) 2^-24 S` (bf16 rounding
//!   doubled for the scale multiplies; f32 summation of K products and kb scaled block sums).
//! * CUTLASS: the same plus `2^-10 S`: Hopper FP8 WGMMA adds each k = 32 step's products with
//!   about 13-14 significant bits (measured 2^-13.3 S per step, tests/gpu_grouped_gemm.rs) and
//!   the partial sums are promoted to f32 every K block of 128 (4 steps), so at most
//!   4 x 2^-12 of each block's S.
//! * Composable Kernel (AMD, 2D x 3D only): held to the same library tolerance (its MFMAs
//!   accumulate in f32, so the portable kernel's bound is expected to hold too; never run on
//!   an AMD GPU yet, so the written bound is the library one).
//!
//! Plus the global similarity (DeepGEMM's metric) `1 - 2<o, r> / (<o, o> + <r, r>) <= 1e-4`.

#![allow(clippy::needless_range_loop)]

use std::mem::size_of;
use std::ptr::{null, null_mut};

use hipfp8::device::{DeviceBuffer, Stream, gpu_for_tests, skip_test};
use hipfp8::ffi::*;
use hipfp8::{
    CastParams, Context, Fallback, Fp8Format, GemmBackend, GemmImpl, GemmParams, GroupedOp,
    StreamRef, bf16,
};

const SENTINEL: f32 = -768.0;
const BLOCK: usize = 128;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        ((self.next() >> 11) as f64 / (1u64 << 52) as f64 - 1.0) as f32
    }
}

/// One problem: operands, END offsets and DEQUANT scales.
struct Problem {
    fa: Fp8Format,
    fb: Fp8Format,
    m: usize,
    k: usize,
    n: usize,
    offs: Vec<i32>,
    a: Vec<u8>,
    b: Vec<u8>,
    sa: Vec<f32>,
    sb: Vec<f32>,
}

impl Problem {
    fn e(&self) -> usize {
        self.offs.len()
    }

    /// Activations (m, k) and expert weights (e, n, k) of f32 values with a per-row /
    /// per-expert magnitude spread, quantized by the crate's own casts (`blockwise_1x128`,
    /// `blockwise_128x128` per expert, on the CPU); the GEMM's scales are the reciprocals of
    /// the cast scales (the documented convention).
    fn from_casts(fmt: Fp8Format, m: usize, k: usize, n: usize, offs: &[i32], seed: u64) -> Self {
        let cpu = Context::cpu();
        let p = CastParams::new(fmt, false);
        let mut rng = Rng(seed);
        let e = offs.len();
        let (kb, nb) = (k.div_ceil(BLOCK), n.div_ceil(BLOCK));
        let x: Vec<f32> = (0..m * k)
            .map(|i| rng.unit() * 2f32.powi((i / k % 7) as i32 - 3) * (1 + i % 5) as f32)
            .collect();
        let mut a = vec![0u8; m * k];
        let mut s = vec![0f32; m * kb];
        cpu.blockwise_1x128(&p, m, k, (&x).into(), (&mut a).into(), (&mut s).into(), S)
            .unwrap();
        let sa = s.iter().map(|v| 1.0 / v).collect();
        let (mut b, mut sb) = (Vec::new(), Vec::new());
        for g in 0..e {
            let w: Vec<f32> = (0..n * k)
                .map(|i| rng.unit() * 2f32.powi(g as i32 % 3 - 5) * (1 + i % 3) as f32)
                .collect();
            let mut q = vec![0u8; n * k];
            let mut ws = vec![0f32; nb * kb];
            cpu.blockwise_128x128(&p, n, k, (&w).into(), (&mut q).into(), (&mut ws).into(), S)
                .unwrap();
            b.extend(q);
            sb.extend(ws.iter().map(|v| 1.0 / v));
        }
        Problem {
            fa: fmt,
            fb: fmt,
            m,
            k,
            n,
            offs: offs.to_vec(),
            a,
            b,
            sa,
            sb,
        }
    }

    /// Random finite codes of both formats and random (not power-of-two) scales.
    fn random(fa: Fp8Format, fb: Fp8Format, m: usize, k: usize, n: usize, offs: &[i32]) -> Self {
        let mut rng = Rng((m * 31 + k * 7 + n) as u64 ^ (fa as u64) << 40 ^ (fb as u64) << 48);
        let e = offs.len();
        let (kb, nb) = (k.div_ceil(BLOCK), n.div_ceil(BLOCK));
        let codes = |len: usize, f: Fp8Format, rng: &mut Rng| -> Vec<u8> {
            (0..len).map(|_| f.encode(rng.unit() * 6.0)).collect()
        };
        let a = codes(m * k, fa, &mut rng);
        let b = codes(e * n * k, fb, &mut rng);
        let mut scales = |len: usize| -> Vec<f32> {
            (0..len)
                .map(|_| 2f32.powi((rng.next() % 9) as i32 - 4) * (1.0 + rng.unit().abs()))
                .collect()
        };
        let sa = scales(m * kb);
        let sb = scales(e * nb * kb);
        Problem {
            fa,
            fb,
            m,
            k,
            n,
            offs: offs.to_vec(),
            a,
            b,
            sa,
            sb,
        }
    }

    /// Clamped group ranges, exactly as docs/OPS.md defines them.
    fn ranges(&self) -> Vec<(usize, usize)> {
        let mut prev = 0usize;
        self.offs
            .iter()
            .map(|&o| {
                let hi = (o.max(prev as i32) as usize).min(self.m);
                let r = (prev, hi);
                prev = hi;
                r
            })
            .collect()
    }

    /// f64 reference (exact value, S) per written element; None where the sentinel stays.
    fn reference(&self) -> Vec<Option<(f64, f64)>> {
        let (m, k, n) = (self.m, self.k, self.n);
        let (kb, nb) = (k.div_ceil(BLOCK), n.div_ceil(BLOCK));
        let mut refs = vec![None; m * n];
        for (g, (r0, r1)) in self.ranges().into_iter().enumerate() {
            for i in r0..r1 {
                for j in 0..n {
                    let (mut r, mut sabs) = (0f64, 0f64);
                    for kk in 0..k {
                        let q = kk / BLOCK;
                        let sc = self.sa[i * kb + q] as f64
                            * self.sb[(g * nb + j / BLOCK) * kb + q] as f64;
                        let p = self.fa.decode(self.a[i * k + kk]) as f64
                            * self.fb.decode(self.b[g * n * k + j * k + kk]) as f64
                            * sc;
                        r += p;
                        sabs += p.abs();
                    }
                    refs[i * n + j] = Some((r, sabs));
                }
            }
        }
        refs
    }

    fn what(&self, who: &str) -> String {
        format!(
            "{who} m{} k{} n{} offs{:?} {}x{}",
            self.m, self.k, self.n, self.offs, self.fa, self.fb
        )
    }
}

const S: StreamRef = StreamRef::DEFAULT;

/// The per-element tolerance of the module docs (`library`: CUTLASS's extra term).
fn tolerance(exact: f64, s: f64, k: usize, library: bool) -> f64 {
    tolerance_blocks(exact, s, k, k.div_ceil(BLOCK), library)
}

/// The tolerance for a reduction of `k` products in `kb` scaled blocks.
fn tolerance_blocks(exact: f64, s: f64, k: usize, kb: usize, library: bool) -> f64 {
    let acc =
        2.0 * (k + 2 * kb) as f64 * 2f64.powi(-24) + if library { 2f64.powi(-10) } else { 0.0 };
    2f64.powi(-8) * exact.abs() + acc * s
}

/// `got` against the f64 reference: every written element within tolerance, the others
/// untouched, the global similarity <= 1e-4. Panics with examples on a failure.
fn check_f64(p: &Problem, got: &[bf16], library: bool, what: &str) {
    let mut bad = Vec::new();
    let (mut xy, mut xx, mut yy) = (0f64, 0f64, 0f64);
    for (i, (o, r)) in got.iter().zip(p.reference()).enumerate() {
        let o = o.to_f64();
        match r {
            None if o != SENTINEL as f64 => bad.push(format!("[{i}] written ({o})")),
            None => {}
            Some((exact, s)) => {
                let tol = tolerance(exact, s, p.k, library);
                if (o - exact).abs() > tol || o.is_nan() {
                    bad.push(format!("[{i}] {o:e} vs f64 {exact:e} (tol {tol:e})"));
                }
                (xy, xx, yy) = (xy + o * exact, xx + o * o, yy + exact * exact);
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{what}: {} of {} wrong, e.g.\n{}",
        bad.len(),
        got.len(),
        bad[..bad.len().min(8)].join("\n")
    );
    let diff = if xx + yy > 0.0 {
        1.0 - 2.0 * xy / (xx + yy)
    } else {
        0.0
    };
    assert!(diff <= 1e-4, "{what}: similarity diff {diff:e}");
}

fn run_cpu(p: &Problem) -> Vec<bf16> {
    let mut out = vec![bf16::from_f32(SENTINEL); p.m * p.n];
    Context::cpu()
        .grouped_gemm_blockwise_2d3d(
            &GemmParams::new(p.fa, p.fb),
            p.m,
            p.k,
            p.n,
            p.e(),
            (&p.a).into(),
            (&p.b).into(),
            (&p.offs).into(),
            (&p.sa).into(),
            (&p.sb).into(),
            (&mut out).into(),
            S,
        )
        .unwrap();
    out
}

fn run_gpu(ctx: &Context, stream: &Stream, params: &GemmParams, p: &Problem) -> Vec<bf16> {
    let up = |v: &[u8]| DeviceBuffer::from_host(ctx, v).unwrap();
    let upf = |v: &[f32]| DeviceBuffer::from_host(ctx, v).unwrap();
    let (da, db) = (up(&p.a), up(&p.b));
    let doffs = DeviceBuffer::from_host(ctx, &p.offs).unwrap();
    let (dsa, dsb) = (upf(&p.sa), upf(&p.sb));
    let mut dout =
        DeviceBuffer::from_host(ctx, &vec![bf16::from_f32(SENTINEL); p.m * p.n]).unwrap();
    ctx.grouped_gemm_blockwise_2d3d(
        params,
        p.m,
        p.k,
        p.n,
        p.e(),
        da.src(),
        db.src(),
        doffs.src(),
        dsa.src(),
        dsb.src(),
        dout.dst(),
        stream.handle(),
    )
    .unwrap();
    stream.synchronize().unwrap();
    dout.to_vec().unwrap()
}

fn bits(v: &[bf16]) -> Vec<u16> {
    v.iter().map(|x| x.to_bits()).collect()
}

// ---- CPU: the op and the C ABI ---------------------------------------------------------------

/// The CPU backend on operands quantized by the crate's casts (both scale conventions as
/// documented), with partial blocks along K and N, an empty group and rows past the end.
#[test]
fn cpu_op_matches_f64_on_cast_operands() {
    for fmt in [Fp8Format::E4M3Fn, Fp8Format::E5M2] {
        let p = Problem::from_casts(fmt, 150, 300, 200, &[40, 40, 97, 141], 7);
        check_f64(&p, &run_cpu(&p), false, &p.what("cpu"));
    }
    let p = Problem::random(
        Fp8Format::E4M3Fn,
        Fp8Format::E5M2,
        70,
        256,
        136,
        &[3, 3, 64],
    );
    check_f64(&p, &run_cpu(&p), false, &p.what("cpu random"));
}

fn c_call(
    c: *mut hipfp8_context,
    d: &hipfp8_grouped_gemm_blockwise_2d3d_desc,
    p: &Problem,
    sb_len: usize,
    out: &mut [bf16],
) -> hipfp8_status {
    hipfp8_grouped_gemm_blockwise_2d3d(
        c,
        d,
        p.a.as_ptr(),
        p.a.len(),
        p.b.as_ptr(),
        p.b.len(),
        p.offs.as_ptr(),
        p.offs.len(),
        p.sa.as_ptr(),
        p.sa.len(),
        p.sb.as_ptr(),
        sb_len,
        out.as_mut_ptr().cast(),
        out.len(),
        null_mut(),
        0,
        null_mut(),
    )
}

/// The C export == the Rust op bit for bit; its statuses for bad input leave the output
/// untouched; the plan query says the CPU runs; the workspace query says 0.
#[test]
fn c_abi_matches_rust_and_refuses_bad_input() {
    use hipfp8_status::*;
    let mut c = null_mut();
    assert_eq!(
        hipfp8_context_create(hipfp8_backend::HIPFP8_BACKEND_CPU as u32, 0, &mut c),
        HIPFP8_STATUS_SUCCESS
    );
    let p = Problem::from_casts(Fp8Format::E4M3Fn, 90, 260, 130, &[20, 90], 3);
    let d = hipfp8_grouped_gemm_blockwise_2d3d_desc {
        size: size_of::<hipfp8_grouped_gemm_blockwise_2d3d_desc>(),
        a_format: hipfp8_format::HIPFP8_FORMAT_E4M3FN as u32,
        b_format: hipfp8_format::HIPFP8_FORMAT_E4M3FN as u32,
        backend: hipfp8_gemm_backend::HIPFP8_GEMM_BACKEND_AUTO as u32,
        m: p.m,
        k: p.k,
        n: p.n,
        e: p.e(),
    };
    let mut out = vec![bf16::from_f32(SENTINEL); p.m * p.n];
    assert_eq!(
        c_call(c, &d, &p, p.sb.len(), &mut out),
        HIPFP8_STATUS_SUCCESS
    );
    assert_eq!(bits(&out), bits(&run_cpu(&p)));
    // Bad input: nothing written, the status says why.
    let sentinel = vec![bf16::from_f32(SENTINEL); p.m * p.n];
    let cases = [
        (
            d,
            p.sb.len() - 1,
            HIPFP8_STATUS_INPUT_TOO_SMALL,
            "input `scale_b` too small",
        ),
        (
            hipfp8_grouped_gemm_blockwise_2d3d_desc { k: 0, ..d },
            p.sb.len(),
            HIPFP8_STATUS_INVALID_SHAPE,
            "k must be > 0",
        ),
        (
            hipfp8_grouped_gemm_blockwise_2d3d_desc { e: 3, ..d },
            p.sb.len(),
            HIPFP8_STATUS_GROUP_COUNT_MISMATCH,
            "group count mismatch: expected 3, got 2",
        ),
        (
            hipfp8_grouped_gemm_blockwise_2d3d_desc { backend: 7, ..d },
            p.sb.len(),
            HIPFP8_STATUS_INVALID_ENUM,
            "backend = 7",
        ),
        (
            hipfp8_grouped_gemm_blockwise_2d3d_desc { size: 8, ..d },
            p.sb.len(),
            HIPFP8_STATUS_INVALID_DESCRIPTOR,
            "",
        ),
    ];
    check_refusals(
        "hipfp8_grouped_gemm_blockwise_2d3d",
        &sentinel,
        &cases,
        |dd, sb_len, o| c_call(c, dd, &p, sb_len, o),
    );
    // Plan and workspace queries.
    check_cpu_plan(|imp, why| {
        hipfp8_grouped_gemm_blockwise_2d3d_plan(
            c,
            &d,
            null(),
            null(),
            null(),
            p.e(),
            imp,
            why,
            null_mut(),
            0,
            null_mut(),
        )
    });
    let mut bytes = 99usize;
    let st = hipfp8_grouped_gemm_blockwise_workspace_size(c, 0, 0, 0, 8, &mut bytes);
    assert_eq!((st, bytes), (HIPFP8_STATUS_SUCCESS, 0));
    let st = hipfp8_grouped_gemm_blockwise_workspace_size(c, 0, 0, 0, 8, null_mut());
    assert_eq!(st, HIPFP8_STATUS_NULL_POINTER);
    assert_eq!(hipfp8_context_destroy(c), HIPFP8_STATUS_SUCCESS);
}

/// Each bad call of `cases` (descriptor, scale_b length, status, a piece of the message) through
/// `call` returns its status, names the export `name` in the message, and leaves the output
/// (`sentinel` on entry) untouched.
fn check_refusals<D: Copy>(
    name: &str,
    sentinel: &[bf16],
    cases: &[(D, usize, hipfp8_status, &str)],
    call: impl Fn(&D, usize, &mut [bf16]) -> hipfp8_status,
) {
    for &(dd, sb_len, want, culprit) in cases {
        let mut o = sentinel.to_vec();
        let st = call(&dd, sb_len, &mut o);
        let msg = last_error();
        assert_eq!(st, want, "{msg}");
        assert!(msg.starts_with(name) && msg.contains(culprit), "{msg}");
        assert_eq!(bits(&o), bits(sentinel), "{culprit}: written on failure");
    }
}

/// A plan query (`query(implementation, reason)`) on a CPU context says the CPU runs.
fn check_cpu_plan(query: impl Fn(&mut u32, &mut u32) -> hipfp8_status) {
    let (mut imp, mut why) = (77u32, 77u32);
    assert_eq!(
        query(&mut imp, &mut why),
        hipfp8_status::HIPFP8_STATUS_SUCCESS
    );
    assert_eq!(imp, hipfp8_gemm_impl::HIPFP8_GEMM_IMPL_CPU as u32);
    assert_eq!(why, hipfp8_gemm_reason::HIPFP8_GEMM_REASON_NONE as u32);
}

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated, valid until the next hipfp8 call on this thread.
    unsafe { std::ffi::CStr::from_ptr(hipfp8_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

// ---- GPU ----------------------------------------------------------------------------------

/// The portable kernel == the CPU reference bit for bit, for every format pair, partial
/// blocks along K and N, empty and one-row groups, rows past the end, a K shorter than one
/// block.
#[test]
fn reference_kernel_matches_cpu_bit_for_bit() {
    let Some(ctx) = gpu_for_tests("reference_kernel_matches_cpu_bit_for_bit") else {
        return;
    };
    let stream = Stream::new(&ctx).unwrap();
    let shapes: [(usize, usize, usize, &[i32]); 3] = [
        (150, 300, 200, &[40, 40, 41, 141]),
        (64, 96, 64, &[64]),
        (33, 640, 384, &[0, 17, 30]),
    ];
    for fa in Fp8Format::ALL {
        for fb in Fp8Format::ALL {
            for &(m, k, n, offs) in &shapes {
                let p = Problem::random(fa, fb, m, k, n, offs);
                let params = GemmParams::new(fa, fb).with_backend(GemmBackend::Reference);
                let got = run_gpu(&ctx, &stream, &params, &p);
                let want = run_cpu(&p);
                let diff = bits(&got)
                    .iter()
                    .zip(bits(&want))
                    .position(|(x, y)| *x != y);
                assert!(
                    diff.is_none(),
                    "{}: first difference at {:?}: gpu {} cpu {}",
                    p.what("reference kernel"),
                    diff,
                    got[diff.unwrap()],
                    want[diff.unwrap()]
                );
            }
        }
    }
    let p = Problem::from_casts(Fp8Format::E4M3Fn, 300, 1024, 512, &[100, 100, 229, 290], 5);
    let params = GemmParams::new(p.fa, p.fb).with_backend(GemmBackend::Reference);
    assert_eq!(
        bits(&run_gpu(&ctx, &stream, &params, &p)),
        bits(&run_cpu(&p))
    );
    println!("reference kernel == CPU reference, bit for bit");
}

/// The blockwise 2D x 3D library launcher of `ctx`'s architecture (CUTLASS on sm_90, CK on
/// gfx942 / gfx950), with the implementation a plan names for it.
fn library_of(ctx: &Context) -> Option<(&'static str, GemmImpl)> {
    let arch = ctx.arch();
    if arch.starts_with("sm_90") {
        Some(("hipfp8_gg_cutlass_bw_2d3d", GemmImpl::CutlassSm90))
    } else if arch.starts_with("gfx942") {
        Some(("hipfp8_gg_ck_gfx942_bw_2d3d", GemmImpl::CkGfx942))
    } else if arch.starts_with("gfx950") {
        Some(("hipfp8_gg_ck_gfx950_bw_2d3d", GemmImpl::CkGfx950))
    } else {
        None
    }
}

/// AUTO with the device's E4M3 on `cases` (m, k, n, END offsets): the plan names `want`, and
/// the library's result is within the library tolerance of the f64 reference and of the
/// portable kernel. False (after a skip line) where `want` is not this device's library.
fn library_vs_f64(
    name: &str,
    want: &[GemmImpl],
    cases: &[(usize, usize, usize, &[i32])],
    seed: u64,
) -> bool {
    let Some(ctx) = gpu_for_tests(name) else {
        return false;
    };
    let stream = Stream::new(&ctx).unwrap();
    let fmt = ctx.native_format();
    let auto = GemmParams::new(fmt, fmt);
    let (m, k, n, offs) = cases[0];
    let op = GroupedOp::Blockwise2D3D { m, n, k };
    let plan = ctx.grouped_gemm_plan(&auto, op, offs.len(), None).unwrap();
    let Some((launcher, imp)) = library_of(&ctx).filter(|(_, i)| want.contains(i)) else {
        skip_test(
            name,
            &format!(
                "not a {want:?} device ({}): {}",
                ctx.arch(),
                plan.describe()
            ),
        );
        return false;
    };
    if plan.imp == GemmImpl::Reference {
        assert!(
            !hipfp8::device::has_launcher(launcher),
            "{} with {launcher} built, but the plan is {}",
            ctx.arch(),
            plan.describe()
        );
        skip_test(name, &format!("{launcher} not built: {}", plan.describe()));
        return false;
    }
    assert_eq!(plan.imp, imp, "{}", plan.describe());
    let who = imp.name();
    for (i, &(m, k, n, offs)) in cases.iter().enumerate() {
        let p = Problem::from_casts(fmt, m, k, n, offs, seed + i as u64);
        let lib = run_gpu(&ctx, &stream, &auto.with_backend(GemmBackend::Library), &p);
        check_f64(&p, &lib, true, &p.what(who));
        let rk = run_gpu(
            &ctx,
            &stream,
            &auto.with_backend(GemmBackend::Reference),
            &p,
        );
        // Library vs portable kernel: within the sum of both tolerances.
        for (idx, r) in p.reference().into_iter().enumerate() {
            let (x, y) = (lib[idx].to_f64(), rk[idx].to_f64());
            match r {
                None => assert_eq!(lib[idx].to_bits(), rk[idx].to_bits()),
                Some((exact, s)) => {
                    let tol = tolerance(exact, s, k, true) + tolerance(exact, s, k, false);
                    assert!(
                        (x - y).abs() <= tol,
                        "{}: [{idx}] {who} {x:e} vs reference kernel {y:e} (tol {tol:e})",
                        p.what(who)
                    );
                }
            }
        }
    }
    println!(
        "{} within tolerance of f64 and the reference kernel",
        plan.describe()
    );
    true
}

/// AUTO on sm_90 with the CUTLASS blockwise instance: the plan names it, the result is within
/// the library tolerance of the f64 reference and of the portable kernel. (AMD:
/// `ck_blockwise_vs_f64`.)
#[test]
fn library_matches_f64_and_reference_kernel() {
    library_vs_f64(
        "library_matches_f64_and_reference_kernel",
        &[GemmImpl::CutlassSm90],
        &[
            (300, 1024, 512, &[100, 100, 229, 290]),
            (513, 2048, 256, &[1, 200, 200, 384, 513]),
            (128, 7168, 384, &[64, 128]),
        ],
        11,
    );
}

/// AUTO on gfx942 (E4M3FNUZ) / gfx950 (E4M3FN) with CK's blockwise 2D x 3D instance
/// (hip/grouped_gemm/ck/ck_grouped_gemm_blockwise.h): the plan names it, the result is within
/// the library tolerance of the f64 reference and of the portable kernel. Cases: groups not
/// multiples of the 128-row tile, empty and one-row groups, rows past the last offset,
/// K = 384 (the v3 pipeline's minimum) and DeepSeek-V3's K = 7168, and more tiles than the
/// persistent grid has blocks (10000 x 1024: about 690 tiles against 2 blocks per CU).
/// Skips with a printed reason on CUDA, without a GPU, or where the instance is not built.
#[test]
fn ck_blockwise_vs_f64() {
    let ran = library_vs_f64(
        "ck_blockwise_vs_f64",
        &[GemmImpl::CkGfx942, GemmImpl::CkGfx950],
        &[
            (300, 1024, 512, &[100, 100, 229, 290]),
            (513, 384, 256, &[1, 200, 200, 384, 513]),
            (200, 7168, 384, &[64, 200]),
            (
                10000,
                384,
                1024,
                &[1000, 2500, 2500, 6000, 6001, 9000, 9999],
            ),
        ],
        31,
    );
    if ran {
        println!("ck_blockwise_vs_f64: CK blockwise 2D x 3D verified");
    }
}

/// The plan query of a blockwise op: the CPU on a CPU context; on a GPU the reference kernel
/// when requested; `ok` on the library where the device has one; each of `refused` (whether
/// the pair is the mixed E4M3 x E5M2 rather than E4M3 x E4M3, op, the `Fallback` code) on
/// the reference kernel, and an error under `GemmBackend::Library`. Formats: the device's
/// (E4M3FNUZ / E5M2FNUZ on gfx942).
fn check_plans(name: &str, ok: GroupedOp, refused: &[(bool, GroupedOp, u32)]) {
    let cpu_fmt = Fp8Format::E4M3Fn;
    let cpu = Context::cpu().grouped_gemm_plan(&GemmParams::new(cpu_fmt, cpu_fmt), ok, 2, None);
    assert_eq!(cpu.unwrap().imp, GemmImpl::Cpu);
    let Some(ctx) = gpu_for_tests(name) else {
        return;
    };
    let fmt = ctx.native_format();
    let e5 = ctx.resolve(hipfp8::FormatChoice::AutoE5M2);
    let req = GemmParams::new(fmt, fmt).with_backend(GemmBackend::Reference);
    let r = ctx.grouped_gemm_plan(&req, ok, 2, None).unwrap();
    assert_eq!(
        (r.imp, r.fallback),
        (GemmImpl::Reference, Some(Fallback::Requested))
    );
    let auto = GemmParams::new(fmt, fmt);
    let lib = ctx.grouped_gemm_plan(&auto, ok, 2, None).unwrap();
    println!("{fmt} x {fmt} {ok:?}: {}", lib.describe());
    if lib.imp == GemmImpl::Reference {
        assert!(
            matches!(lib.fallback, Some(Fallback::NoLibrary(_))),
            "{lib:?}"
        );
        skip_test(&format!("{name} (library part)"), &lib.describe());
        return;
    }
    for &(mixed, o, code) in refused {
        let p = if mixed {
            GemmParams::new(fmt, e5)
        } else {
            auto
        };
        let plan = ctx.grouped_gemm_plan(&p, o, 2, None).unwrap();
        assert_eq!(plan.imp, GemmImpl::Reference, "{plan:?}");
        assert_eq!(
            plan.fallback.as_ref().map(|f| f.code()),
            Some(code),
            "{plan:?}"
        );
        println!("{}", plan.describe());
        let strict = p.with_backend(GemmBackend::Library);
        assert!(ctx.grouped_gemm_plan(&strict, o, 2, None).is_err());
    }
    assert!(
        ctx.grouped_gemm_blockwise_workspace_size(&auto, 32)
            .unwrap()
            > 0
    );
}

/// The plan query of the 2D x 3D op: Shape when K or N is not a multiple of 128 (on CK also
/// K < 384), FormatPair for a pair without an instance.
#[test]
fn plan_says_what_runs_and_why() {
    let op = |m, n, k| GroupedOp::Blockwise2D3D { m, n, k };
    check_plans(
        "plan_says_what_runs_and_why",
        op(64, 128, 384),
        &[
            (false, op(64, 128, 200), 4),
            (false, op(64, 136, 384), 4),
            (true, op(64, 128, 384), 3),
        ],
    );
}

// The blockwise-scaled 2D x 2D (wgrad).
#[path = "gpu_grouped_gemm_blockwise/wgrad.rs"]
mod wgrad;
