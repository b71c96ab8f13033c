//! FP8 grouped GEMMs on a real GPU: every implementation against an f64 reference on the
//! dequantized inputs (computed here on the CPU).
//!
//! Without a GPU build or device each test prints `HIPFP8_SKIP ...` and returns (with
//! HIPFP8_REQUIRE_GPU=1 it fails instead). A library backend missing from the build (CUTLASS
//! on CUDA sm_90, CK on gfx942/gfx950) is a printed skip of that part, never a pass.
//!
//! Tolerance, per element (written down; `S = sum_k |a_k b_k| * |sa * sb|`):
//!   |out - ref| <= 2^-8 |ref| + acc * S
//! * 2^-8 |ref|: the bf16 output rounding (half an ulp = 2^-9 relative), doubled for the
//!   f32 scale multiplies.
//! * acc: accumulation error. The reference kernel (f32 FMA) and CK (f32 MFMA accumulators)
//!   are bounded by gamma = (K + 2) 2^-24 (standard summation bound); we allow 2 gamma.
//!   CUTLASS runs Hopper FP8 WGMMA with fast accumulation (as torch._scaled_grouped_mm does):
//!   the tensor core adds each k = 32 step's products to the accumulator with about 13-14
//!   significant bits (DeepSeek-V3 report, section 3.3.2). Measured on the H200 (first run of
//!   this suite): worst error 2^-13.3 S per k = 32 step. acc = max(2 gamma, ceil(K/32) 2^-12),
//!   a factor 2.5 above that.
//!
//! Plus a global similarity check over all written elements (DeepGEMM's metric):
//!   diff = 1 - 2 <out, ref> / (<out, out> + <ref, ref>) <= 1e-4
//! (bf16 rounding alone gives ~1e-6; a wrong group or element gives O(1e-2) or more).
//!
//! Rows past offs[E-1] (2D x 3D) must keep their sentinel; empty groups of 2D x 2D must be +0.

#![allow(clippy::needless_range_loop)]

use hipfp8::device::{DeviceBuffer, Stream, gpu_for_tests, skip_test};
use hipfp8::{Context, Fp8Format, GemmBackend, GemmImpl, GemmParams, GemmWorkspace, bf16};

const SENTINEL: f32 = -768.0;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// FP8 codes of values ~ N(0, 1)-ish scaled by 2^e (what a scaled cast produces), so the
/// products neither overflow nor all underflow; NaN/Inf codes never appear.
fn codes(rng: &mut Rng, n: usize, fmt: Fp8Format) -> Vec<u8> {
    (0..n)
        .map(|_| {
            let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
            let v = ((u - 0.5) * 8.0) as f32 * 2f32.powi(rng.below(5) as i32 - 2);
            fmt.encode(v)
        })
        .collect()
}

fn scales(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| 2f32.powi(rng.below(9) as i32 - 4) * (1.0 + (rng.below(64) as f32) / 64.0))
        .collect()
}

/// Check `got` against an f64 reference; `refs[i] = Some((exact, abs_sum, k))` for written
/// elements, None for elements that must keep the sentinel. Panics on a failure; returns the
/// similarity diff.
fn compare(got: &[bf16], refs: &[Option<(f64, f64, usize)>], cutlass_acc: bool, what: &str) -> f64 {
    let mut bad = Vec::new();
    let (mut xy, mut xx, mut yy) = (0f64, 0f64, 0f64);
    for (i, (o, r)) in got.iter().zip(refs).enumerate() {
        let o = o.to_f32() as f64;
        match r {
            None => {
                if o != SENTINEL as f64 {
                    bad.push(format!("[{i}] written ({o}) but must be untouched"));
                }
            }
            Some((exact, abs_sum, k)) => {
                let gamma = (*k as f64 + 2.0) * 2f64.powi(-24);
                let acc = if cutlass_acc {
                    (2.0 * gamma).max((*k as f64 / 32.0).ceil() * 2f64.powi(-12))
                } else {
                    2.0 * gamma
                };
                let tol = 2f64.powi(-8) * exact.abs() + acc * abs_sum;
                let ok = (o - exact).abs() <= tol; // false for NaN too
                if !ok {
                    bad.push(format!(
                        "[{i}] got {o:e}, f64 reference {exact:e}, tol {tol:e}"
                    ));
                }
                xy += o * exact;
                xx += o * o;
                yy += exact * exact;
            }
        }
    }
    let diff = if xx + yy > 0.0 {
        1.0 - 2.0 * xy / (xx + yy)
    } else {
        0.0
    };
    assert!(
        bad.is_empty(),
        "{what}: {} of {} elements wrong, e.g.\n{}",
        bad.len(),
        got.len(),
        bad[..bad.len().min(8)].join("\n")
    );
    assert!(
        diff <= 1e-4,
        "{what}: global similarity diff {diff:e} > 1e-4"
    );
    diff
}

/// Clamped group ranges, exactly as docs/OPS.md defines them.
fn ranges(offs: &[i32], extent: usize) -> Vec<(usize, usize)> {
    let mut prev = 0usize;
    offs.iter()
        .map(|&o| {
            let hi = (o.max(prev as i32) as usize).min(extent);
            let r = (prev, hi);
            prev = hi;
            r
        })
        .collect()
}

struct Case2d3d {
    m: usize,
    k: usize,
    n: usize,
    offs: Vec<i32>,
}

/// Case `c`'s operands (random codes and scales from `seed`) and one `grouped_gemm_2d3d` call
/// on them into a SENTINEL-filled output: the host operands, the call's result and the output
/// read back after the stream finished.
struct Call2d3d {
    a: Vec<u8>,
    b: Vec<u8>,
    sa: Vec<f32>,
    sb: Vec<f32>,
    result: hipfp8::Result<()>,
    got: Vec<bf16>,
}

fn call_2d3d(ctx: &Context, stream: &Stream, p: &GemmParams, c: &Case2d3d, seed: u64) -> Call2d3d {
    let (fa, fb) = (ctx.resolve(p.a_format), ctx.resolve(p.b_format));
    let (m, k, n, e) = (c.m, c.k, c.n, c.offs.len());
    let mut rng = Rng(seed);
    let a = codes(&mut rng, m * k, fa);
    let b = codes(&mut rng, e * k * n, fb);
    let sa = scales(&mut rng, m);
    let sb = scales(&mut rng, e * n);
    let da = DeviceBuffer::from_host(ctx, &a).unwrap();
    let db = DeviceBuffer::from_host(ctx, &b).unwrap();
    let doffs = DeviceBuffer::from_host(ctx, &c.offs).unwrap();
    let dsa = DeviceBuffer::from_host(ctx, &sa).unwrap();
    let dsb = DeviceBuffer::from_host(ctx, &sb).unwrap();
    let mut dout = DeviceBuffer::from_host(ctx, &vec![bf16::from_f32(SENTINEL); m * n]).unwrap();
    let result = ctx.grouped_gemm_2d3d(
        p,
        m,
        k,
        n,
        e,
        da.src(),
        db.src(),
        doffs.src(),
        dsa.src(),
        dsb.src(),
        dout.dst(),
        stream.handle(),
    );
    stream.synchronize().unwrap();
    let got = dout.to_vec().unwrap();
    Call2d3d {
        a,
        b,
        sa,
        sb,
        result,
        got,
    }
}

