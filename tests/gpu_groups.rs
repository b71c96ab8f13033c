//! Every grouped scale-and-cast on the GPU at any group count (issue 17): 1, around the
//! kernels' internal limits (2047-2049: the shared-memory tables of one launch; 3071-3073 and
//! 4095-4097: where the tables used to outgrow shared memory; multiples of the 2048-group
//! chunk +- 1) and 65536 groups, bf16 and f32, aligned and unaligned views (the vector and the
//! element-wise kernels), against the CPU bit for bit, outputs compared whole (sentinels).
//! Bad device offsets (decreasing, negative, past the extent) at every count are clamped as
//! documented. The grouped GEMMs (2D x 3D and 2D x 2D, the reference kernel and the vendor
//! library) at 1, 2, 255-257, 4096 and 65536 groups with empty groups, against the CPU backend
//! within the accumulation-order bound of `gemm_close`. Skips with a printed reason without a
//! GPU (HIPFP8_REQUIRE_GPU=1 makes that a failure).

mod common;

use common::gpu::{DevHp, Out, check_f32, check_u8};
use common::{Fill, Rng, SENT_F32, SENT_U8, Tensor, offsets, ranges};
use hipfp8::device::{DeviceBuffer, gpu_for_tests, skip_test};
use hipfp8::{
    CastParams, Context, Dst, Fp8Format, GemmBackend, GemmImpl, GemmParams, Src, StreamRef, bf16,
};

const COUNTS: [usize; 14] = [
    1, 2, 2047, 2048, 2049, 3071, 3072, 3073, 4095, 4096, 4097, 6143, 6145, 65536,
];

/// The group counts to run: all of COUNTS, or those up to HIPFP8_GROUP_COUNTS_MAX (the
/// sanitizer script leaves out the 65536-group cases, slow under its tools).
fn counts() -> Vec<(usize, usize)> {
    let max = std::env::var("HIPFP8_GROUP_COUNTS_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(usize::MAX);
    COUNTS
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, g)| g <= max)
        .collect()
}

fn fill(seed: u64, bf16: bool) -> Fill {
    Fill {
        seed,
        special_pct: 2,
        zero_row_pct: 5,
        mag_exp: (seed % 20) as i32 - 10,
        bf16,
    }
}

/// The GPU's reading of device offsets: prefix max, clamped to [0, extent].
fn clamp(offs: &[i32], extent: usize) -> Vec<i32> {
    let mut prev = 0i32;
    offs.iter()
        .map(|&o| {
            prev = o.max(prev).min(extent as i32).max(0);
            prev
        })
        .collect()
}

/// Offsets for `g` groups over `extent`: random (with empty and one-row groups) or, for
/// odd `seed`, bad ones (decreasing, negative, past the extent) that the GPU clamps.
fn group_offsets(seed: u64, g: usize, extent: usize) -> (Vec<i32>, Vec<i32>) {
    let good = offsets(seed, g, extent);
    if seed % 2 == 0 || g < 4 {
        return (good.clone(), good);
    }
    let mut bad = good;
    bad[1] = -3;
    bad[g / 2] = extent as i32 + 100;
    bad[g / 2 + 1] = 0;
    let c = clamp(&bad, extent);
    (bad, c)
}

fn p(i: usize) -> CastParams {
    let f = [
        Fp8Format::E4M3Fn,
        Fp8Format::E5M2,
        Fp8Format::E4M3FnUz,
        Fp8Format::E5M2FnUz,
    ];
    CastParams::new(f[i % 4], i % 3 == 0)
}

