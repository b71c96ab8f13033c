//! GPU == CPU reference, bit for bit, for cast_transpose (tensorwise, rowwise), tensorwise,
//! blockwise 1x128 / 128x128, MXFP8 dim0 / dim1 (FLOOR, RCEIL) and rowwise_2d_padded.
//!
//! Every test starts with `gpu_for_tests`: without a GPU build or device it prints
//! `HIPFP8_SKIP ...` and returns (HIPFP8_REQUIRE_GPU=1 turns that into a failure); with a GPU,
//! every comparison must hold. Inputs come from the shared generator (NaN, +-Inf, f32 and bf16
//! subnormals, +-max of every format, zero rows, wide magnitude spread), bf16 and f32, every
//! format, pow2 on and off; shapes are odd, 1-sized, tile +- 1 and some multi-tile ones.
//! Outputs are pre-filled with a sentinel on both backends and compared whole (so a stray or a
//! missing write is caught); some views start one element into their buffer (unaligned paths).
//!
//! `gpu_timings_kernels2` (run only with HIPFP8_K2_BENCH=1) prints a timing table of these ops
//! on the Llama3-8B and DeepSeek shapes against a device-to-device copy measured in the same run.

mod common;

use common::gpu::{
    DevHp, Out, cast_transpose_vs_cpu, check, check_f32, check_u8, params, runner,
    tensorwise_vs_cpu,
};
use common::{Fill, SENT_F32, SENT_U8, Tensor, dim, fill_strategy, offsets};
use hipfp8::device::{DeviceBuffer, Event, Stream, gpu_for_tests};
use hipfp8::mx::{MxParams, MxRounding};
use hipfp8::{CastParams, Context, Fp8Format, HpSrc, Scaling, StreamRef, bf16};
use proptest::prelude::*;

// ------------------------------------------------------------------------------ helpers

fn mx_params() -> impl Strategy<Value = (MxParams, Fill, bool)> {
    (
        prop_oneof![Just(Fp8Format::E4M3Fn), Just(Fp8Format::E5M2)],
        prop_oneof![Just(MxRounding::Floor), Just(MxRounding::Rceil)],
        fill_strategy(),
        prop_oneof![3 => Just(false), 1 => Just(true)],
    )
        .prop_map(|(f, r, fill, skew)| (MxParams::new(f, r), fill, skew))
}

fn big_dim() -> impl Strategy<Value = usize> {
    prop_oneof![4 => dim(300), 1 => 1000usize..2600]
}

// ------------------------------------------------------------------------------ tensorwise / cast_transpose

fn run_cast_transpose(ctx: &Context, scaling: Scaling, cases: u32) {
    let mut r = runner(cases);
    r.run(
        &((big_dim(), dim(300)), params(3)),
        |((m, k), (fmt, pow2, fill, skew))| {
            let p = CastParams::new(fmt, pow2);
            let t = Tensor::new(&fill, m * k, k);
            let s = skew as usize;
            let dx = DevHp::new(ctx, &t, s);
            let w = format!(
                "cast_transpose {scaling:?} m={m} k={k} {fmt} pow2={pow2} skew={s} fill={fill:?}"
            );
            cast_transpose_vs_cpu(ctx, &p, scaling, m, k, &t, &dx, s, None, &w)
        },
    )
    .unwrap();
}

#[test]
fn cast_transpose_tensorwise_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("cast_transpose_tensorwise_gpu_eq_cpu") else {
        return;
    };
    run_cast_transpose(&ctx, Scaling::Tensorwise, 64);
}

#[test]
fn cast_transpose_rowwise_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("cast_transpose_rowwise_gpu_eq_cpu") else {
        return;
    };
    run_cast_transpose(&ctx, Scaling::Rowwise, 64);
}

// ------------------------------------------------------------------------------ tensorwise

#[test]
fn tensorwise_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("tensorwise_gpu_eq_cpu") else {
        return;
    };
    let mut r = runner(64);
    let n = prop_oneof![3 => 0usize..3000, 1 => 3000usize..400_000];
    r.run(&(n, params(3)), |(n, (fmt, pow2, fill, skew))| {
        let p = CastParams::new(fmt, pow2);
        let t = Tensor::new(&fill, n, 97);
        let s = skew as usize;
        let dx = DevHp::new(&ctx, &t, s);
        let w = format!("tensorwise n={n} {fmt} pow2={pow2} skew={s} fill={fill:?}");
        tensorwise_vs_cpu(&ctx, &p, n, &t, &dx, s, None, &w)
    })
    .unwrap();
}

