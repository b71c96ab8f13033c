//! The blockwise-scaled grouped GEMM 2D x 2D (DeepSeek-V3 recipe, wgrad; docs/OPS.md
//! `grouped_gemm_blockwise_2d2d`): the CPU backend and the C ABI on any machine, and on a GPU
//! the portable reference kernel (bit for bit == the CPU reference) and the vendor library
//! (CUTLASS sm_90, which takes the groups starting on a 128-token boundary and leaves the
//! others to the portable kernel inside the same call) against the f64 reference.
//!
//! Without a GPU build or device the GPU tests print `HIPFP8_SKIP ...` and return (with
//! HIPFP8_REQUIRE_GPU=1 they fail instead). On sm_90 with the CUTLASS instance built, AUTO
//! must plan CUTLASS for the E4M3 shapes here.
//!
//! Tolerance per element, as for the 2D x 3D op (tests/gpu_grouped_gemm_blockwise.rs) with the
//! group's token count `len` as the reduction and `kb = ceil(len/128) + 1` blocks (a group may
//! meet one block more than its length needs); S = sum over the group's tokens of |a b sa sb|:
//! `2^-8 |ref| + 2 (len + 2 kb) 2^-24 S`, plus `2^-10 S` for CUTLASS.

use std::mem::size_of;
use std::ptr::{null, null_mut};

use hipfp8::device::{DeviceBuffer, Stream, gpu_for_tests, skip_test};
use hipfp8::ffi::*;
use hipfp8::{CastParams, Context, Fp8Format, GemmBackend, GemmImpl, GemmParams, GroupedOp, bf16};

use super::{
    BLOCK, Rng, S, SENTINEL, bits, check_cpu_plan, check_plans, check_refusals, tolerance_blocks,
};

/// One wgrad problem: a (n, mt) row-major, b stored (k, mt) row-major (the (mt, k)
/// column-major operand), END offsets along mt, DEQUANT scales (mb, n) and (mb, k) (block-major).
struct Problem {
    fa: Fp8Format,
    fb: Fp8Format,
    n: usize,
    mt: usize,
    k: usize,
    offs: Vec<i32>,
    a: Vec<u8>,
    b: Vec<u8>,
    sa: Vec<f32>,
    sb: Vec<f32>,
}

impl Problem {
    fn g(&self) -> usize {
        self.offs.len()
    }

    /// Gradients (n, mt) and activations (k, mt), both token-contiguous, with a per-row
    /// magnitude spread, quantized by the crate's `blockwise_1x128` (on the CPU); the GEMM's
    /// scales are the reciprocals of the cast scales, transposed to block-major (the documented
    /// convention).
    fn from_casts(fmt: Fp8Format, n: usize, mt: usize, k: usize, offs: &[i32], seed: u64) -> Self {
        let cpu = Context::cpu();
        let p = CastParams::new(fmt, false);
        let mut rng = Rng(seed);
        let mb = mt.div_ceil(BLOCK);
        let mut cast = |rows: usize, spread: usize| -> (Vec<u8>, Vec<f32>) {
            let x: Vec<f32> = (0..rows * mt)
                .map(|i| rng.unit() * 2f32.powi((i / mt % spread) as i32 - 3) * (1 + i % 5) as f32)
                .collect();
            let mut q = vec![0u8; rows * mt];
            let mut s = vec![0f32; rows * mb];
            cpu.blockwise_1x128(
                &p,
                rows,
                mt,
                (&x).into(),
                (&mut q).into(),
                (&mut s).into(),
                S,
            )
            .unwrap();
            // (rows, mb) -> (mb, rows), reciprocals.
            let t = (0..mb * rows)
                .map(|x| 1.0 / s[(x % rows) * mb + x / rows])
                .collect();
            (q, t)
        };
        let (a, sa) = cast(n, 7);
        let (b, sb) = cast(k, 5);
        Problem {
            fa: fmt,
            fb: fmt,
            n,
            mt,
            k,
            offs: offs.to_vec(),
            a,
            b,
            sa,
            sb,
        }
    }