#[test]
fn per_group_colwise_any_group_count() {
    let Some(ctx) = gpu_for_tests("per_group_colwise_any_group_count") else {
        return;
    };
    let c = Context::cpu();
    for (i, g) in counts() {
        // rows: about 1.3 per group plus a few long groups' worth
        let m = g + g / 3 + 37;
        for (k, skew) in [(64usize, 0usize), (24, 1)] {
            let t = Tensor::new(&fill(i as u64, i % 2 == 0), m * k, k);
            let (dev_offs, offs) = group_offsets(i as u64 * 7 + k as u64, g, m);
            let pp = p(i);
            let dx = DevHp::new(&ctx, &t, skew);
            let doffs = DeviceBuffer::from_host(&ctx, &dev_offs).unwrap();
            let mut o = Out::new(&ctx, m * k, SENT_U8, 0);
            let mut sc = Out::new(&ctx, g * k, SENT_F32, 0);
            c.per_group_colwise(
                &pp,
                m,
                k,
                t.hp(),
                (&offs).into(),
                o.cpu(),
                sc.cpu(),
                StreamRef::DEFAULT,
            )
            .unwrap();
            ctx.per_group_colwise(
                &pp,
                m,
                k,
                dx.hp(),
                doffs.src(),
                o.gpu(),
                sc.gpu(),
                StreamRef::DEFAULT,
            )
            .unwrap_or_else(|e| panic!("G={g} m={m} k={k}: {e}"));
            let w = format!("per_group_colwise G={g} m={m} k={k} skew={skew}");
            check_u8(&w, &o).unwrap();
            check_f32(&w, &sc).unwrap();
        }
    }
}

#[test]
fn per_group_colwise_dual_any_group_count() {
    let Some(ctx) = gpu_for_tests("per_group_colwise_dual_any_group_count") else {
        return;
    };
    let c = Context::cpu();
    for (i, g) in counts() {
        let m = g + g / 4 + 11;
        let (k1, k2) = (32usize, 16usize);
        let bf = i % 2 == 1;
        let t1 = Tensor::new(&fill(i as u64, bf), m * k1, k1);
        let t2 = Tensor::new(&fill(i as u64 + 100, bf), m * k2, k2);
        let (dev_offs, offs) = group_offsets(i as u64 * 5 + 1, g, m);
        let pp = p(i + 1);
        let skew = i % 3 == 2;
        let (d1, d2) = (
            DevHp::new(&ctx, &t1, skew as usize),
            DevHp::new(&ctx, &t2, 0),
        );
        let doffs = DeviceBuffer::from_host(&ctx, &dev_offs).unwrap();
        let mut o1 = Out::new(&ctx, m * k1, SENT_U8, 0);
        let mut s1 = Out::new(&ctx, g * k1, SENT_F32, 0);
        let mut o2 = Out::new(&ctx, m * k2, SENT_U8, 0);
        let mut s2 = Out::new(&ctx, g * k2, SENT_F32, 0);
        c.per_group_colwise_dual(
            &pp,
            m,
            k1,
            k2,
            t1.hp(),
            t2.hp(),
            (&offs).into(),
            o1.cpu(),
            s1.cpu(),
            o2.cpu(),
            s2.cpu(),
            StreamRef::DEFAULT,
        )
        .unwrap();
        ctx.per_group_colwise_dual(
            &pp,
            m,
            k1,
            k2,
            d1.hp(),
            d2.hp(),
            doffs.src(),
            o1.gpu(),
            s1.gpu(),
            o2.gpu(),
            s2.gpu(),
            StreamRef::DEFAULT,
        )
        .unwrap_or_else(|e| panic!("G={g}: {e}"));
        let w = format!("per_group_colwise_dual G={g} m={m}");
        check_u8(&w, &o1).unwrap();
        check_f32(&w, &s1).unwrap();
        check_u8(&w, &o2).unwrap();
        check_f32(&w, &s2).unwrap();
    }
}