/// Many blocks, repeated on two streams: the workspace must come back zero every time (a stale
/// amax from a NaN tensor would poison the next call), also after an empty (m = 0) call.
#[test]
fn two_phase_workspace_reuse() {
    let Some(ctx) = gpu_for_tests("two_phase_workspace_reuse") else {
        return;
    };
    let streams = [
        Stream::new(&ctx).unwrap(),
        Stream::new_non_blocking(&ctx).unwrap(),
    ];
    let (m, k) = (1500usize, 1100usize);
    for rep in 0..6 {
        let fill = Fill {
            seed: rep,
            special_pct: if rep == 1 { 3 } else { 0 },
            zero_row_pct: 5,
            mag_exp: rep as i32 * 3 - 8,
            bf16: rep % 2 == 0,
        };
        let t = Tensor::new(&fill, m * k, k);
        let dx = DevHp::new(&ctx, &t, 0);
        let stream = &streams[rep as usize % 2];
        let p = CastParams::new(Fp8Format::E4M3Fn, rep % 3 == 0);
        tensorwise_vs_cpu(
            &ctx,
            &p,
            m * k,
            &t,
            &dx,
            0,
            Some(stream),
            "tensorwise reuse",
        )
        .unwrap();
        for scaling in [Scaling::Rowwise, Scaling::Tensorwise] {
            // An empty tensor first on the same stream: it writes the empty tensor's scales,
            // runs no amax pass and queues no memset (the workspace was only read); the call
            // after it must find the workspace zero.
            let empty = Tensor::new(&fill, 0, k);
            let de = DevHp::new(&ctx, &empty, 0);
            let w = format!("cast_transpose m=0 {scaling:?} rep={rep}");
            cast_transpose_vs_cpu(&ctx, &p, scaling, 0, k, &empty, &de, 0, Some(stream), &w)
                .unwrap();
            let w = format!("cast_transpose reuse {scaling:?} rep={rep}");
            cast_transpose_vs_cpu(&ctx, &p, scaling, m, k, &t, &dx, 0, Some(stream), &w).unwrap();
        }
    }
}

/// Tensors larger than the L2 (64-80 MB; every other test here is a few MB): the amax pass and
/// the cast pass no longer share a cache-resident input, and many blocks race on the amax
/// atomics. (Written for the one-read kernels of branch `oneread`, where this size also forces
/// their re-read path; kept for the two-kernel path.)
#[test]
fn large_tensors_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("large_tensors_gpu_eq_cpu") else {
        return;
    };
    // bf16 80 MB / f32 64 MB; one odd column count so the last strip and row are partial
    for (rep, (m, k, bf)) in [(6144usize, 6656usize, true), (4099, 3903, false)]
        .into_iter()
        .enumerate()
    {
        let fill = Fill {
            seed: 40 + rep as u64,
            special_pct: 0,
            zero_row_pct: 2,
            mag_exp: 3,
            bf16: bf,
        };
        let t = Tensor::new(&fill, m * k, k);
        let dx = DevHp::new(&ctx, &t, 0);
        let p = CastParams::new(Fp8Format::E4M3Fn, rep == 1);
        let w = format!("tensorwise large n={}", m * k);
        tensorwise_vs_cpu(&ctx, &p, m * k, &t, &dx, 0, None, &w).unwrap();
        for scaling in [Scaling::Rowwise, Scaling::Tensorwise] {
            let w = format!("cast_transpose large {scaling:?} m={m} k={k}");
            cast_transpose_vs_cpu(&ctx, &p, scaling, m, k, &t, &dx, 0, None, &w).unwrap();
        }
    }
}

// ------------------------------------------------------------------------------ blockwise

#[test]
fn blockwise_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("blockwise_gpu_eq_cpu") else {
        return;
    };
    let c = Context::cpu();
    let mut r = runner(96);
    r.run(
        &((big_dim(), dim(700), any::<bool>()), params(3)),
        |((m, k, big), (fmt, pow2, fill, skew))| {
            let p = CastParams::new(fmt, pow2);
            let t = Tensor::new(&fill, m * k, k);
            let s = skew as usize;
            let dx = DevHp::new(&ctx, &t, s);
            let ns = if big {
                m.div_ceil(128) * k.div_ceil(128)
            } else {
                m * k.div_ceil(128)
            };
            let mut o = Out::new(&ctx, m * k, SENT_U8, s);
            let mut sc = Out::new(&ctx, ns, SENT_F32, 0);
            if big {
                c.blockwise_128x128(&p, m, k, t.hp(), o.cpu(), sc.cpu(), StreamRef::DEFAULT)
                    .unwrap();
                ctx.blockwise_128x128(&p, m, k, dx.hp(), o.gpu(), sc.gpu(), StreamRef::DEFAULT)
                    .unwrap();
            } else {
                c.blockwise_1x128(&p, m, k, t.hp(), o.cpu(), sc.cpu(), StreamRef::DEFAULT)
                    .unwrap();
                ctx.blockwise_1x128(&p, m, k, dx.hp(), o.gpu(), sc.gpu(), StreamRef::DEFAULT)
                    .unwrap();
            }
            let w = format!(
                "blockwise 128x128={big} m={m} k={k} {fmt} pow2={pow2} skew={s} fill={fill:?}"
            );
            check_u8(&w, &o)?;
            check_f32(&format!("{w} scales"), &sc)
        },
    )
    .unwrap();
}