    /// Random finite codes of both formats and random (not power-of-two) scales.
    fn random(fa: Fp8Format, fb: Fp8Format, n: usize, mt: usize, k: usize, offs: &[i32]) -> Self {
        let mut rng = Rng((n * 31 + mt * 7 + k) as u64 ^ (fa as u64) << 40 ^ (fb as u64) << 48);
        let mb = mt.div_ceil(BLOCK);
        let codes = |len: usize, f: Fp8Format, rng: &mut Rng| -> Vec<u8> {
            (0..len).map(|_| f.encode(rng.unit() * 6.0)).collect()
        };
        let a = codes(n * mt, fa, &mut rng);
        let b = codes(k * mt, fb, &mut rng);
        let mut scales = |len: usize| -> Vec<f32> {
            (0..len)
                .map(|_| 2f32.powi((rng.next() % 9) as i32 - 4) * (1.0 + rng.unit().abs()))
                .collect()
        };
        let sa = scales(n * mb);
        let sb = scales(k * mb);
        Problem {
            fa,
            fb,
            n,
            mt,
            k,
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
                let hi = (o.max(prev as i32) as usize).min(self.mt);
                let r = (prev, hi);
                prev = hi;
                r
            })
            .collect()
    }

    /// f64 reference per output: (exact value, S, group length).
    fn reference(&self) -> Vec<(f64, f64, usize)> {
        let (n, mt, k) = (self.n, self.mt, self.k);
        let mut refs = vec![(0.0, 0.0, 0); self.g() * n * k];
        for (g, (lo, hi)) in self.ranges().into_iter().enumerate() {
            for i in 0..n {
                for j in 0..k {
                    let (mut r, mut sabs) = (0f64, 0f64);
                    for t in lo..hi {
                        let q = t / BLOCK;
                        let p = self.fa.decode(self.a[i * mt + t]) as f64
                            * self.fb.decode(self.b[j * mt + t]) as f64
                            * self.sa[q * n + i] as f64
                            * self.sb[q * k + j] as f64;
                        r += p;
                        sabs += p.abs();
                    }
                    refs[g * n * k + i * k + j] = (r, sabs, hi - lo);
                }
            }
        }
        refs
    }

    fn what(&self, who: &str) -> String {
        format!(
            "{who} n{} mt{} k{} offs{:?} {}x{}",
            self.n, self.mt, self.k, self.offs, self.fa, self.fb
        )
    }
}

/// The per-element tolerance of the module docs (`library`: CUTLASS's extra term).
fn tolerance(exact: f64, s: f64, len: usize, library: bool) -> f64 {
    tolerance_blocks(exact, s, len, len.div_ceil(BLOCK) + 1, library)
}

/// `got` against the f64 reference: every element within tolerance, an empty group's block
/// exact zeros. Panics with examples on a failure.
fn check_f64(p: &Problem, got: &[bf16], library: bool, what: &str) {
    let mut bad = Vec::new();
    for (i, (o, (exact, s, len))) in got.iter().zip(p.reference()).enumerate() {
        if len == 0 {
            if o.to_bits() != 0 {
                bad.push(format!("[{i}] empty group: {o}"));
            }
            continue;
        }
        let o = o.to_f64();
        let tol = tolerance(exact, s, len, library);
        if (o - exact).abs() > tol || o.is_nan() {
            bad.push(format!("[{i}] {o:e} vs f64 {exact:e} (tol {tol:e})"));
        }
    }
    assert!(
        bad.is_empty(),
        "{what}: {} of {} wrong, e.g.\n{}",
        bad.len(),
        got.len(),
        bad[..bad.len().min(8)].join("\n")
    );
}