fn run_2d3d(ctx: &Context, stream: &Stream, p: &GemmParams, c: &Case2d3d, seed: u64) -> f64 {
    let (fa, fb) = (ctx.resolve(p.a_format), ctx.resolve(p.b_format));
    let (m, k, n) = (c.m, c.k, c.n);
    let Call2d3d {
        a,
        b,
        sa,
        sb,
        result,
        got,
    } = call_2d3d(ctx, stream, p, c, seed);
    result.unwrap();
    let mut refs = vec![None; m * n];
    for (g, (r0, r1)) in ranges(&c.offs, m).into_iter().enumerate() {
        for i in r0..r1 {
            for j in 0..n {
                let (mut s, mut sabs) = (0f64, 0f64);
                for kk in 0..k {
                    let prod = fa.decode(a[i * k + kk]) as f64
                        * fb.decode(b[g * n * k + j * k + kk]) as f64;
                    s += prod;
                    sabs += prod.abs();
                }
                let sc = sa[i] as f64 * sb[g * n + j] as f64;
                refs[i * n + j] = Some((s * sc, sabs * sc.abs(), k));
            }
        }
    }
    compare(
        &got,
        &refs,
        uses_cutlass(ctx, p, fa, fb),
        &format!(
            "2d3d m{m} k{k} n{n} offs{:?} {fa}x{fb} {:?}",
            c.offs, p.backend
        ),
    )
}

struct Case2d2d {
    n: usize,
    mt: usize,
    k: usize,
    offs: Vec<i32>,
}

fn run_2d2d(ctx: &Context, stream: &Stream, p: &GemmParams, c: &Case2d2d, seed: u64) -> f64 {
    let (fa, fb) = (ctx.resolve(p.a_format), ctx.resolve(p.b_format));
    let (n, mt, k, g) = (c.n, c.mt, c.k, c.offs.len());
    let mut rng = Rng(seed);
    let a = codes(&mut rng, n * mt, fa);
    let b = codes(&mut rng, mt * k, fb);
    let sa = scales(&mut rng, g * n);
    let sb = scales(&mut rng, g * k);
    let got: Vec<bf16> = gemm_2d2d_bits(ctx, stream, p, (n, mt, k), &a, &b, &c.offs, &sa, &sb)
        .into_iter()
        .map(bf16::from_bits)
        .collect();
    let mut refs = vec![None; g * n * k];
    for (gi, (t0, t1)) in ranges(&c.offs, mt).into_iter().enumerate() {
        for i in 0..n {
            for j in 0..k {
                let idx = gi * n * k + i * k + j;
                if t0 == t1 {
                    assert_eq!(
                        got[idx].to_bits(),
                        0,
                        "2d2d: empty group {gi} must give +0 at [{idx}]"
                    );
                }
                let (mut s, mut sabs) = (0f64, 0f64);
                for t in t0..t1 {
                    let prod = fa.decode(a[i * mt + t]) as f64 * fb.decode(b[j * mt + t]) as f64;
                    s += prod;
                    sabs += prod.abs();
                }
                let sc = sa[gi * n + i] as f64 * sb[gi * k + j] as f64;
                refs[idx] = Some((s * sc, sabs * sc.abs(), t1 - t0));
            }
        }
    }
    compare(
        &got,
        &refs,
        uses_cutlass(ctx, p, fa, fb),
        &format!(
            "2d2d n{n} mt{mt} k{k} offs{:?} {fa}x{fb} {:?}",
            c.offs, p.backend
        ),
    )
}

fn uses_cutlass(ctx: &Context, p: &GemmParams, fa: Fp8Format, fb: Fp8Format) -> bool {
    p.backend != GemmBackend::Reference
        && hipfp8::grouped_gemm_gpu::library_impl(ctx, fa, fb) == Some(GemmImpl::CutlassSm90)
}

/// Shapes that stress the reference kernel: empty groups, 1-row groups, K and N not
/// multiples of the tile (64 x 64 x 32), offsets that must be clamped, trailing rows.
fn odd_2d3d() -> Vec<Case2d3d> {
    vec![
        Case2d3d {
            m: 130,
            k: 45,
            n: 70,
            offs: vec![0, 1, 1, 66, 66, 129],
        },
        Case2d3d {
            m: 64,
            k: 32,
            n: 64,
            offs: vec![64],
        },
        Case2d3d {
            m: 200,
            k: 3,
            n: 5,
            offs: vec![50, 40, 300, 10],
        },
        Case2d3d {
            m: 17,
            k: 97,
            n: 129,
            offs: vec![17],
        },
        Case2d3d {
            m: 300,
            k: 200,
            n: 33,
            offs: vec![7, 7, 150, 151, 290],
        },
    ]
}

fn odd_2d2d() -> Vec<Case2d2d> {
    vec![
        Case2d2d {
            n: 70,
            mt: 100,
            k: 45,
            offs: vec![0, 1, 33, 33, 90],
        },
        Case2d2d {
            n: 3,
            mt: 40,
            k: 130,
            offs: vec![40],
        },
        Case2d2d {
            n: 65,
            mt: 50,
            k: 1,
            offs: vec![60, 10, 20],
        },
        Case2d2d {
            n: 33,
            mt: 257,
            k: 70,
            offs: vec![100, 101, 257],
        },
    ]
}

#[test]
fn reference_kernel_all_formats_odd_shapes() {
    let Some(ctx) = gpu_for_tests("reference_kernel_all_formats_odd_shapes") else {
        return;
    };
    let stream = Stream::new(&ctx).unwrap();
    let mut seed = 1;
    for fa in Fp8Format::ALL {
        for fb in Fp8Format::ALL {
            let p = GemmParams::new(fa, fb).with_backend(GemmBackend::Reference);
            for c in odd_2d3d() {
                seed += 1;
                run_2d3d(&ctx, &stream, &p, &c, seed);
            }
            for c in odd_2d2d() {
                seed += 1;
                run_2d2d(&ctx, &stream, &p, &c, seed);
            }
        }
    }
}