// ------------------------------------------------------------------------------ MXFP8

#[test]
fn mxfp8_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("mxfp8_gpu_eq_cpu") else {
        return;
    };
    let c = Context::cpu();
    let mut r = runner(128);
    r.run(
        &((big_dim(), dim(300), any::<bool>()), mx_params()),
        |((m, k, d1), (p, fill, skew))| {
            let t = Tensor::new(&fill, m * k, k);
            let s = skew as usize;
            let dx = DevHp::new(&ctx, &t, s);
            let ns = if d1 {
                k * m.div_ceil(32)
            } else {
                m * k.div_ceil(32)
            };
            let mut o = Out::new(&ctx, m * k, SENT_U8, s);
            let mut sc = Out::new(&ctx, ns, SENT_U8, 0);
            if d1 {
                c.mxfp8_dim1(&p, m, k, t.hp(), o.cpu(), sc.cpu(), StreamRef::DEFAULT)
                    .unwrap();
                ctx.mxfp8_dim1(&p, m, k, dx.hp(), o.gpu(), sc.gpu(), StreamRef::DEFAULT)
                    .unwrap();
            } else {
                c.mxfp8_dim0(&p, m, k, t.hp(), o.cpu(), sc.cpu(), StreamRef::DEFAULT)
                    .unwrap();
                ctx.mxfp8_dim0(&p, m, k, dx.hp(), o.gpu(), sc.gpu(), StreamRef::DEFAULT)
                    .unwrap();
            }
            let w = format!("mxfp8 dim1={d1} m={m} k={k} {p:?} skew={s} fill={fill:?}");
            check_u8(&w, &o)?;
            check_u8(&format!("{w} scales"), &sc)
        },
    )
    .unwrap();
}

// ------------------------------------------------------------------------------ padded

#[test]
fn rowwise_2d_padded_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("rowwise_2d_padded_gpu_eq_cpu") else {
        return;
    };
    let c = Context::cpu();
    let mut r = runner(96);
    let shapes = (
        big_dim(),
        prop_oneof![3 => dim(300), 1 => 2000usize..9000],
        0usize..40,
        any::<u64>(),
    );
    r.run(
        &(shapes, params(3)),
        |((m, k, g, oseed), (fmt, pow2, fill, skew))| {
            let p = CastParams::new(fmt, pow2);
            let t = Tensor::new(&fill, m * k, k);
            let offs = offsets(oseed, g, m);
            let m_cap = m + 15 * g + (oseed % 5) as usize;
            let s = skew as usize;
            let dx = DevHp::new(&ctx, &t, s);
            let doffs = DeviceBuffer::from_host(&ctx, &offs).unwrap();
            let mut o = Out::new(&ctx, m_cap * k, SENT_U8, s);
            let mut sc = Out::new(&ctx, m_cap, SENT_F32, 0);
            let mut po = Out::new(&ctx, g, -7i32, 0);
            c.rowwise_2d_padded(
                &p,
                m,
                k,
                m_cap,
                t.hp(),
                (&offs).into(),
                o.cpu(),
                sc.cpu(),
                po.cpu(),
                StreamRef::DEFAULT,
            )
            .unwrap();
            ctx.rowwise_2d_padded(
                &p,
                m,
                k,
                m_cap,
                dx.hp(),
                doffs.src(),
                o.gpu(),
                sc.gpu(),
                po.gpu(),
                StreamRef::DEFAULT,
            )
            .unwrap();
            let w = format!("padded m={m} k={k} offs={offs:?} {fmt} pow2={pow2} skew={s}");
            check_u8(&w, &o)?;
            check_f32(&format!("{w} scales"), &sc)?;
            check(&format!("{w} padded_offs"), &po, |a, b| a == b)
        },
    )
    .unwrap();
}