fn run_cpu(p: &Problem) -> Vec<bf16> {
    let mut out = vec![bf16::from_f32(SENTINEL); p.g() * p.n * p.k];
    Context::cpu()
        .grouped_gemm_blockwise_2d2d(
            &GemmParams::new(p.fa, p.fb),
            p.n,
            p.mt,
            p.k,
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
        DeviceBuffer::from_host(ctx, &vec![bf16::from_f32(SENTINEL); p.g() * p.n * p.k]).unwrap();
    ctx.grouped_gemm_blockwise_2d2d(
        params,
        p.n,
        p.mt,
        p.k,
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

fn assert_bits_eq(got: &[bf16], want: &[bf16], what: &str) {
    let diff = bits(got).iter().zip(bits(want)).position(|(x, y)| *x != y);
    assert!(
        diff.is_none(),
        "{what}: first difference at {:?}: {} vs {}",
        diff,
        got[diff.unwrap()],
        want[diff.unwrap()]
    );
}

// ---- CPU: the op and the C ABI ---------------------------------------------------------------

/// The CPU backend on operands quantized by the crate's casts: groups sharing blocks, an
/// empty group, tokens past the last offset, n and k off any tile.
#[test]
fn cpu_op_matches_f64_on_cast_operands() {
    for fmt in [Fp8Format::E4M3Fn, Fp8Format::E5M2] {
        let p = Problem::from_casts(fmt, 40, 700, 24, &[100, 100, 256, 450, 640], 7);
        check_f64(&p, &run_cpu(&p), false, &p.what("cpu"));
    }
    let p = Problem::random(Fp8Format::E4M3Fn, Fp8Format::E5M2, 9, 300, 13, &[3, 3, 300]);
    check_f64(&p, &run_cpu(&p), false, &p.what("cpu random"));
}

fn c_call(
    c: *mut hipfp8_context,
    d: &hipfp8_grouped_gemm_blockwise_2d2d_desc,
    p: &Problem,
    sb_len: usize,
    out: &mut [bf16],
) -> hipfp8_status {
    hipfp8_grouped_gemm_blockwise_2d2d(
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
/// untouched; the plan query says the CPU runs.
#[test]
fn c_abi_matches_rust_and_refuses_bad_input() {
    use hipfp8_status::*;
    let mut c = null_mut();
    assert_eq!(
        hipfp8_context_create(hipfp8_backend::HIPFP8_BACKEND_CPU as u32, 0, &mut c),
        HIPFP8_STATUS_SUCCESS
    );
    let p = Problem::from_casts(Fp8Format::E4M3Fn, 17, 300, 24, &[128, 200, 300], 3);
    let d = hipfp8_grouped_gemm_blockwise_2d2d_desc {
        size: size_of::<hipfp8_grouped_gemm_blockwise_2d2d_desc>(),
        a_format: hipfp8_format::HIPFP8_FORMAT_E4M3FN as u32,
        b_format: hipfp8_format::HIPFP8_FORMAT_E4M3FN as u32,
        backend: hipfp8_gemm_backend::HIPFP8_GEMM_BACKEND_AUTO as u32,
        n: p.n,
        mt: p.mt,
        k: p.k,
    };
    let mut out = vec![bf16::from_f32(SENTINEL); p.g() * p.n * p.k];
    assert_eq!(
        c_call(c, &d, &p, p.sb.len(), &mut out),
        HIPFP8_STATUS_SUCCESS
    );
    assert_eq!(bits(&out), bits(&run_cpu(&p)));
    let sentinel = vec![bf16::from_f32(SENTINEL); p.g() * p.n * p.k];
    let cases = [
        (
            d,
            p.sb.len() - 1,
            HIPFP8_STATUS_INPUT_TOO_SMALL,
            "input `scale_b` too small",
        ),
        (
            hipfp8_grouped_gemm_blockwise_2d2d_desc { mt: 299, ..d },
            p.sb.len(),
            HIPFP8_STATUS_INVALID_OFFSETS,
            "",
        ),
        (
            hipfp8_grouped_gemm_blockwise_2d2d_desc { backend: 7, ..d },
            p.sb.len(),
            HIPFP8_STATUS_INVALID_ENUM,
            "backend = 7",
        ),
        (
            hipfp8_grouped_gemm_blockwise_2d2d_desc { size: 8, ..d },
            p.sb.len(),
            HIPFP8_STATUS_INVALID_DESCRIPTOR,
            "",
        ),
    ];
    check_refusals(
        "hipfp8_grouped_gemm_blockwise_2d2d",
        &sentinel,
        &cases,
        |dd, sb_len, o| c_call(c, dd, &p, sb_len, o),
    );
    check_cpu_plan(|imp, why| {
        hipfp8_grouped_gemm_blockwise_2d2d_plan(
            c,
            &d,
            null(),
            null(),
            null(),
            p.g(),
            imp,
            why,
            null_mut(),
            0,
            null_mut(),
        )
    });
    assert_eq!(hipfp8_context_destroy(c), HIPFP8_STATUS_SUCCESS);
}

// ---- GPU ----------------------------------------------------------------------------------

/// The portable kernel == the CPU reference bit for bit, for every format pair: groups sharing
/// blocks, empty and one-token groups, clamped offsets, tokens past the end, n and k off the
/// tile.
#[test]
fn reference_kernel_matches_cpu_bit_for_bit() {
    let Some(ctx) = gpu_for_tests("reference_kernel_matches_cpu_bit_for_bit") else {
        return;
    };
    let stream = Stream::new(&ctx).unwrap();
    let shapes: [(usize, usize, usize, &[i32]); 3] = [
        (70, 700, 45, &[100, 100, 101, 450, 640]),
        (64, 256, 64, &[256]),
        (33, 400, 130, &[0, 17, 300]),
    ];
    for fa in Fp8Format::ALL {
        for fb in Fp8Format::ALL {
            for &(n, mt, k, offs) in &shapes {
                let p = Problem::random(fa, fb, n, mt, k, offs);
                let params = GemmParams::new(fa, fb).with_backend(GemmBackend::Reference);
                let got = run_gpu(&ctx, &stream, &params, &p);
                assert_bits_eq(&got, &run_cpu(&p), &p.what("reference kernel"));
            }
        }
    }
    let p = Problem::from_casts(Fp8Format::E4M3Fn, 256, 1000, 384, &[200, 256, 640, 1000], 5);
    let params = GemmParams::new(p.fa, p.fb).with_backend(GemmBackend::Reference);
    assert_bits_eq(
        &run_gpu(&ctx, &stream, &params, &p),
        &run_cpu(&p),
        &p.what("reference kernel"),
    );
    println!("blockwise 2D x 2D reference kernel == CPU reference, bit for bit");
}

/// AUTO on a device with the blockwise library (CUTLASS sm_90): the plan names it and says
/// which groups the reference kernel takes; the result is within the library tolerance of the
/// f64 reference on groups CUTLASS owns (128-token starts, ragged and whole lengths), on groups
/// it leaves to the portable kernel (off the boundary: bit-identical to the CPU there), and on
/// empty groups (zeros).
#[test]
fn library_matches_f64_and_leaves_unaligned_groups_to_the_reference() {
    let name = "library_matches_f64_and_leaves_unaligned_groups_to_the_reference";
    let Some(ctx) = gpu_for_tests(name) else {
        return;
    };
    let stream = Stream::new(&ctx).unwrap();
    let fmt = Fp8Format::E4M3Fn;
    let auto = GemmParams::new(fmt, fmt);
    let op = GroupedOp::Blockwise2D2D {
        n: 256,
        mt: 1024,
        k: 384,
    };
    let plan = ctx.grouped_gemm_plan(&auto, op, 4, None).unwrap();
    let built = hipfp8::device::has_launcher("hipfp8_gg_cutlass_bw_2d2d");
    if plan.imp == GemmImpl::Reference {
        assert!(
            !(built && ctx.arch().starts_with("sm_90")),
            "sm_90 with the CUTLASS blockwise instance built, but the plan is {}",
            plan.describe()
        );
        skip_test(
            name,
            &format!("no blockwise library here: {}", plan.describe()),
        );
        return;
    }
    assert_eq!(plan.imp, GemmImpl::CutlassSm90, "{}", plan.describe());
    assert!(
        plan.split_2d2d && plan.describe().contains("off a 128-token boundary"),
        "{}",
        plan.describe()
    );
    // (n, mt, k, offsets): whole 128-blocks; ragged lengths from
    // aligned starts; unaligned starts, a one-token and an empty group; more tokens per group
    // (the f64 oracle bounds the size: DeepSeek-V3 shapes are bench/compare_grouped_gemm.py's).
    let cases: [(usize, usize, usize, &[i32]); 4] = [
        (256, 1024, 384, &[256, 512, 512, 1024]),
        (384, 1024, 256, &[128, 300, 384, 1000]),
        (128, 2048, 136, &[1, 200, 200, 768, 900, 2048]),
        (256, 4096, 256, &[1024, 1536, 2560, 4096]),
    ];
    for (i, &(n, mt, k, offs)) in cases.iter().enumerate() {
        let p = Problem::from_casts(fmt, n, mt, k, offs, 11 + i as u64);
        let lib = run_gpu(&ctx, &stream, &auto.with_backend(GemmBackend::Library), &p);
        check_f64(&p, &lib, true, &p.what("cutlass"));
        // Groups CUTLASS does not own ran the portable kernel: bit for bit the CPU's there.
        let cpu = run_cpu(&p);
        for (g, (lo, hi)) in p.ranges().into_iter().enumerate() {
            if lo % BLOCK != 0 || hi == lo {
                let blk = g * n * k..(g + 1) * n * k;
                assert_bits_eq(
                    &lib[blk.clone()],
                    &cpu[blk],
                    &format!("{} group {g} [{lo}, {hi})", p.what("reference part")),
                );
            }
        }
    }
    println!("{} within tolerance of f64", plan.describe());
}

/// The plan query of the 2D x 2D op: Shape when Mt % 16 or K % 8 is not 0, FormatPair for a
/// pair without an instance.
#[test]
fn plan_says_what_runs_and_why() {
    let op = |n, mt, k| GroupedOp::Blockwise2D2D { n, mt, k };
    // (On gfx942 / gfx950 the plan is NoLibrary: CK has no blockwise 2D x 2D instance.)
    check_plans(
        "wgrad::plan_says_what_runs_and_why",
        op(64, 256, 64),
        &[
            (false, op(64, 200, 64), 4),
            (false, op(64, 256, 60), 4),
            (true, op(64, 256, 64), 3),
        ],
    );
}