/// Library-friendly shapes (K % 16, N % 8, Mt % 16) with skewed, empty and 1-row groups; 2D x
/// 2D groups that start off a 16-element boundary or are empty go to the reference kernel
/// on the device (the mixed path is what this checks).
fn lib_2d3d() -> Vec<Case2d3d> {
    vec![
        Case2d3d {
            m: 1000,
            k: 256,
            n: 264,
            offs: vec![0, 1, 300, 300, 301, 990],
        },
        Case2d3d {
            m: 384,
            k: 512,
            n: 128,
            offs: vec![128, 256, 384],
        },
        Case2d3d {
            m: 777,
            k: 48,
            n: 520,
            offs: vec![5, 700, 1000],
        },
    ]
}

fn lib_2d2d() -> Vec<Case2d2d> {
    vec![
        Case2d2d {
            n: 136,
            mt: 512,
            k: 264,
            offs: vec![0, 16, 16, 200, 208, 500],
        },
        Case2d2d {
            n: 256,
            mt: 1024,
            k: 128,
            offs: vec![256, 512, 768, 1024],
        },
        Case2d2d {
            n: 40,
            mt: 96,
            k: 24,
            offs: vec![3, 35, 96],
        },
    ]
}

#[test]
fn library_backend_vs_f64() {
    let Some(ctx) = gpu_for_tests("library_backend_vs_f64") else {
        return;
    };
    let fmt = ctx.native_format();
    let Some(imp) = hipfp8::grouped_gemm_gpu::library_impl(&ctx, fmt, fmt) else {
        skip_test(
            "library_backend_vs_f64",
            &format!(
                "no CK/CUTLASS grouped GEMM for {} in this build",
                ctx.arch()
            ),
        );
        return;
    };
    println!("library backend: {}", imp.name());
    let stream = Stream::new(&ctx).unwrap();
    let p = GemmParams::new(fmt, fmt).with_backend(GemmBackend::Library);
    // The shapes the library takes (its plan succeeds) run and are compared; a shape it
    // refuses (CK: K <= 256 or K % 16 != 0) must be refused by the call too, with nothing
    // written. CUTLASS takes every case.
    let (c3, c2) = (lib_2d3d(), lib_2d2d());
    let op3 = |c: &Case2d3d| hipfp8::GroupedOp::TwoD3D {
        m: c.m,
        n: c.n,
        k: c.k,
    };
    let op2 = |c: &Case2d2d| hipfp8::GroupedOp::TwoD2D {
        n: c.n,
        mt: c.mt,
        k: c.k,
    };
    let takes = |op, groups| ctx.grouped_gemm_plan(&p, op, groups, None).is_ok();
    let takes3: Vec<bool> = c3.iter().map(|c| takes(op3(c), c.offs.len())).collect();
    let takes2: Vec<bool> = c2.iter().map(|c| takes(op2(c), c.offs.len())).collect();
    if imp == GemmImpl::CutlassSm90 {
        assert!(
            takes3.iter().chain(&takes2).all(|&t| t),
            "CUTLASS refused a case: 2D x 3D {takes3:?}, 2D x 2D {takes2:?}"
        );
    }
    for (i, c) in c3.iter().enumerate() {
        if takes3[i] {
            run_2d3d(&ctx, &stream, &p, c, 100 + i as u64);
        } else {
            refused_2d3d(&ctx, &stream, &p, c);
        }
    }
    for (i, c) in c2.iter().enumerate() {
        if takes2[i] {
            run_2d2d(&ctx, &stream, &p, c, 200 + i as u64);
        }
    }
    let (Some(i3), Some(i2)) = (
        takes3.iter().position(|&t| t),
        takes2.iter().position(|&t| t),
    ) else {
        panic!(
            "{} takes none of the 2D x 3D or none of the 2D x 2D cases: {takes3:?} {takes2:?}",
            imp.name()
        );
    };
    println!(
        "library backend {}: 2D x 3D cases taken {takes3:?}, 2D x 2D {takes2:?}",
        imp.name()
    );
    // A caller-owned workspace gives the same results: the 2D x 3D size and the 2D x 2D
    // case's (with its staging area).
    let bytes = ctx.grouped_gemm_workspace_size(&p, 6).unwrap().max(
        ctx.grouped_gemm_op_workspace_size(&p, op2(&c2[i2]), c2[i2].offs.len())
            .unwrap(),
    );
    assert!(bytes > 0);
    let mut ws = DeviceBuffer::<u8>::zeroed(&ctx, bytes).unwrap();
    // SAFETY: a live device buffer of `bytes` bytes, used by nothing else while it is borrowed.
    let pw = p.with_workspace(unsafe { GemmWorkspace::from_raw(ws.as_mut_ptr().cast(), bytes) });
    run_2d3d(&ctx, &stream, &pw, &c3[i3], 300);
    run_2d2d(&ctx, &stream, &pw, &c2[i2], 301);
    drop(ws);
}

/// A 2D x 3D call the library's plan refuses, with GemmBackend::Library: an error, and the
/// output untouched (nothing queued).
fn refused_2d3d(ctx: &Context, stream: &Stream, p: &GemmParams, c: &Case2d3d) {
    let (m, k, n) = (c.m, c.k, c.n);
    let Call2d3d { result: r, got, .. } = call_2d3d(ctx, stream, p, c, 0);
    assert!(
        r.is_err(),
        "the library backend ran a 2D x 3D call (m {m}, k {k}, n {n}) its plan refuses"
    );
    assert!(
        got.iter()
            .all(|v| v.to_bits() == bf16::from_f32(SENTINEL).to_bits()),
        "a refused call wrote its output"
    );
    println!(
        "library backend refuses 2D x 3D k {k} n {n}: {}",
        r.unwrap_err()
    );
}