#[test]
fn rowwise_3d_transpose_rhs_any_expert_count() {
    let Some(ctx) = gpu_for_tests("rowwise_3d_transpose_rhs_any_expert_count") else {
        return;
    };
    let c = Context::cpu();
    for (i, e) in counts() {
        // (k, n): vector path with 16-row groups, and an odd n (byte stores, unaligned)
        for (k, n) in [(16usize, 16usize), (8, 5)] {
            let t = Tensor::new(&fill(i as u64 + 7, i % 2 == 0), e * k * n, k);
            let pp = p(i + 2);
            let dx = DevHp::new(&ctx, &t, 0);
            let mut o = Out::new(&ctx, e * k * n, SENT_U8, 0);
            let mut sc = Out::new(&ctx, e * k, SENT_F32, 0);
            c.rowwise_3d_transpose_rhs(&pp, e, k, n, t.hp(), o.cpu(), sc.cpu(), StreamRef::DEFAULT)
                .unwrap();
            ctx.rowwise_3d_transpose_rhs(
                &pp,
                e,
                k,
                n,
                dx.hp(),
                o.gpu(),
                sc.gpu(),
                StreamRef::DEFAULT,
            )
            .unwrap_or_else(|err| panic!("E={e}: {err}"));
            let w = format!("rowwise_3d_transpose_rhs E={e} k={k} n={n}");
            check_u8(&w, &o).unwrap();
            check_f32(&w, &sc).unwrap();
        }
    }
}

#[test]
fn per_group_rowwise_any_group_count() {
    let Some(ctx) = gpu_for_tests("per_group_rowwise_any_group_count") else {
        return;
    };
    let c = Context::cpu();
    for (i, g) in counts() {
        let k = g + g / 2 + 40;
        for (m, skew) in [(3usize, 0usize), (2, 1)] {
            let t = Tensor::new(&fill(i as u64 + 3, i % 2 == 1), m * k, k);
            let (dev_offs, offs) = group_offsets(i as u64 * 3 + m as u64, g, k);
            let pp = p(i + 3);
            let dx = DevHp::new(&ctx, &t, skew);
            let doffs = DeviceBuffer::from_host(&ctx, &dev_offs).unwrap();
            let mut o = Out::new(&ctx, m * k, SENT_U8, skew);
            let mut sc = Out::new(&ctx, g * m, SENT_F32, 0);
            c.per_group_rowwise(
                &pp,
                m,
                k,
                t.hp(),
                (&offs).into(),
                o.cpu(),
                sc.cpu(),
                StreamRef::DEFAULT,
            )
            .unwrap();
            ctx.per_group_rowwise(
                &pp,
                m,
                k,
                dx.hp(),
                doffs.src(),
                o.gpu(),
                sc.gpu(),
                StreamRef::DEFAULT,
            )
            .unwrap_or_else(|e| panic!("G={g} k={k}: {e}"));
            let w = format!("per_group_rowwise G={g} m={m} k={k} skew={skew}");
            check_u8(&w, &o).unwrap();
            check_f32(&w, &sc).unwrap();
        }
    }
}

#[test]
fn rowwise_2d_padded_any_group_count() {
    let Some(ctx) = gpu_for_tests("rowwise_2d_padded_any_group_count") else {
        return;
    };
    let c = Context::cpu();
    for (i, g) in counts() {
        let m = g + g / 2 + 21;
        let k = if i % 2 == 0 { 32 } else { 7 };
        let cap = m + 15 * g + i % 3;
        let t = Tensor::new(&fill(i as u64 + 11, i % 3 != 1), m * k, k);
        let (dev_offs, offs) = group_offsets(i as u64 * 13 + 2, g, m);
        let pp = p(i);
        let dx = DevHp::new(&ctx, &t, i % 4 / 3);
        let doffs = DeviceBuffer::from_host(&ctx, &dev_offs).unwrap();
        let mut o = Out::new(&ctx, cap * k, SENT_U8, 0);
        let mut sc = Out::new(&ctx, cap, SENT_F32, 0);
        let mut po = Out::new(&ctx, g, -7i32, 0);
        c.rowwise_2d_padded(
            &pp,
            m,
            k,
            cap,
            t.hp(),
            (&offs).into(),
            o.cpu(),
            sc.cpu(),
            po.cpu(),
            StreamRef::DEFAULT,
        )
        .unwrap();
        ctx.rowwise_2d_padded(
            &pp,
            m,
            k,
            cap,
            dx.hp(),
            doffs.src(),
            o.gpu(),
            sc.gpu(),
            po.gpu(),
            StreamRef::DEFAULT,
        )
        .unwrap_or_else(|e| panic!("G={g}: {e}"));
        let w = format!("rowwise_2d_padded G={g} m={m} k={k}");
        check_u8(&w, &o).unwrap();
        check_f32(&w, &sc).unwrap();
        assert!(po.gpu_host() == po.host, "{w}: padded offsets differ");
    }
}