/// Device offsets that break the contract are clamped, never read out of bounds: the result
/// equals the CPU's on the clamped offsets.
#[test]
fn padded_bad_offsets_are_clamped() {
    let Some(ctx) = gpu_for_tests("padded_bad_offsets_are_clamped") else {
        return;
    };
    let c = Context::cpu();
    let (m, k) = (200usize, 40usize);
    let bad = vec![50, 20, -5, 400, 130, 1000];
    let mut clamped = Vec::new();
    let mut prev = 0i32;
    for &o in &bad {
        let v = o.max(prev).min(m as i32).max(0);
        clamped.push(v);
        prev = v;
    }
    let fill = Fill {
        seed: 9,
        special_pct: 0,
        zero_row_pct: 0,
        mag_exp: 0,
        bf16: true,
    };
    let t = Tensor::new(&fill, m * k, k);
    let dx = DevHp::new(&ctx, &t, 0);
    let dbad = DeviceBuffer::from_host(&ctx, &bad).unwrap();
    let g = bad.len();
    let m_cap = m + 15 * g;
    let p = CastParams::new(Fp8Format::E4M3Fn, true);
    let mut o = Out::new(&ctx, m_cap * k, SENT_U8, 0);
    let mut sc = Out::new(&ctx, m_cap, SENT_F32, 0);
    let mut po = Out::new(&ctx, g, -7i32, 0);
    c.rowwise_2d_padded(
        &p,
        m,
        k,
        m_cap,
        t.hp(),
        (&clamped).into(),
        o.cpu(),
        sc.cpu(),
        po.cpu(),
        StreamRef::DEFAULT,
    )
    .unwrap();
    ctx.rowwise_2d_padded(
        &p,
        m,
        k,
        m_cap,
        dx.hp(),
        dbad.src(),
        o.gpu(),
        sc.gpu(),
        po.gpu(),
        StreamRef::DEFAULT,
    )
    .unwrap();
    check_u8("padded, bad offsets", &o).unwrap();
    check_f32("padded, bad offsets scales", &sc).unwrap();
    check("padded, bad offsets padded_offs", &po, |a, b| a == b).unwrap();
}

// ------------------------------------------------------------------------------ timings

/// Median of `reps` timed runs of `f` on `st` (after 3 warm-up runs), in microseconds.
fn time_us(ctx: &Context, st: &Stream, reps: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    st.synchronize().unwrap();
    let (a, b) = (Event::new(ctx).unwrap(), Event::new(ctx).unwrap());
    let mut ts: Vec<f64> = (0..reps)
        .map(|_| {
            a.record(st).unwrap();
            f();
            b.record(st).unwrap();
            b.synchronize().unwrap();
            a.elapsed_ms(&b).unwrap() as f64 * 1000.0
        })
        .collect();
    ts.sort_by(|x, y| x.partial_cmp(y).unwrap());
    ts[reps / 2]
}