/// CK's mixed pairs (E4M3 x E5M2 and E5M2 x E4M3 in the target's flavour: their own kernel,
/// hip/grouped_gemm/ck/ck_grouped_gemm_mixed.h) with GemmBackend::Library against f64, on
/// shapes CK takes (K > 256): skewed, empty and 1-row 2D x 3D groups, the gpt-oss K = 2880, and
/// 2D x 2D calls with CK-owned groups (read in place, or staged when off a 16-token boundary or
/// of a length not a multiple of 16; > 256 tokens) beside groups the reference kernel takes
/// inside the call, and staged groups equal to the padded layout's bit for bit
/// (`staged_equals_padded`). A skip where CK has no such instance.
#[test]
fn ck_mixed_pairs_vs_f64() {
    let Some(ctx) = gpu_for_tests("ck_mixed_pairs_vs_f64") else {
        return;
    };
    let e4 = ctx.native_format();
    let e5 = ctx.resolve(hipfp8::FormatChoice::AutoE5M2);
    let stream = Stream::new(&ctx).unwrap();
    let mut seed = 1900;
    for (fa, fb) in [(e4, e5), (e5, e4)] {
        let imp = hipfp8::grouped_gemm_gpu::library_impl(&ctx, fa, fb);
        if !matches!(imp, Some(GemmImpl::CkGfx942 | GemmImpl::CkGfx950)) {
            skip_test(
                "ck_mixed_pairs_vs_f64",
                &format!("no CK instance for {fa} x {fb} on {}", ctx.arch()),
            );
            return;
        }
        let p = GemmParams::new(fa, fb).with_backend(GemmBackend::Library);
        let op = hipfp8::GroupedOp::TwoD3D {
            m: 1000,
            n: 264,
            k: 512,
        };
        let plan = ctx.grouped_gemm_plan(&p, op, 6, None).unwrap();
        assert!(
            plan.ck
                .is_some_and(|i| i.pairs.contains(&(fa, fb)) && i.name.starts_with("mixed")),
            "{plan:?}"
        );
        println!("{fa} x {fb}: {}", plan.describe());
        for c in [
            Case2d3d {
                m: 1000,
                k: 512,
                n: 264,
                offs: vec![0, 1, 300, 300, 301, 990],
            },
            Case2d3d {
                m: 300,
                k: 2880,
                n: 136,
                offs: vec![100, 300],
            },
        ] {
            seed += 1;
            run_2d3d(&ctx, &stream, &p, &c, seed);
        }
        for c in [
            Case2d2d {
                n: 136,
                mt: 1024,
                k: 264,
                offs: vec![512, 1024],
            },
            Case2d2d {
                n: 40,
                mt: 1024,
                k: 264,
                offs: vec![16, 16, 544, 1000, 1024],
            },
            // Groups off a 16-token boundary: staged onto the mixed kernel (docs/OPS.md "Any
            // group start"), the 10-token one on the reference kernel.
            Case2d2d {
                n: 136,
                mt: 1024,
                k: 264,
                offs: vec![10, 300, 700, 1024],
            },
        ] {
            seed += 1;
            run_2d2d(&ctx, &stream, &p, &c, seed);
        }
        // Staged groups on the mixed kernel equal the padded layout's, bit for bit (the
        // checks of staged_unaligned_groups_equal_padded).
        let sizes = [1504usize, 704, 333, 1, 290, 16, 0, 272, 300, 11, 7];
        seed += 1;
        staged_equals_padded(
            &ctx,
            &stream,
            (fa, fb),
            &format!("ck_mixed_pairs_vs_f64/staged {fa} x {fb}"),
            &sizes,
            seed,
        );
    }
}

/// Auto: the library where it applies, the reference kernel where the shape rules fail (here
/// K = 45, N = 70), with the same results either way.
#[test]
fn auto_backend_falls_back() {
    let Some(ctx) = gpu_for_tests("auto_backend_falls_back") else {
        return;
    };
    let stream = Stream::new(&ctx).unwrap();
    let fmt = ctx.native_format();
    let p = GemmParams::new(fmt, fmt);
    for (i, c) in odd_2d3d().iter().enumerate() {
        run_2d3d(&ctx, &stream, &p, c, 400 + i as u64);
    }
    for (i, c) in odd_2d2d().iter().enumerate() {
        run_2d2d(&ctx, &stream, &p, c, 500 + i as u64);
    }
    let e5 = ctx.resolve(hipfp8::FormatChoice::AutoE5M2);
    let pe = GemmParams::new(fmt, e5);
    run_2d3d(&ctx, &stream, &pe, &lib_2d3d()[1], 600);
}

/// The library and the reference kernel agree on one DeepSeek-V3-like slice (K = 7168).
#[test]
fn library_large_k() {
    let Some(ctx) = gpu_for_tests("library_large_k") else {
        return;
    };
    let fmt = ctx.native_format();
    if hipfp8::grouped_gemm_gpu::library_impl(&ctx, fmt, fmt).is_none() {
        skip_test(
            "library_large_k",
            "no CK/CUTLASS grouped GEMM in this build",
        );
        return;
    }
    let stream = Stream::new(&ctx).unwrap();
    let p = GemmParams::new(fmt, fmt).with_backend(GemmBackend::Library);
    run_2d3d(
        &ctx,
        &stream,
        &p,
        &Case2d3d {
            m: 256,
            k: 7168,
            n: 256,
            offs: vec![100, 100, 256],
        },
        700,
    );
    run_2d2d(
        &ctx,
        &stream,
        &p,
        &Case2d2d {
            n: 128,
            mt: 4096,
            k: 128,
            offs: vec![1024, 1024, 4000, 4096],
        },
        701,
    );
}

/// 2D x 2D groups that start anywhere (no 16-token alignment).
fn unaligned_2d2d() -> Vec<Case2d2d> {
    vec![
        Case2d2d {
            n: 136,
            mt: 1008,
            k: 264,
            offs: vec![1, 17, 100, 333, 334, 334, 700, 1001, 1008],
        },
        Case2d2d {
            n: 128,
            mt: 4096,
            k: 136,
            offs: vec![5, 1029, 2047, 2050, 4095, 4096],
        },
    ]
}

/// Every compiled CUTLASS instance kind with every format pair it has, the scheduler
/// settings, and unaligned 2D x 2D group starts: the library path (the plan says so and
/// GemmBackend::Library would fail otherwise; inside it the unaligned groups go to the
/// reference kernel).
#[test]
fn every_cutlass_instance_and_pair() {
    use hipfp8::grouped_gemm_rule::{CUTLASS_KINDS, CutlassChoice};
    let Some(ctx) = gpu_for_tests("every_cutlass_instance_and_pair") else {
        return;
    };
    if hipfp8::grouped_gemm_gpu::library_impl(&ctx, Fp8Format::E4M3Fn, Fp8Format::E4M3Fn)
        != Some(GemmImpl::CutlassSm90)
    {
        skip_test("every_cutlass_instance_and_pair", "no CUTLASS sm_90 here");
        return;
    }
    let stream = Stream::new(&ctx).unwrap();
    let (shard, shards) = test_shard();
    let mut seed = 800;
    let mut combo = 0usize;
    for kind in CUTLASS_KINDS {
        for &(fa, fb) in kind.pairs {
            // Scheduler settings change only the tile order: both on kind 1, the default on
            // the others.
            let settings: &[(bool, u8)] = if kind.id == 1 {
                &[(false, 0), (true, 2)]
            } else {
                &[(false, 0)]
            };
            for &(raster_n, swizzle_log2) in settings {
                combo += 1;
                seed += 10;
                if (combo - 1) % shards != shard {
                    continue;
                }
                let c = CutlassChoice {
                    kind: kind.id,
                    raster_n,
                    swizzle_log2,
                };
                let p = GemmParams::new(fa, fb)
                    .with_backend(GemmBackend::Library)
                    .with_cutlass(c);
                let plan = ctx
                    .grouped_gemm_plan(
                        &p,
                        hipfp8::GroupedOp::TwoD2D {
                            n: 136,
                            mt: 1008,
                            k: 264,
                        },
                        9,
                        None,
                    )
                    .unwrap();
                assert_eq!(plan.imp, GemmImpl::CutlassSm90);
                assert_eq!(plan.cutlass, Some(c));
                println!("{fa} x {fb}: {}", plan.describe());
                run_2d3d(&ctx, &stream, &p, &lib_2d3d()[0], seed);
                run_2d3d(&ctx, &stream, &p, &lib_2d3d()[2], seed + 1);
                run_2d2d(&ctx, &stream, &p, &lib_2d2d()[0], seed + 2);
                run_2d2d(&ctx, &stream, &p, &lib_2d2d()[2], seed + 3);
                for (i, u) in unaligned_2d2d().iter().enumerate() {
                    run_2d2d(&ctx, &stream, &p, u, seed + 4 + i as u64);
                }
            }
        }
    }
}