// ---- grouped GEMMs ---------------------------------------------------------------------------

/// Group counts of the grouped GEMM tests: 1, 2, around 256 (DeepSeek-V3's experts; a
/// byte-sized group index), 4096 and 65536, with empty groups (see `offsets`).
const GEMM_COUNTS: [usize; 7] = [1, 2, 255, 256, 257, 4096, 65536];

fn gemm_counts() -> Vec<usize> {
    let max = counts().last().map_or(0, |&(_, g)| g);
    GEMM_COUNTS.iter().copied().filter(|&g| g <= max).collect()
}

/// FP8 codes of values in [-4, 4) times 2^-2..2^2 (what a scaled cast gives), and positive
/// scales: products neither overflow nor all underflow.
fn gemm_codes(r: &mut Rng, n: usize, fmt: Fp8Format) -> Vec<u8> {
    (0..n)
        .map(|_| fmt.encode(r.unit() * 4.0 * 2f32.powi(r.below(5) as i32 - 2)))
        .collect()
}

fn gemm_scales(r: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| 2f32.powi(r.below(9) as i32 - 4) * (1.0 + r.below(64) as f32 / 64.0))
        .collect()
}

/// The GPU's bf16 output against the CPU backend's, per element: both round an f32 sum to bf16
/// (2^-9 relative each) and accumulate in a different order (f32: 2 (K + 2) 2^-24 of the sum
/// of |products| S; CUTLASS's FP8 fast accumulation: 2^-12 S per k = 32 step, as in
/// tests/gpu_grouped_gemm.rs), so |gpu - cpu| <= 2^-7 max(|gpu|, |cpu|) + 2 acc S. A wrong
/// group, row or scale is off by O(S). `abs_sum[i]` is S of element i (None: untouched, both
/// must keep the sentinel); elements of empty groups (S = 0, `len` 0) must be +0 exactly.
fn gemm_close(
    what: &str,
    gpu: &[bf16],
    cpu: &[bf16],
    abs_sum: &[Option<(f64, usize)>],
    fast_acc: bool,
) {
    assert_eq!(gpu.len(), cpu.len());
    let mut bad = Vec::new();
    for (i, s) in abs_sum.iter().enumerate() {
        let (g, c) = (gpu[i].to_f32() as f64, cpu[i].to_f32() as f64);
        let ok = match *s {
            None => gpu[i].to_bits() == cpu[i].to_bits(),
            Some((_, 0)) => gpu[i].to_bits() == 0 && cpu[i].to_bits() == 0,
            Some((s, len)) => {
                let gamma = (len as f64 + 2.0) * 2f64.powi(-24);
                let acc = if fast_acc {
                    (2.0 * gamma).max((len as f64 / 32.0).ceil() * 2f64.powi(-12))
                } else {
                    2.0 * gamma
                };
                (g - c).abs() <= 2f64.powi(-7) * g.abs().max(c.abs()) + 2.0 * acc * s
            }
        };
        if !ok {
            bad.push(i);
        }
    }
    assert!(
        bad.is_empty(),
        "{what}: {} of {} elements differ beyond the bound; first at {}: gpu {} cpu {} ({:?})",
        bad.len(),
        gpu.len(),
        bad[0],
        gpu[bad[0]],
        cpu[bad[0]],
        abs_sum[bad[0]]
    );
}

fn decode_table(fmt: Fp8Format) -> Vec<f64> {
    (0..=255u8).map(|c| fmt.decode(c) as f64).collect()
}