/// HIPFP8_K2_BENCH=1: timing table (bf16 in, e4m3fn out, pow2 scales) of this file's ops on the
/// Llama3-8B (8192,4096), (8192,14336) and DeepSeek (32768,7168) shapes; % of the
/// device-to-device copy bandwidth (read + write bytes) measured in the same process.
#[test]
fn gpu_timings_kernels2() {
    if std::env::var("HIPFP8_K2_BENCH").map_or(true, |v| v != "1") {
        println!("HIPFP8_SKIP gpu_timings_kernels2: set HIPFP8_K2_BENCH=1 to run the timing table");
        return;
    }
    let Some(ctx) = gpu_for_tests("gpu_timings_kernels2") else {
        return;
    };
    let st = Stream::new_non_blocking(&ctx).unwrap();
    let copy_bytes = 1usize << 31;
    let src = DeviceBuffer::<u8>::zeroed(&ctx, copy_bytes).unwrap();
    let mut dst = DeviceBuffer::<u8>::zeroed(&ctx, copy_bytes).unwrap();
    let copy_us = time_us(&ctx, &st, 10, || dst.copy_from_async(&src, &st).unwrap());
    let copy_gbs = 2.0 * copy_bytes as f64 / copy_us / 1e3;
    drop((src, dst));
    println!("copy 2 GiB D2D: {copy_us:.1} us = {copy_gbs:.0} GB/s (read + write)");
    println!("| op | shape | time us | GB/s (min bytes) | % of copy |");
    println!("|---|---|---|---|---|");
    let p = CastParams::new(Fp8Format::E4M3Fn, true);
    for &(m, k) in &[(8192usize, 4096usize), (8192, 14336), (32768, 7168)] {
        let fill = Fill {
            seed: 1,
            special_pct: 0,
            zero_row_pct: 0,
            mag_exp: 0,
            bf16: true,
        };
        let host: Vec<bf16> = Tensor::new(&fill, m * k, k).b.unwrap();
        let x = DeviceBuffer::from_host(&ctx, &host).unwrap();
        let mk = m * k;
        let g = 32usize;
        let m_cap = m + 15 * g;
        let mut out = DeviceBuffer::<u8>::zeroed(&ctx, m_cap * k).unwrap();
        let mut out_t = DeviceBuffer::<u8>::zeroed(&ctx, mk).unwrap();
        let mut sc =
            DeviceBuffer::<f32>::zeroed(&ctx, m_cap.max(k).max(m * k.div_ceil(128))).unwrap();
        let mut sct = DeviceBuffer::<f32>::zeroed(&ctx, k).unwrap();
        let mut am = DeviceBuffer::<f32>::zeroed(&ctx, 1).unwrap();
        let mut e8 = DeviceBuffer::<u8>::zeroed(&ctx, mk / 32 + m + k).unwrap();
        let offs: Vec<i32> = (1..=g).map(|i| (i * m / g) as i32).collect();
        let doffs = DeviceBuffer::from_host(&ctx, &offs).unwrap();
        let mut po = DeviceBuffer::<i32>::zeroed(&ctx, g).unwrap();
        let h = st.handle();
        let row = |name: &str, bytes: usize, us: f64| {
            let gbs = bytes as f64 / us / 1e3;
            println!(
                "| {name} | ({m}, {k}) | {us:.1} | {gbs:.0} | {:.0}% |",
                100.0 * gbs / copy_gbs
            );
        };
        let xs = || HpSrc::Bf16(x.src());
        let t = time_us(&ctx, &st, 20, || {
            ctx.tensorwise(&p, mk, xs(), out.dst(), sc.dst(), am.dst(), h)
                .unwrap();
        });
        row("tensorwise", 3 * mk + 8, t);
        for (name, sca) in [
            ("cast_transpose tensorwise", Scaling::Tensorwise),
            ("cast_transpose rowwise", Scaling::Rowwise),
        ] {
            let ns = if sca == Scaling::Rowwise {
                4 * (m + k)
            } else {
                8
            };
            let t = time_us(&ctx, &st, 20, || {
                ctx.cast_transpose(
                    &p,
                    sca,
                    m,
                    k,
                    xs(),
                    out.dst(),
                    out_t.dst(),
                    sc.dst(),
                    sct.dst(),
                    h,
                )
                .unwrap();
            });
            row(name, 4 * mk + ns, t);
        }
        let t = time_us(&ctx, &st, 20, || {
            ctx.blockwise_1x128(&p, m, k, xs(), out.dst(), sc.dst(), h)
                .unwrap()
        });
        row("blockwise_1x128", 3 * mk + 4 * m * k.div_ceil(128), t);
        let t = time_us(&ctx, &st, 20, || {
            ctx.blockwise_128x128(&p, m, k, xs(), out.dst(), sc.dst(), h)
                .unwrap()
        });
        row("blockwise_128x128", 3 * mk, t);
        for (name, d1, rnd) in [
            ("mxfp8_dim0 floor", false, MxRounding::Floor),
            ("mxfp8_dim0 rceil", false, MxRounding::Rceil),
            ("mxfp8_dim1 floor", true, MxRounding::Floor),
        ] {
            let mp = MxParams::new(Fp8Format::E4M3Fn, rnd);
            let t = time_us(&ctx, &st, 20, || {
                if d1 {
                    ctx.mxfp8_dim1(&mp, m, k, xs(), out.dst(), e8.dst(), h)
                        .unwrap();
                } else {
                    ctx.mxfp8_dim0(&mp, m, k, xs(), out.dst(), e8.dst(), h)
                        .unwrap();
                }
            });
            row(name, 3 * mk + mk / 32, t);
        }
        let t = time_us(&ctx, &st, 20, || {
            ctx.rowwise_2d_padded(
                &p,
                m,
                k,
                m_cap,
                xs(),
                doffs.src(),
                out.dst(),
                sc.dst(),
                po.dst(),
                h,
            )
            .unwrap();
        });
        row("rowwise_2d_padded (32 groups)", 3 * mk + 4 * m, t);
        let t = time_us(&ctx, &st, 20, || {
            ctx.rowwise_2d(&p, m, k, xs(), out.dst(), sc.dst(), h)
                .unwrap()
        });
        row("rowwise_2d (kernels', reference point)", 3 * mk + 4 * m, t);
    }
}