/// `HIPFP8_TEST_SHARD=i/n`: this run covers the cases whose index is i modulo n (the
/// sanitizer script runs a slow test's shards side by side); unset or empty, every case.
fn test_shard() -> (usize, usize) {
    let v = std::env::var("HIPFP8_TEST_SHARD").unwrap_or_default();
    if v.is_empty() {
        return (0, 1);
    }
    let parsed = v
        .split_once('/')
        .and_then(|(i, n)| Some((i.trim().parse().ok()?, n.trim().parse().ok()?)));
    match parsed {
        Some((i, n)) if n > 0 && i < n => {
            println!("HIPFP8_TEST_SHARD: cases {i} mod {n}");
            (i, n)
        }
        _ => panic!("HIPFP8_TEST_SHARD={v:?}: expected i/n with i < n"),
    }
}

/// Run a 2D x 2D GEMM on given operands, return the output bits.
#[allow(clippy::too_many_arguments)]
fn gemm_2d2d_bits(
    ctx: &Context,
    stream: &Stream,
    p: &GemmParams,
    (n, mt, k): (usize, usize, usize),
    a: &[u8],
    b: &[u8],
    offs: &[i32],
    sa: &[f32],
    sb: &[f32],
) -> Vec<u16> {
    let (r, out) = try_gemm_2d2d_bits(ctx, stream, p, (n, mt, k), a, b, offs, sa, sb);
    r.unwrap();
    out
}

/// [`gemm_2d2d_bits`] that returns the call's result beside the output (sentinels where
/// nothing was written).
#[allow(clippy::too_many_arguments)]
fn try_gemm_2d2d_bits(
    ctx: &Context,
    stream: &Stream,
    p: &GemmParams,
    (n, mt, k): (usize, usize, usize),
    a: &[u8],
    b: &[u8],
    offs: &[i32],
    sa: &[f32],
    sb: &[f32],
) -> (hipfp8::Result<()>, Vec<u16>) {
    let g = offs.len();
    let da = DeviceBuffer::from_host(ctx, a).unwrap();
    let db = DeviceBuffer::from_host(ctx, b).unwrap();
    let doffs = DeviceBuffer::from_host(ctx, offs).unwrap();
    let dsa = DeviceBuffer::from_host(ctx, sa).unwrap();
    let dsb = DeviceBuffer::from_host(ctx, sb).unwrap();
    let mut dout =
        DeviceBuffer::from_host(ctx, &vec![bf16::from_f32(SENTINEL); g * n * k]).unwrap();
    let r = ctx.grouped_gemm_2d2d(
        p,
        n,
        mt,
        k,
        da.src(),
        db.src(),
        doffs.src(),
        dsa.src(),
        dsb.src(),
        dout.dst(),
        stream.handle(),
    );
    stream.synchronize().unwrap();
    (
        r,
        dout.to_vec().unwrap().iter().map(|x| x.to_bits()).collect(),
    )
}