/// Which backends to run: the reference kernel always, the vendor library where the build
/// has one for the device's native format (else a printed skip of that part).
fn gemm_backends(ctx: &Context, test: &str) -> Vec<(GemmParams, bool, usize)> {
    let fmt = ctx.native_format();
    let mut v = vec![(
        GemmParams::new(fmt, fmt).with_backend(GemmBackend::Reference),
        false,
        32,
    )];
    match hipfp8::grouped_gemm_gpu::library_impl(ctx, fmt, fmt) {
        Some(imp) => {
            // CK's pipeline needs K > 256 for 2D x 3D (src/grouped_gemm/gpu.rs).
            let k = if imp == GemmImpl::CutlassSm90 {
                32
            } else {
                272
            };
            v.push((
                GemmParams::new(fmt, fmt).with_backend(GemmBackend::Library),
                imp == GemmImpl::CutlassSm90,
                k,
            ));
        }
        None => skip_test(
            test,
            &format!(
                "no vendor grouped GEMM for {} in this build: reference kernel only",
                ctx.arch()
            ),
        ),
    }
    v
}

/// A grouped GEMM's operands (FP8 codes a and b, END offsets, scales a and b), on the host
/// and in `dev` on the device.
struct GemmArgs {
    a: Vec<u8>,
    b: Vec<u8>,
    offs: Vec<i32>,
    sa: Vec<f32>,
    sb: Vec<f32>,
    dev: GemmDev,
}

/// [`GemmArgs`] on the device.
struct GemmDev {
    a: DeviceBuffer<u8>,
    b: DeviceBuffer<u8>,
    offs: DeviceBuffer<i32>,
    sa: DeviceBuffer<f32>,
    sb: DeviceBuffer<f32>,
}

type GemmSrcs<'a> = (
    Src<'a, u8>,
    Src<'a, u8>,
    Src<'a, i32>,
    Src<'a, f32>,
    Src<'a, f32>,
);

impl GemmArgs {
    /// Random operands of `lens` = (a, b, scale_a, scale_b) elements and `g` groups over
    /// `extent` (random offsets, so empty and one-row groups are common; group 1 surely empty).
    fn new(
        ctx: &Context,
        seed: u64,
        fmt: Fp8Format,
        lens: [usize; 4],
        g: usize,
        extent: usize,
    ) -> Self {
        let mut r = Rng::new(seed);
        let a = gemm_codes(&mut r, lens[0], fmt);
        let b = gemm_codes(&mut r, lens[1], fmt);
        let sa = gemm_scales(&mut r, lens[2]);
        let sb = gemm_scales(&mut r, lens[3]);
        let mut offs = offsets(seed, g, extent);
        if g > 1 {
            offs[1] = offs[0];
        }
        let dev = GemmDev {
            a: DeviceBuffer::from_host(ctx, &a).unwrap(),
            b: DeviceBuffer::from_host(ctx, &b).unwrap(),
            offs: DeviceBuffer::from_host(ctx, &offs).unwrap(),
            sa: DeviceBuffer::from_host(ctx, &sa).unwrap(),
            sb: DeviceBuffer::from_host(ctx, &sb).unwrap(),
        };
        GemmArgs {
            a,
            b,
            offs,
            sa,
            sb,
            dev,
        }
    }
    fn host(&self) -> GemmSrcs<'_> {
        let a = self;
        (
            (&a.a).into(),
            (&a.b).into(),
            (&a.offs).into(),
            (&a.sa).into(),
            (&a.sb).into(),
        )
    }
    fn device(&self) -> GemmSrcs<'_> {
        let d = &self.dev;
        (d.a.src(), d.b.src(), d.offs.src(), d.sa.src(), d.sb.src())
    }
}