/// Unpadded routing in one library call: CUTLASS computes the groups that start on a
/// 16-token boundary, the reference kernel the others and the empty ones. Each group is
/// bit-identical to what its owner computes for it: an aligned group equals the same group in
/// the padded layout (every group at a 16-token start, zeros after it: what frameworks do for
/// torch), an unaligned or empty group equals the reference backend's result, on every kind.
#[test]
fn unaligned_groups_split_between_cutlass_and_reference() {
    use hipfp8::grouped_gemm_rule::{CUTLASS_KINDS, CutlassChoice};
    let name = "unaligned_groups_split_between_cutlass_and_reference";
    let Some(ctx) = gpu_for_tests(name) else {
        return;
    };
    let fmt = ctx.native_format();
    if hipfp8::grouped_gemm_gpu::library_impl(&ctx, fmt, fmt) != Some(GemmImpl::CutlassSm90) {
        skip_test(name, "the ownership split tested here is CUTLASS's");
        return;
    }
    let stream = Stream::new(&ctx).unwrap();
    let (n, k) = (192, 136);
    // starts 0, 16, 316, 316, 336, 988, 1019, 1020: groups 0, 1 and 4 are CUTLASS's
    let sizes = [16usize, 300, 0, 20, 652, 31, 1, 1000];
    let mt: usize = sizes.iter().sum::<usize>().div_ceil(16) * 16;
    let mut rng = Rng(900);
    let a = codes(&mut rng, n * mt, fmt);
    let b = codes(&mut rng, k * mt, fmt);
    let g = sizes.len();
    let sa = scales(&mut rng, g * n);
    let sb = scales(&mut rng, g * k);
    let mut offs = Vec::new();
    let mut starts = Vec::new();
    let mut end = 0;
    for s in sizes {
        starts.push(end);
        end += s;
        offs.push(end as i32);
    }
    let cutlass_owns: Vec<bool> = sizes
        .iter()
        .zip(&starts)
        .map(|(s, st)| *s > 0 && st % 16 == 0)
        .collect();
    assert_eq!(cutlass_owns.iter().filter(|&&o| o).count(), 3);
    // The padded layout: group g at a 16-aligned start, zeros up to the next group.
    let padded: Vec<usize> = sizes.iter().map(|s| s.div_ceil(16) * 16).collect();
    let mtp = padded.iter().sum::<usize>();
    let (mut ap, mut bp) = (vec![0u8; n * mtp], vec![0u8; k * mtp]);
    let (mut lo, mut lp) = (0, 0);
    let mut offs_p = Vec::new();
    for (s, ps) in sizes.iter().zip(&padded) {
        for i in 0..n {
            ap[i * mtp + lp..][..*s].copy_from_slice(&a[i * mt + lo..][..*s]);
        }
        for j in 0..k {
            bp[j * mtp + lp..][..*s].copy_from_slice(&b[j * mt + lo..][..*s]);
        }
        lo += s;
        lp += ps;
        offs_p.push(lp as i32);
    }
    let reference = GemmParams::new(fmt, fmt).with_backend(GemmBackend::Reference);
    let by_ref = gemm_2d2d_bits(
        &ctx,
        &stream,
        &reference,
        (n, mt, k),
        &a,
        &b,
        &offs,
        &sa,
        &sb,
    );
    // Staging off (GemmParams::unstaged_2d2d): the split is what this test checks
    // (`staged_unaligned_groups_equal_padded` checks the staged path); its workspace is the
    // groups-only size, and its op size says so.
    let unstaged = GemmParams::new(fmt, fmt).without_staging();
    let bytes = ctx.grouped_gemm_workspace_size(&unstaged, g).unwrap();
    let op = hipfp8::GroupedOp::TwoD2D { n, mt, k };
    assert_eq!(
        ctx.grouped_gemm_op_workspace_size(&unstaged, op, g)
            .unwrap(),
        bytes
    );
    let mut ws = DeviceBuffer::<u8>::zeroed(&ctx, bytes).unwrap();
    // SAFETY: a live device buffer of `bytes` bytes, used by nothing else while it is borrowed.
    let ws = unsafe { GemmWorkspace::from_raw(ws.as_mut_ptr().cast(), bytes) };
    for kind in CUTLASS_KINDS
        .iter()
        .filter(|c| c.pairs.contains(&(fmt, fmt)))
    {
        let c = CutlassChoice {
            kind: kind.id,
            raster_n: false,
            swizzle_log2: 0,
        };
        let p = unstaged
            .with_backend(GemmBackend::Library)
            .with_cutlass(c)
            .with_workspace(ws);
        let plan = ctx.grouped_gemm_plan(&p, op, g, None).unwrap();
        assert!(plan.split_2d2d && !plan.staged_2d2d, "{}", plan.describe());
        let un = gemm_2d2d_bits(&ctx, &stream, &p, (n, mt, k), &a, &b, &offs, &sa, &sb);
        let pd = gemm_2d2d_bits(&ctx, &stream, &p, (n, mtp, k), &ap, &bp, &offs_p, &sa, &sb);
        for (gi, owned) in cutlass_owns.iter().enumerate() {
            let r = gi * n * k..(gi + 1) * n * k;
            let want = if *owned {
                &pd[r.clone()]
            } else {
                &by_ref[r.clone()]
            };
            let diff = un[r].iter().zip(want).filter(|(x, y)| x != y).count();
            assert_eq!(
                diff,
                0,
                "{}: group {gi} ({}): {diff} elements differ from {}",
                kind.name,
                if *owned {
                    "aligned"
                } else {
                    "unaligned or empty"
                },
                if *owned {
                    "the padded call"
                } else {
                    "the reference kernel"
                }
            );
        }
        println!(
            "{}: aligned groups == padded, the others == reference, bit for bit",
            kind.name
        );
    }
}

/// Any group start (issue 16): 2D x 2D groups that start anywhere run on the library path;
/// groups on a 16-token boundary are read in place and only the others from their staged
/// copies (the plan says "staged"). Three offset sets: a mix of aligned groups (length a
/// multiple of 16 and not, longer and shorter than CK's 256-token minimum) and unaligned
/// ones; unpadded skewed sizes (every start residue mod 16, empty and 1-token groups, tokens
/// past the last group); all groups aligned (the torchao / `pad_wgrad` case). Each: the
/// output equals, bit for bit, the library's unstaged run on the explicitly padded operands
/// (`reference::moe::pad_cols`), and the f64 reference within the tolerance; a caller
/// workspace of `grouped_gemm_op_workspace_size` bytes gives the same bits, and the staged a
/// area in it (pre-filled with a sentinel) holds copies of exactly the groups the library
/// can't read in place, at their padded positions: aligned groups are not copied. One byte
/// less workspace is refused (nothing written); the plan does not change with it.
#[test]
fn staged_unaligned_groups_equal_padded() {
    let name = "staged_unaligned_groups_equal_padded";
    let Some(ctx) = gpu_for_tests(name) else {
        return;
    };
    let fmt = ctx.native_format();
    if hipfp8::grouped_gemm_gpu::library_impl(&ctx, fmt, fmt).is_none() {
        skip_test(name, "no grouped-GEMM library here");
        return;
    }
    let stream = Stream::new(&ctx).unwrap();
    // Starts on the boundary: 0 (1504 tokens), 1504 (704), 2208 (333: CUTLASS reads it in
    // place, CK stages its length); off it: 2541 (1), 2542 (290); on it again from 2832 (16,
    // 0, 16, 272 = CK's shortest in place, 48, then 5: a ragged group in place for CUTLASS);
    // off it from 3189 (300, 11, 0, 7).
    let mixed = vec![
        1504usize, 704, 333, 1, 290, 16, 0, 16, 272, 48, 5, 300, 11, 0, 7,
    ];
    let mut zipf = vec![1500usize, 700, 333, 0, 1, 290, 77, 0];
    zipf.extend(1..=17);
    let aligned = vec![1504usize, 704, 336, 0, 288, 16, 48, 272];
    for (case, sizes, seed) in [
        ("mixed", mixed, 1700u64),
        ("zipf", zipf, 1600),
        ("aligned", aligned, 1800),
    ] {
        staged_equals_padded(
            &ctx,
            &stream,
            (fmt, fmt),
            &format!("{name}/{case}"),
            &sizes,
            seed,
        );
    }
}

fn staged_equals_padded(
    ctx: &Context,
    stream: &Stream,
    (fa, fb): (Fp8Format, Fp8Format),
    name: &str,
    sizes: &[usize],
    seed: u64,
) {
    use hipfp8::GroupedOp;
    let (n, k) = (192, 136);
    let g = sizes.len();
    let mt = sizes.iter().sum::<usize>().div_ceil(16) * 16 + 16;
    let mut offs = Vec::new();
    let mut end = 0;
    for s in sizes {
        end += s;
        offs.push(end as i32);
    }
    let p = GemmParams::new(fa, fb).with_backend(GemmBackend::Library);
    let op = GroupedOp::TwoD2D { n, mt, k };
    let plan = ctx.grouped_gemm_plan(&p, op, g, None).unwrap();
    println!("{name}: {}", plan.describe());
    assert!(
        plan.staged_2d2d && plan.describe().contains("staged"),
        "{}",
        plan.describe()
    );
    // Against the f64 reference.
    run_2d2d(
        ctx,
        stream,
        &p,
        &Case2d2d {
            n,
            mt,
            k,
            offs: offs.clone(),
        },
        seed,
    );

    let mut rng = Rng(seed + 1);
    let a = codes(&mut rng, n * mt, fa);
    let b = codes(&mut rng, k * mt, fb);
    let sa = scales(&mut rng, g * n);
    let sb = scales(&mut rng, g * k);
    let staged = gemm_2d2d_bits(ctx, stream, &p, (n, mt, k), &a, &b, &offs, &sa, &sb);
    // The padded layout, built on the host, through the library unstaged (staging off, a
    // workspace of the groups-only size): every group starts on the boundary, so all are
    // read in place.
    let m_cap = (mt + 15 * g).div_ceil(16) * 16;
    let (mut ap, mut bp, mut offs_p) = (vec![0u8; n * m_cap], vec![0u8; k * m_cap], vec![0; g]);
    hipfp8::reference::moe::pad_cols((n, mt), &offs, &a, m_cap, &mut ap, &mut offs_p);
    hipfp8::reference::moe::pad_cols((k, mt), &offs, &b, m_cap, &mut bp, &mut offs_p);
    let small = ctx.grouped_gemm_workspace_size(&p, g).unwrap();
    let full = ctx.grouped_gemm_op_workspace_size(&p, op, g).unwrap();
    assert!(
        full > small,
        "staging needs more workspace ({full} vs {small})"
    );
    const FILL: u8 = 0xA5;
    let mut buf = DeviceBuffer::from_host(ctx, &vec![FILL; full]).unwrap();
    let ptr = buf.as_mut_ptr();
    // SAFETY: a live device buffer of `full` >= each size bytes, used by nothing else while
    // these calls borrow it (each call completes before the next: gemm_2d2d_bits syncs).
    let ws = |len: usize| unsafe { GemmWorkspace::from_raw(ptr.cast(), len) };
    let unstaged = p.without_staging().with_workspace(ws(small));
    let pplan = ctx
        .grouped_gemm_plan(&unstaged, GroupedOp::TwoD2D { n, mt: m_cap, k }, g, None)
        .unwrap();
    assert!(!pplan.staged_2d2d, "{}", pplan.describe());
    let padded = gemm_2d2d_bits(
        ctx,
        stream,
        &unstaged,
        (n, m_cap, k),
        &ap,
        &bp,
        &offs_p,
        &sa,
        &sb,
    );
    let diff = staged.iter().zip(&padded).filter(|(x, y)| x != y).count();
    assert_eq!(
        diff,
        0,
        "{name}: staged vs padded: {diff} of {} elements differ",
        staged.len()
    );
    // A caller workspace of the op size stages, with the same bits.
    buf.copy_from_host(&vec![FILL; full]).unwrap();
    let own = p.with_workspace(ws(full));
    assert!(
        ctx.grouped_gemm_plan(&own, op, g, None)
            .unwrap()
            .staged_2d2d
    );
    let again = gemm_2d2d_bits(ctx, stream, &own, (n, mt, k), &a, &b, &offs, &sa, &sb);
    assert_eq!(
        again, staged,
        "{name}: a caller workspace gives the same bits"
    );
    // The staged a area (src/grouped_gemm/gpu.rs StageLayout: it starts at the library's
    // part rounded up to 256 bytes; rows of mt_pad = round_up(mt + 15 g, 16) bytes) holds
    // the copied groups at their padded positions and the sentinel everywhere else.
    let wsv = buf.to_vec().unwrap();
    let a0 = small.div_ceil(256) * 256;
    let mt_pad = m_cap;
    let ck = matches!(plan.imp, GemmImpl::CkGfx942 | GemmImpl::CkGfx950);
    let (mut lo, mut ps, mut copied) = (0usize, 0usize, 0usize);
    for (gi, &len) in sizes.iter().enumerate() {
        let plen = len.div_ceil(16) * 16;
        let in_place = if ck {
            lo % 16 == 0 && len % 16 == 0 && len > 256
        } else {
            lo % 16 == 0
        };
        let copy = len > 0 && !in_place && (!ck || plen > 256);
        copied += copy as usize;
        for r in [0, n / 2, n - 1] {
            for c in 0..plen {
                let got = wsv[a0 + r * mt_pad + ps + c];
                let want = match (copy, c < len) {
                    (false, _) => FILL,
                    (true, true) => a[r * mt + lo + c],
                    (true, false) => 0,
                };
                assert_eq!(
                    got, want,
                    "{name}: group {gi} row {r} col {c} (copied {copy})"
                );
            }
        }
        lo += len;
        ps += plen;
    }
    if sizes.iter().all(|l| l % 16 == 0) {
        assert_eq!(copied, 0, "{name}: an aligned call copies nothing");
    } else {
        assert!(copied > 0, "{name}: some group is copied");
    }
    // One byte less: the same plan (it never reads the workspace), and the call refuses
    // before queueing anything (out and workspace keep their fills).
    let short = p.with_workspace(ws(full - 1));
    assert_eq!(ctx.grouped_gemm_plan(&short, op, g, None).unwrap(), plan);
    buf.copy_from_host(&vec![FILL; full]).unwrap();
    let refused = try_gemm_2d2d_bits(ctx, stream, &short, (n, mt, k), &a, &b, &offs, &sa, &sb);
    match refused {
        (Err(hipfp8::Error::OutputTooSmall { needed, got, .. }), out) => {
            assert_eq!((needed, got), (full, full - 1));
            assert!(
                out.iter().all(|&x| x == bf16::from_f32(SENTINEL).to_bits()),
                "{name}: a refused call wrote its output"
            );
        }
        (r, _) => panic!("{name}: a workspace one byte short: {r:?}, not OutputTooSmall"),
    }
    assert!(
        buf.to_vec().unwrap().iter().all(|&x| x == FILL),
        "{name}: a refused call wrote its workspace"
    );
    drop(buf);
    println!(
        "{name}: staged == padded bit for bit ({} elements), {copied} of {g} groups copied",
        staged.len()
    );
}