#[test]
fn grouped_gemm_2d3d_any_group_count() {
    let Some(ctx) = gpu_for_tests("grouped_gemm_2d3d_any_group_count") else {
        return;
    };
    let c = Context::cpu();
    for (p, fast_acc, k) in gemm_backends(&ctx, "grouped_gemm_2d3d_any_group_count") {
        let fmt = ctx.resolve(p.a_format);
        let tab = decode_table(fmt);
        for (i, e) in gemm_counts().into_iter().enumerate() {
            let (m, n) = (e + e / 3 + 37, 16usize);
            let x = GemmArgs::new(
                &ctx,
                0x2d3d + i as u64,
                fmt,
                [m * k, e * k * n, m, e * n],
                e,
                m,
            );
            let mut o = Out::new(&ctx, m * n, bf16::from_f32(-768.0), 0);
            let run = |on: &Context,
                       p: &GemmParams,
                       (a, b, offs, sa, sb): GemmSrcs<'_>,
                       out: Dst<'_, bf16>| {
                on.grouped_gemm_2d3d(p, m, k, n, e, a, b, offs, sa, sb, out, StreamRef::DEFAULT)
            };
            run(&c, &GemmParams::new(fmt, fmt), x.host(), o.cpu()).unwrap();
            let w = format!("grouped_gemm_2d3d {:?} E={e} m={m} k={k} n={n}", p.backend);
            run(&ctx, &p, x.device(), o.gpu()).unwrap_or_else(|err| panic!("{w}: {err}"));
            // S of each written element; rows past offs[E-1] (and the 7 spare) untouched
            let mut s = vec![None; m * n + 7];
            for (g, (r0, r1)) in ranges(&x.offs).into_iter().enumerate() {
                for row in r0..r1 {
                    for j in 0..n {
                        let bcol = &x.b[(g * n + j) * k..(g * n + j + 1) * k];
                        let sum: f64 = x.a[row * k..(row + 1) * k]
                            .iter()
                            .zip(bcol)
                            .map(|(&u, &v)| (tab[u as usize] * tab[v as usize]).abs())
                            .sum();
                        s[row * n + j] = Some((sum * (x.sa[row] * x.sb[g * n + j]) as f64, k));
                    }
                }
            }
            gemm_close(&w, &o.gpu_host(), &o.host, &s, fast_acc);
        }
    }
}

#[test]
fn grouped_gemm_2d2d_any_group_count() {
    let Some(ctx) = gpu_for_tests("grouped_gemm_2d2d_any_group_count") else {
        return;
    };
    let c = Context::cpu();
    for (p, fast_acc, _) in gemm_backends(&ctx, "grouped_gemm_2d2d_any_group_count") {
        let fmt = ctx.resolve(p.a_format);
        let tab = decode_table(fmt);
        for (i, g) in gemm_counts().into_iter().enumerate() {
            // Mt % 16 == 0 and K % 8 == 0: what the library takes (groups start anywhere)
            let (n, k) = (16usize, 16usize);
            let mt = (g + g / 3 + 37).div_ceil(16) * 16;
            let x = GemmArgs::new(
                &ctx,
                0x2d2d + i as u64,
                fmt,
                [n * mt, mt * k, g * n, g * k],
                g,
                mt,
            );
            let mut o = Out::new(&ctx, g * n * k, bf16::from_f32(-768.0), 0);
            let run = |on: &Context,
                       p: &GemmParams,
                       (a, b, offs, sa, sb): GemmSrcs<'_>,
                       out: Dst<'_, bf16>| {
                on.grouped_gemm_2d2d(p, n, mt, k, a, b, offs, sa, sb, out, StreamRef::DEFAULT)
            };
            run(&c, &GemmParams::new(fmt, fmt), x.host(), o.cpu()).unwrap();
            let w = format!(
                "grouped_gemm_2d2d {:?} G={g} n={n} mt={mt} k={k}",
                p.backend
            );
            run(&ctx, &p, x.device(), o.gpu()).unwrap_or_else(|err| panic!("{w}: {err}"));
            let mut s = vec![None; g * n * k + 7];
            for (gi, (t0, t1)) in ranges(&x.offs).into_iter().enumerate() {
                for row in 0..n {
                    for j in 0..k {
                        let sum: f64 = (t0..t1)
                            .map(|t| {
                                (tab[x.a[row * mt + t] as usize] * tab[x.b[j * mt + t] as usize])
                                    .abs()
                            })
                            .sum();
                        let sc = (x.sa[gi * n + row] * x.sb[gi * k + j]) as f64;
                        s[gi * n * k + row * k + j] = Some((sum * sc, t1 - t0));
                    }
                }
            }
            gemm_close(&w, &o.gpu_host(), &o.host, &s, fast_acc);
        }
    }
}