/// The workspace never picks the implementation (session 23: a caller workspace without room
/// for the staging area ran the reference kernel where the cached one ran the library, one
/// bf16 ulp apart): on the offsets that showed it (an empty group, starts off a 16-token
/// boundary, tokens past the last group), for Auto, Library and staging off, the plan is the
/// same with no workspace, with one of `grouped_gemm_op_workspace_size` bytes and with a
/// 1-byte one; the call gives the same bits with the cached workspace and with the caller's;
/// the op size is at least the shape-less one (more when staged).
#[test]
fn workspace_never_changes_the_implementation() {
    use hipfp8::GroupedOp;
    let name = "workspace_never_changes_the_implementation";
    let Some(ctx) = gpu_for_tests(name) else {
        return;
    };
    let stream = Stream::new(&ctx).unwrap();
    let fmt = ctx.native_format();
    let (n, mt, k) = (136, 512, 264);
    let offs = vec![100, 100, 333, 497];
    let g = offs.len();
    let op = GroupedOp::TwoD2D { n, mt, k };
    let mut rng = Rng(2300);
    let a = codes(&mut rng, n * mt, fmt);
    let b = codes(&mut rng, k * mt, fmt);
    let sa = scales(&mut rng, g * n);
    let sb = scales(&mut rng, g * k);
    let base = GemmParams::new(fmt, fmt);
    let library = hipfp8::grouped_gemm_gpu::library_impl(&ctx, fmt, fmt).is_some();
    let mut variants = vec![("auto", base), ("unstaged", base.without_staging())];
    if library {
        variants.push(("library", base.with_backend(GemmBackend::Library)));
    }
    for (what, p) in variants {
        let plan = ctx.grouped_gemm_plan(&p, op, g, None).unwrap();
        let bytes = ctx.grouped_gemm_op_workspace_size(&p, op, g).unwrap();
        let shapeless = ctx.grouped_gemm_workspace_size(&p, g).unwrap();
        assert!(bytes >= shapeless, "{what}: {bytes} < {shapeless}");
        assert_eq!(
            plan.staged_2d2d,
            bytes > shapeless,
            "{what}: {}",
            plan.describe()
        );
        let mut buf = DeviceBuffer::<u8>::zeroed(&ctx, bytes.max(1)).unwrap();
        let ptr = buf.as_mut_ptr();
        // SAFETY: a live device buffer of at least `len` bytes, used by nothing else while
        // these calls borrow it (gemm_2d2d_bits syncs after each call).
        let ws = |len: usize| p.with_workspace(unsafe { GemmWorkspace::from_raw(ptr.cast(), len) });
        for len in [bytes, 1] {
            assert_eq!(
                ctx.grouped_gemm_plan(&ws(len), op, g, None).unwrap(),
                plan,
                "{what}: the plan with a {len}-byte workspace"
            );
        }
        let cached = gemm_2d2d_bits(&ctx, &stream, &p, (n, mt, k), &a, &b, &offs, &sa, &sb);
        let own = gemm_2d2d_bits(
            &ctx,
            &stream,
            &ws(bytes),
            (n, mt, k),
            &a,
            &b,
            &offs,
            &sa,
            &sb,
        );
        let diff = cached.iter().zip(&own).filter(|(x, y)| x != y).count();
        assert_eq!(
            diff,
            0,
            "{what} ({}): cached vs caller workspace",
            plan.describe()
        );
        drop(buf);
        println!(
            "{name}/{what}: {} with any workspace, {bytes} B (shape-less {shapeless} B), \
             cached == caller's bit for bit",
            plan.describe()
        );
    }
}

/// The plan query: what runs and why, on the CPU and the GPU; Library refuses a fallback.
#[test]
fn plan_says_what_runs_and_why() {
    use hipfp8::{Fallback, GroupedOp};
    let cpu = Context::cpu();
    let p = GemmParams::new(Fp8Format::E4M3Fn, Fp8Format::E4M3Fn);
    let op = GroupedOp::TwoD3D {
        m: 64,
        n: 64,
        k: 64,
    };
    let plan = cpu.grouped_gemm_plan(&p, op, 2, None).unwrap();
    assert_eq!((plan.imp, plan.fallback.is_none()), (GemmImpl::Cpu, true));
    let Some(ctx) = gpu_for_tests("plan_says_what_runs_and_why") else {
        return;
    };
    let fmt = ctx.native_format();
    let r = ctx
        .grouped_gemm_plan(
            &GemmParams::new(fmt, fmt).with_backend(GemmBackend::Reference),
            op,
            2,
            None,
        )
        .unwrap();
    assert_eq!(
        (r.imp, r.fallback),
        (GemmImpl::Reference, Some(Fallback::Requested))
    );
    if hipfp8::grouped_gemm_gpu::library_impl(&ctx, fmt, fmt).is_none() {
        skip_test("plan_says_what_runs_and_why (GPU part)", "no library here");
        return;
    }
    let lib = ctx
        .grouped_gemm_plan(&GemmParams::new(fmt, fmt), op, 2, None)
        .unwrap();
    assert!(
        lib.fallback.is_none() && lib.imp != GemmImpl::Reference,
        "{lib:?}"
    );
    // E5M2 x E5M2 has no instance anywhere; K = 45 breaks the shape rule; a misaligned out.
    let e5 = ctx.resolve(hipfp8::FormatChoice::AutoE5M2);
    let cases: [(
        GemmParams,
        GroupedOp,
        Option<[*const std::ffi::c_void; 3]>,
        u32,
    ); 3] = [
        (GemmParams::new(e5, e5), op, None, 3),
        (
            GemmParams::new(fmt, fmt),
            GroupedOp::TwoD3D {
                m: 64,
                n: 64,
                k: 45,
            },
            None,
            4,
        ),
        (
            GemmParams::new(fmt, fmt),
            op,
            Some([256 as *const _, 512 as *const _, 520 as *const _]),
            5,
        ),
    ];
    for (p, op, ptrs, code) in cases {
        let plan = ctx.grouped_gemm_plan(&p, op, 2, ptrs).unwrap();
        assert_eq!(plan.imp, GemmImpl::Reference, "{plan:?}");
        assert_eq!(
            plan.fallback.as_ref().map(|f| f.code()),
            Some(code),
            "{plan:?}"
        );
        println!("{}", plan.describe());
        let strict = p.with_backend(GemmBackend::Library);
        assert!(ctx.grouped_gemm_plan(&strict, op, 2, ptrs).is_err());
    }
}

/// sm90.hip's instance table and src/grouped_gemm_rule.rs's list agree (CUDA builds; the
/// query is pure host code, so no GPU is needed).
#[test]
fn cutlass_instance_table_matches_the_rule_table() {
    use hipfp8::grouped_gemm_rule::CUTLASS_KINDS;
    if !hipfp8::device::has_launcher("hipfp8_gg_cutlass_has_instance") {
        skip_test(
            "cutlass_instance_table_matches_the_rule_table",
            "no CUTLASS in this build",
        );
        return;
    }
    for kind in 1..=8i32 {
        for fa in Fp8Format::ALL {
            for fb in Fp8Format::ALL {
                let mut yes = -1;
                // SAFETY: `yes` is valid for one write; the function reads nothing else.
                let st = unsafe {
                    hipfp8::sys::hipfp8_gg_cutlass_has_instance(
                        kind, fa as i32, fb as i32, &mut yes,
                    )
                };
                assert_eq!(st, 0);
                let listed = CUTLASS_KINDS
                    .iter()
                    .any(|k| i32::from(k.id) == kind && k.pairs.contains(&(fa, fb)));
                assert_eq!(yes == 1, listed, "kind {kind} {fa} x {fb}");
            }
        }
    }
}
