//! GPU quantization kernels == CPU reference, bit for bit.
//!
//! Every test starts with `gpu_for_tests`: without a GPU build or device it prints
//! `HIPFP8_SKIP ...` and returns (HIPFP8_REQUIRE_GPU=1 turns that into a failure); with a GPU,
//! every comparison must hold. Inputs come from the shared generator (special values, zero
//! rows, wide magnitude spread); shapes are odd, 1-sized, tile +- 1 and a few large ones that
//! take the multi-block paths (groups spread over many blocks, rows longer than a block's
//! registers); offsets include empty, one-row and skewed groups. Outputs are pre-filled with a
//! sentinel on both backends and compared whole, so an element written by one backend and not
//! the other is caught too. Some views start one element into their buffer, which sends the
//! kernels down their unaligned path.

mod common;

use common::gpu::{
    DevHp, Out, cast_transpose_vs_cpu, check_f32, check_u8, params, runner, selftest,
    tensorwise_vs_cpu,
};
use common::{Fill, SENT_F32, SENT_U8, Tensor, dim, given_scale_strategy, offsets, skewed_offsets};
use hipfp8::device::{DeviceBuffer, gpu_for_tests};
use hipfp8::{CastParams, Context, Fp8Format, StreamRef};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

// ------------------------------------------------------------------------------ helpers

fn cpu() -> Context {
    Context::cpu()
}

// ------------------------------------------------------------------------------ codec

/// Every finite f32 through the hardware conversion path vs the software rule (on targets
/// without hardware conversion both are the same code: reported, trivially clean).
#[test]
fn codec_hw_matches_rule_exhaustively() {
    let Some(ctx) = gpu_for_tests("codec_hw_matches_rule_exhaustively") else {
        return;
    };
    for fmt in Fp8Format::ALL {
        let what = format!("codec {fmt} over all finite f32");
        let bad = selftest(&ctx, &what, |m, f, h| {
            // SAFETY: device buffers of the sizes the launcher documents, zeroed; default stream.
            unsafe {
                hipfp8::sys::hipfp8_codec_selftest_launch(fmt as i32, m, f, h, std::ptr::null_mut())
            }
        });
        assert_eq!(bad, 0, "{fmt}: hardware conversion differs from the rule");
    }
}

// ------------------------------------------------------------------------------ rowwise family

#[test]
fn rowwise_2d_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("rowwise_2d_gpu_eq_cpu") else {
        return;
    };
    let c = cpu();
    let mut r = runner(96);
    let shapes = (dim(300), prop_oneof![3 => dim(300), 1 => 1000usize..20000]);
    r.run(&(shapes, params(4)), |((m, k), (fmt, pow2, fill, skew))| {
        let p = CastParams::new(fmt, pow2);
        let t = Tensor::new(&fill, m * k, k);
        let s = skew as usize;
        let dx = DevHp::new(&ctx, &t, s);
        let mut o = Out::new(&ctx, m * k, SENT_U8, s);
        let mut sc = Out::new(&ctx, m, SENT_F32, 0);
        c.rowwise_2d(&p, m, k, t.hp(), o.cpu(), sc.cpu(), StreamRef::DEFAULT)
            .unwrap();
        ctx.rowwise_2d(&p, m, k, dx.hp(), o.gpu(), sc.gpu(), StreamRef::DEFAULT)
            .unwrap();
        check_u8(
            &format!("rowwise_2d m={m} k={k} {fmt} pow2={pow2} skew={s}"),
            &o,
        )?;
        check_f32("rowwise_2d scales", &sc)
    })
    .unwrap();
}

#[test]
fn colwise_3d_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("colwise_3d_gpu_eq_cpu") else {
        return;
    };
    let c = cpu();
    let mut r = runner(48);
    r.run(
        &((1usize..5, dim(160), dim(160)), params(4)),
        |((e, k, n), (fmt, pow2, fill, _))| {
            let p = CastParams::new(fmt, pow2);
            let t = Tensor::new(&fill, e * k * n, k);
            let dx = DevHp::new(&ctx, &t, 0);
            let mut o = Out::new(&ctx, e * k * n, SENT_U8, 0);
            let mut sc = Out::new(&ctx, e * n, SENT_F32, 0);
            c.colwise_3d(&p, e, k, n, t.hp(), o.cpu(), sc.cpu(), StreamRef::DEFAULT)
                .unwrap();
            ctx.colwise_3d(&p, e, k, n, dx.hp(), o.gpu(), sc.gpu(), StreamRef::DEFAULT)
                .unwrap();
            check_u8(&format!("colwise_3d e={e} k={k} n={n} {fmt}"), &o)?;
            check_f32("colwise_3d scales", &sc)
        },
    )
    .unwrap();
}

/// per_group_rowwise of `t` (m, k) over END offsets `offs` on the GPU (offsets device-resident,
/// input and output `skew` elements into their buffers) against the CPU: bytes and scales.
#[allow(clippy::too_many_arguments)]
fn per_group_rowwise_vs_cpu(
    ctx: &Context,
    p: &CastParams,
    m: usize,
    k: usize,
    t: &Tensor,
    offs: &[i32],
    skew: usize,
    what: &str,
) -> Result<(), TestCaseError> {
    let g = offs.len();
    let dx = DevHp::new(ctx, t, skew);
    let doffs =
        DeviceBuffer::from_host(ctx, offs).unwrap_or_else(|_| DeviceBuffer::alloc(ctx, 0).unwrap());
    let mut o = Out::new(ctx, m * k, SENT_U8, skew);
    let mut sc = Out::new(ctx, g * m, SENT_F32, 0);
    cpu()
        .per_group_rowwise(
            p,
            m,
            k,
            t.hp(),
            offs.into(),
            o.cpu(),
            sc.cpu(),
            StreamRef::DEFAULT,
        )
        .unwrap();
    ctx.per_group_rowwise(
        p,
        m,
        k,
        dx.hp(),
        doffs.src(),
        o.gpu(),
        sc.gpu(),
        StreamRef::DEFAULT,
    )
    .unwrap();
    check_u8(what, &o)?;
    check_f32(&format!("{what} scales"), &sc)
}

#[test]
fn per_group_rowwise_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("per_group_rowwise_gpu_eq_cpu") else {
        return;
    };
    let mut r = runner(96);
    let shapes = (
        dim(200),
        prop_oneof![3 => dim(400), 1 => 2000usize..12000],
        0usize..40,
        any::<u64>(),
        any::<bool>(),
    );
    r.run(
        &(shapes, params(4)),
        |((m, k, g, oseed, skewed), (fmt, pow2, fill, skew))| {
            let p = CastParams::new(fmt, pow2);
            let t = Tensor::new(&fill, m * k, k);
            let offs = if skewed {
                skewed_offsets(oseed, g, k)
            } else {
                offsets(oseed, g, k)
            };
            let s = skew as usize;
            per_group_rowwise_vs_cpu(
                &ctx,
                &p,
                m,
                k,
                &t,
                &offs,
                s,
                &format!("per_group_rowwise m={m} k={k} offs={offs:?} {fmt} skew={s}"),
            )
        },
    )
    .unwrap();
}

/// per_group_rowwise on shapes the test above does not reach: many more rows than resident
/// blocks (each block walks several rows, rotating its shared amax buffers), rows longer than a
/// block's registers (the re-read tail), and group ends on 16-column boundaries (wavefronts
/// spanning a group end without any vector straddling it: the segmented reduction alone).
#[test]
fn per_group_rowwise_many_and_long_rows_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("per_group_rowwise_many_and_long_rows_gpu_eq_cpu") else {
        return;
    };
    let mut r = runner(12);
    let shapes = prop_oneof![
        // many rows, short to medium rows (the 128- and 256-thread variants, several rows per block)
        2 => (2000usize..=4500, 1usize..=700),
        // a few rows per block of the 512-thread variant (bf16: whole row in registers)
        1 => (270usize..=500, 16385usize..=33000),
        // rows longer than the registers hold
        1 => (1usize..=300, 32769usize..=40000),
    ];
    r.run(
        &(shapes, 0usize..40, any::<u64>(), 0u8..3, params(4)),
        |((m, k), g, oseed, kind, (fmt, pow2, fill, skew))| {
            let p = CastParams::new(fmt, pow2);
            let t = Tensor::new(&fill, m * k, k);
            let offs = match kind {
                0 => offsets(oseed, g, k),
                1 => skewed_offsets(oseed, g, k),
                _ => skewed_offsets(oseed, g, k)
                    .into_iter()
                    .map(|o| o / 16 * 16)
                    .collect(),
            };
            let s = skew as usize;
            per_group_rowwise_vs_cpu(
                &ctx,
                &p,
                m,
                k,
                &t,
                &offs,
                s,
                &format!(
                    "per_group_rowwise m={m} k={k} g={g} kind={kind} {fmt} skew={s} offs={offs:?}"
                ),
            )
        },
    )
    .unwrap();
}

// ------------------------------------------------------------------------------ column family

#[test]
fn per_group_colwise_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("per_group_colwise_gpu_eq_cpu") else {
        return;
    };
    let c = cpu();
    let mut r = runner(96);
    let shapes = (
        prop_oneof![3 => dim(400), 1 => 1000usize..6000],
        prop_oneof![3 => dim(100), 1 => Just(8usize), 1 => Just(64usize)],
        0usize..12,
        any::<u64>(),
        any::<bool>(),
    );
    r.run(
        &(shapes, params(4)),
        |((m, k, g, oseed, skewed), (fmt, pow2, fill, skew))| {
            let p = CastParams::new(fmt, pow2);
            let t = Tensor::new(&fill, m * k, k);
            let offs = if skewed {
                skewed_offsets(oseed, g, m)
            } else {
                offsets(oseed, g, m)
            };
            let s = skew as usize;
            let dx = DevHp::new(&ctx, &t, s);
            let doffs = DeviceBuffer::from_host(&ctx, &offs).unwrap();
            let mut o = Out::new(&ctx, m * k, SENT_U8, 0);
            let mut sc = Out::new(&ctx, g * k, SENT_F32, 0);
            c.per_group_colwise(
                &p,
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
                &p,
                m,
                k,
                dx.hp(),
                doffs.src(),
                o.gpu(),
                sc.gpu(),
                StreamRef::DEFAULT,
            )
            .unwrap();
            check_u8(
                &format!("per_group_colwise m={m} k={k} offs={offs:?} {fmt} skew={s}"),
                &o,
            )?;
            check_f32(&format!("per_group_colwise scales offs={offs:?}"), &sc)
        },
    )
    .unwrap();
}

/// Big skewed groups: slabs spread over many blocks that exchange amax through the workspace,
/// run twice (the workspace must come back zeroed), balanced and Zipf-like, M % 16 != 0 too.
#[test]
fn per_group_colwise_big_groups() {
    let Some(ctx) = gpu_for_tests("per_group_colwise_big_groups") else {
        return;
    };
    let c = cpu();
    for (case, &(m, k, g, skewed)) in [
        (20000usize, 96usize, 8usize, true),
        (16384, 256, 16, false),
        (9999, 72, 5, true),
        (4096, 40, 1, false),
    ]
    .iter()
    .enumerate()
    {
        let fill = Fill {
            seed: 7 + case as u64,
            special_pct: 0,
            zero_row_pct: 0,
            mag_exp: 2,
            bf16: case % 2 == 0,
        };
        let t = Tensor::new(&fill, m * k, k);
        let offs = if skewed {
            skewed_offsets(case as u64, g, m)
        } else {
            (1..=g).map(|i| (i * m / g) as i32).collect()
        };
        let dx = DevHp::new(&ctx, &t, 0);
        let doffs = DeviceBuffer::from_host(&ctx, &offs).unwrap();
        for rep in 0..2 {
            let p = CastParams::new(Fp8Format::E4M3Fn, rep == 1);
            let mut o = Out::new(&ctx, m * k, SENT_U8, 0);
            let mut sc = Out::new(&ctx, g * k, SENT_F32, 0);
            c.per_group_colwise(
                &p,
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
                &p,
                m,
                k,
                dx.hp(),
                doffs.src(),
                o.gpu(),
                sc.gpu(),
                StreamRef::DEFAULT,
            )
            .unwrap();
            check_u8(
                &format!("big per_group_colwise m={m} k={k} offs={offs:?} rep={rep}"),
                &o,
            )
            .unwrap();
            check_f32("big per_group_colwise scales", &sc).unwrap();
        }
    }
}

#[test]
fn per_group_colwise_dual_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("per_group_colwise_dual_gpu_eq_cpu") else {
        return;
    };
    let c = cpu();
    let mut r = runner(48);
    let shapes = (
        prop_oneof![3 => dim(300), 1 => 1000usize..5000],
        dim(80),
        dim(80),
        0usize..10,
        any::<u64>(),
    );
    r.run(
        &(shapes, params(4)),
        |((m, k1, k2, g, oseed), (fmt, pow2, fill, _))| {
            let p = CastParams::new(fmt, pow2);
            let t1 = Tensor::new(&fill, m * k1, k1);
            let t2 = Tensor::new(
                &Fill {
                    seed: fill.seed ^ 99,
                    ..fill
                },
                m * k2,
                k2,
            );
            let offs = if oseed % 2 == 0 {
                skewed_offsets(oseed, g, m)
            } else {
                offsets(oseed, g, m)
            };
            let (d1, d2) = (DevHp::new(&ctx, &t1, 0), DevHp::new(&ctx, &t2, 0));
            let doffs = DeviceBuffer::from_host(&ctx, &offs).unwrap();
            let mut o1 = Out::new(&ctx, m * k1, SENT_U8, 0);
            let mut s1 = Out::new(&ctx, g * k1, SENT_F32, 0);
            let mut o2 = Out::new(&ctx, m * k2, SENT_U8, 0);
            let mut s2 = Out::new(&ctx, g * k2, SENT_F32, 0);
            c.per_group_colwise_dual(
                &p,
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
                &p,
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
            .unwrap();
            let w = format!("dual m={m} k1={k1} k2={k2} offs={offs:?} {fmt}");
            check_u8(&w, &o1)?;
            check_f32(&w, &s1)?;
            check_u8(&w, &o2)?;
            check_f32(&w, &s2)
        },
    )
    .unwrap();
}

#[test]
fn rowwise_3d_transpose_rhs_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("rowwise_3d_transpose_rhs_gpu_eq_cpu") else {
        return;
    };
    let c = cpu();
    let mut r = runner(48);
    let shapes = (
        1usize..5,
        dim(100),
        prop_oneof![3 => dim(200), 1 => 1000usize..3000],
    );
    r.run(
        &(shapes, params(4)),
        |((e, k, n), (fmt, pow2, fill, skew))| {
            let p = CastParams::new(fmt, pow2);
            let t = Tensor::new(&fill, e * k * n, k);
            let s = skew as usize;
            let dx = DevHp::new(&ctx, &t, s);
            let mut o = Out::new(&ctx, e * k * n, SENT_U8, 0);
            let mut sc = Out::new(&ctx, e * k, SENT_F32, 0);
            c.rowwise_3d_transpose_rhs(&p, e, k, n, t.hp(), o.cpu(), sc.cpu(), StreamRef::DEFAULT)
                .unwrap();
            ctx.rowwise_3d_transpose_rhs(
                &p,
                e,
                k,
                n,
                dx.hp(),
                o.gpu(),
                sc.gpu(),
                StreamRef::DEFAULT,
            )
            .unwrap();
            check_u8(
                &format!("rowwise_3d_transpose_rhs e={e} k={k} n={n} {fmt} skew={s}"),
                &o,
            )?;
            check_f32("rowwise_3d_transpose_rhs scales", &sc)
        },
    )
    .unwrap();
}

/// Offsets that break the contract (decreasing, negative, past the extent) never fault on the
/// GPU: the kernels clamp them (o[g] = min(max(o[g], o[g-1]), extent)), so the result equals
/// the CPU result on the clamped offsets.
#[test]
fn bad_device_offsets_are_clamped() {
    let Some(ctx) = gpu_for_tests("bad_device_offsets_are_clamped") else {
        return;
    };
    let c = cpu();
    let (m, k) = (300usize, 48usize);
    let bad = vec![50, 20, -5, 400, 260, 1000];
    let mut clamped = Vec::new();
    let mut prev = 0i32;
    for &o in &bad {
        let v = o.max(prev).min(m as i32).max(0);
        clamped.push(v);
        prev = v;
    }
    let fill = Fill {
        seed: 3,
        special_pct: 0,
        zero_row_pct: 0,
        mag_exp: 0,
        bf16: true,
    };
    let t = Tensor::new(&fill, m * k, k);
    let dx = DevHp::new(&ctx, &t, 0);
    let dbad = DeviceBuffer::from_host(&ctx, &bad).unwrap();
    let g = bad.len();
    let p = CastParams::new(Fp8Format::E4M3Fn, true);
    let mut o = Out::new(&ctx, m * k, SENT_U8, 0);
    let mut sc = Out::new(&ctx, g * k, SENT_F32, 0);
    c.per_group_colwise(
        &p,
        m,
        k,
        t.hp(),
        (&clamped).into(),
        o.cpu(),
        sc.cpu(),
        StreamRef::DEFAULT,
    )
    .unwrap();
    ctx.per_group_colwise(
        &p,
        m,
        k,
        dx.hp(),
        dbad.src(),
        o.gpu(),
        sc.gpu(),
        StreamRef::DEFAULT,
    )
    .unwrap();
    check_u8("colwise, bad offsets", &o).unwrap();
    check_f32("colwise, bad offsets", &sc).unwrap();
    // rowwise: offsets along k
    let badk = vec![10, 5, 70, 30];
    let mut clampedk = Vec::new();
    let mut prev = 0i32;
    for &o in &badk {
        let v = o.max(prev).min(k as i32).max(0);
        clampedk.push(v);
        prev = v;
    }
    let dbadk = DeviceBuffer::from_host(&ctx, &badk).unwrap();
    let mut o = Out::new(&ctx, m * k, SENT_U8, 0);
    let mut sc = Out::new(&ctx, badk.len() * m, SENT_F32, 0);
    c.per_group_rowwise(
        &p,
        m,
        k,
        t.hp(),
        (&clampedk).into(),
        o.cpu(),
        sc.cpu(),
        StreamRef::DEFAULT,
    )
    .unwrap();
    ctx.per_group_rowwise(
        &p,
        m,
        k,
        dx.hp(),
        dbadk.src(),
        o.gpu(),
        sc.gpu(),
        StreamRef::DEFAULT,
    )
    .unwrap();
    check_u8("rowwise, bad offsets", &o).unwrap();
    check_f32("rowwise, bad offsets", &sc).unwrap();
}

// ------------------------------------------------------------------------------ the rest

#[test]
fn tensorwise_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("tensorwise_gpu_eq_cpu") else {
        return;
    };
    let mut r = runner(64);
    let shapes = prop_oneof![3 => 0usize..3000, 1 => 100_000usize..400_000];
    r.run(&(shapes, params(4)), |(n, (fmt, pow2, fill, skew))| {
        let p = CastParams::new(fmt, pow2);
        let t = Tensor::new(&fill, n, 64);
        let s = skew as usize;
        let dx = DevHp::new(&ctx, &t, s);
        let w = format!("tensorwise n={n} {fmt} pow2={pow2} skew={s}");
        tensorwise_vs_cpu(&ctx, &p, n, &t, &dx, s, None, &w)
    })
    .unwrap();
}

#[test]
fn cast_transpose_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("cast_transpose_gpu_eq_cpu") else {
        return;
    };
    let mut r = runner(64);
    let shapes = (
        prop_oneof![3 => 0usize..300, 1 => 1000usize..3000],
        dim(300),
        any::<bool>(),
    );
    r.run(
        &(shapes, params(4)),
        |((m, k, rowwise), (fmt, pow2, fill, skew))| {
            let p = CastParams::new(fmt, pow2);
            let scaling = if rowwise {
                hipfp8::Scaling::Rowwise
            } else {
                hipfp8::Scaling::Tensorwise
            };
            let t = Tensor::new(&fill, m * k, k);
            let s = skew as usize;
            let dx = DevHp::new(&ctx, &t, s);
            let w = format!("cast_transpose {scaling:?} m={m} k={k} {fmt} pow2={pow2} skew={s}");
            cast_transpose_vs_cpu(&ctx, &p, scaling, m, k, &t, &dx, s, None, &w)
        },
    )
    .unwrap();
    // the workspace comes back zeroed: a second call on the same context gives the same result
    let fill = Fill {
        seed: 11,
        special_pct: 0,
        zero_row_pct: 0,
        mag_exp: 3,
        bf16: true,
    };
    let (m, k) = (777usize, 300usize);
    let t = Tensor::new(&fill, m * k, k);
    let dx = DevHp::new(&ctx, &t, 0);
    let p = CastParams::new(Fp8Format::E4M3Fn, false);
    for rep in 0..2 {
        let w = format!("cast_transpose repeat {rep}");
        cast_transpose_vs_cpu(
            &ctx,
            &p,
            hipfp8::Scaling::Rowwise,
            m,
            k,
            &t,
            &dx,
            0,
            None,
            &w,
        )
        .unwrap();
    }
}

/// The given-scale (delayed scaling) casts: both layouts and the amax, for scales from
/// all-underflow through saturation plus NaN / Inf / negative / zero scales, and a second
/// call on the same amax buffer (it is zeroed by each call, not accumulated).
#[test]
fn scaled_casts_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("scaled_casts_gpu_eq_cpu") else {
        return;
    };
    let c = cpu();
    let mut r = runner(64);
    let shapes = (
        prop_oneof![3 => 0usize..300, 1 => 1000usize..3000],
        dim(300),
    );
    r.run(
        &(shapes, params(4), given_scale_strategy()),
        |((m, k), (fmt, _, fill, skew), scale)| {
            let p = CastParams::new(fmt, false);
            let t = Tensor::new(&fill, m * k, k);
            let s = skew as usize;
            let dx = DevHp::new(&ctx, &t, s);
            let hs = vec![scale];
            let ds = DeviceBuffer::from_host(&ctx, &hs).unwrap();
            let w = format!("scaled m={m} k={k} {fmt} scale={scale:e} skew={s}");
            let mut o = Out::new(&ctx, m * k, SENT_U8, s);
            let mut ot = Out::new(&ctx, m * k, SENT_U8, 0);
            let mut am = Out::new(&ctx, 1, SENT_F32, 0);
            c.cast_transpose_scaled(
                &p,
                m,
                k,
                t.hp(),
                (&hs).into(),
                o.cpu(),
                ot.cpu(),
                am.cpu(),
                StreamRef::DEFAULT,
            )
            .unwrap();
            for rep in 0..2 {
                ctx.cast_transpose_scaled(
                    &p,
                    m,
                    k,
                    dx.hp(),
                    ds.src(),
                    o.gpu(),
                    ot.gpu(),
                    am.gpu(),
                    StreamRef::DEFAULT,
                )
                .unwrap();
                check_u8(&format!("cast_transpose_{w} out (call {rep})"), &o)?;
                check_u8(&format!("cast_transpose_{w} out_t (call {rep})"), &ot)?;
                check_f32(&format!("cast_transpose_{w} amax (call {rep})"), &am)?;
            }
            let n = m * k;
            let mut o = Out::new(&ctx, n, SENT_U8, s);
            let mut am = Out::new(&ctx, 1, SENT_F32, 0);
            c.tensorwise_scaled(
                &p,
                n,
                t.hp(),
                (&hs).into(),
                o.cpu(),
                am.cpu(),
                StreamRef::DEFAULT,
            )
            .unwrap();
            for rep in 0..2 {
                ctx.tensorwise_scaled(
                    &p,
                    n,
                    dx.hp(),
                    ds.src(),
                    o.gpu(),
                    am.gpu(),
                    StreamRef::DEFAULT,
                )
                .unwrap();
                check_u8(&format!("tensorwise_{w} out (call {rep})"), &o)?;
                check_f32(&format!("tensorwise_{w} amax (call {rep})"), &am)?;
            }
            Ok(())
        },
    )
    .unwrap();
}

#[test]
fn blockwise_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("blockwise_gpu_eq_cpu") else {
        return;
    };
    let c = cpu();
    let mut r = runner(64);
    let shapes = (
        prop_oneof![3 => dim(300), 1 => 500usize..1500],
        prop_oneof![3 => dim(400), 1 => 1000usize..3000],
    );
    r.run(&(shapes, params(4)), |((m, k), (fmt, pow2, fill, skew))| {
        let p = CastParams::new(fmt, pow2);
        let t = Tensor::new(&fill, m * k, k);
        let s = skew as usize;
        let dx = DevHp::new(&ctx, &t, s);
        let mut o = Out::new(&ctx, m * k, SENT_U8, s);
        let mut sc = Out::new(&ctx, m * k.div_ceil(128), SENT_F32, 0);
        c.blockwise_1x128(&p, m, k, t.hp(), o.cpu(), sc.cpu(), StreamRef::DEFAULT)
            .unwrap();
        ctx.blockwise_1x128(&p, m, k, dx.hp(), o.gpu(), sc.gpu(), StreamRef::DEFAULT)
            .unwrap();
        let w = format!("blockwise_1x128 m={m} k={k} {fmt} skew={s}");
        check_u8(&w, &o)?;
        check_f32(&w, &sc)?;
        let mut o = Out::new(&ctx, m * k, SENT_U8, s);
        let mut sc = Out::new(&ctx, m.div_ceil(128) * k.div_ceil(128), SENT_F32, 0);
        c.blockwise_128x128(&p, m, k, t.hp(), o.cpu(), sc.cpu(), StreamRef::DEFAULT)
            .unwrap();
        ctx.blockwise_128x128(&p, m, k, dx.hp(), o.gpu(), sc.gpu(), StreamRef::DEFAULT)
            .unwrap();
        let w = format!("blockwise_128x128 m={m} k={k} {fmt} skew={s}");
        check_u8(&w, &o)?;
        check_f32(&w, &sc)
    })
    .unwrap();
}

#[test]
fn mxfp8_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("mxfp8_gpu_eq_cpu") else {
        return;
    };
    let c = cpu();
    let mut r = runner(64);
    let shapes = (prop_oneof![3 => dim(300), 1 => 1000usize..2500], dim(300));
    let mxp = (
        prop_oneof![Just(Fp8Format::E4M3Fn), Just(Fp8Format::E5M2)],
        any::<bool>(),
    );
    r.run(
        &(shapes, mxp, params(4)),
        |((m, k), (fmt, rceil), (_, _, fill, skew))| {
            let mp = hipfp8::MxParams::new(
                fmt,
                if rceil {
                    hipfp8::MxRounding::Rceil
                } else {
                    hipfp8::MxRounding::Floor
                },
            );
            let t = Tensor::new(&fill, m * k, k);
            let s = skew as usize;
            let dx = DevHp::new(&ctx, &t, s);
            let mut o = Out::new(&ctx, m * k, SENT_U8, s);
            let mut sc = Out::new(&ctx, m * k.div_ceil(32), SENT_U8, 0);
            c.mxfp8_dim0(&mp, m, k, t.hp(), o.cpu(), sc.cpu(), StreamRef::DEFAULT)
                .unwrap();
            ctx.mxfp8_dim0(&mp, m, k, dx.hp(), o.gpu(), sc.gpu(), StreamRef::DEFAULT)
                .unwrap();
            let w = format!("mxfp8_dim0 m={m} k={k} {fmt} rceil={rceil} skew={s}");
            check_u8(&w, &o)?;
            check_u8(&(w + " scales"), &sc)?;
            let mut o = Out::new(&ctx, m * k, SENT_U8, 0);
            let mut sc = Out::new(&ctx, k * m.div_ceil(32), SENT_U8, 0);
            c.mxfp8_dim1(&mp, m, k, t.hp(), o.cpu(), sc.cpu(), StreamRef::DEFAULT)
                .unwrap();
            ctx.mxfp8_dim1(&mp, m, k, dx.hp(), o.gpu(), sc.gpu(), StreamRef::DEFAULT)
                .unwrap();
            let w = format!("mxfp8_dim1 m={m} k={k} {fmt} rceil={rceil} skew={s}");
            check_u8(&w, &o)?;
            check_u8(&(w + " scales"), &sc)
        },
    )
    .unwrap();
}

#[test]
fn rowwise_2d_padded_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("rowwise_2d_padded_gpu_eq_cpu") else {
        return;
    };
    let c = cpu();
    let mut r = runner(64);
    let shapes = (
        prop_oneof![3 => dim(300), 1 => 1000usize..3000],
        dim(300),
        0usize..20,
        any::<u64>(),
        any::<bool>(),
    );
    r.run(
        &(shapes, params(4)),
        |((m, k, g, oseed, skewed), (fmt, pow2, fill, skew))| {
            let p = CastParams::new(fmt, pow2);
            let t = Tensor::new(&fill, m * k, k);
            let offs = if skewed {
                skewed_offsets(oseed, g, m)
            } else {
                offsets(oseed, g, m)
            };
            let cap = m + 15 * g + (oseed % 3) as usize;
            let s = skew as usize;
            let dx = DevHp::new(&ctx, &t, s);
            let doffs = DeviceBuffer::from_host(&ctx, &offs).unwrap();
            let mut o = Out::new(&ctx, cap * k, SENT_U8, 0);
            let mut sc = Out::new(&ctx, cap, SENT_F32, 0);
            let mut po = Out::new(&ctx, g, -7i32, 0);
            c.rowwise_2d_padded(
                &p,
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
                &p,
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
            .unwrap();
            let w = format!("rowwise_2d_padded m={m} k={k} offs={offs:?} {fmt} skew={s}");
            check_u8(&w, &o)?;
            check_f32(&w, &sc)?;
            let gp = po.gpu_host();
            if gp != po.host {
                return Err(TestCaseError::fail(format!(
                    "{w}: padded offsets gpu {gp:?} cpu {:?}",
                    po.host
                )));
            }
            Ok(())
        },
    )
    .unwrap();
}

/// per_group_colwise_dual_padded on both backends, compared whole (data including the zero
/// padding and the tail to m_cap, scales, padded offsets). `xs` / `os` start the inputs /
/// outputs that many elements into their buffers (the unaligned paths).
#[allow(clippy::too_many_arguments)]
fn dual_padded_vs_cpu(
    ctx: &Context,
    p: &CastParams,
    (m, k1, k2): (usize, usize, usize),
    m_cap: usize,
    offs: &[i32],
    t1: &Tensor,
    t2: &Tensor,
    (xs, os): (usize, usize),
) -> Result<(), TestCaseError> {
    let c = cpu();
    let g = offs.len();
    let (d1, d2) = (DevHp::new(ctx, t1, xs), DevHp::new(ctx, t2, xs));
    let doffs = DeviceBuffer::from_host(ctx, offs).unwrap();
    let mut o1 = Out::new(ctx, m_cap * k1, SENT_U8, os);
    let mut s1 = Out::new(ctx, g * k1, SENT_F32, 0);
    let mut o2 = Out::new(ctx, m_cap * k2, SENT_U8, os);
    let mut s2 = Out::new(ctx, g * k2, SENT_F32, 0);
    let mut po = Out::new(ctx, g, -7i32, 0);
    c.per_group_colwise_dual_padded(
        p,
        m,
        k1,
        k2,
        m_cap,
        t1.hp(),
        t2.hp(),
        offs.into(),
        o1.cpu(),
        s1.cpu(),
        o2.cpu(),
        s2.cpu(),
        po.cpu(),
        StreamRef::DEFAULT,
    )
    .unwrap();
    ctx.per_group_colwise_dual_padded(
        p,
        m,
        k1,
        k2,
        m_cap,
        d1.hp(),
        d2.hp(),
        doffs.src(),
        o1.gpu(),
        s1.gpu(),
        o2.gpu(),
        s2.gpu(),
        po.gpu(),
        StreamRef::DEFAULT,
    )
    .unwrap();
    let shown = if g > 24 {
        format!("{} groups", g)
    } else {
        format!("{offs:?}")
    };
    let w = format!(
        "dual_padded m={m} k1={k1} k2={k2} m_cap={m_cap} offs={shown} {:?} pow2={} skew=({xs},{os})",
        p.format, p.pow2_scales
    );
    check_u8(&w, &o1)?;
    check_f32(&w, &s1)?;
    check_u8(&w, &o2)?;
    check_f32(&w, &s2)?;
    let gp = po.gpu_host();
    if gp != po.host {
        return Err(TestCaseError::fail(format!(
            "{w}: padded offsets gpu {gp:?} cpu {:?}",
            po.host
        )));
    }
    Ok(())
}

#[test]
fn per_group_colwise_dual_padded_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("per_group_colwise_dual_padded_gpu_eq_cpu") else {
        return;
    };
    let mut r = runner(64);
    let shapes = (
        prop_oneof![3 => dim(300), 1 => 1000usize..5000],
        dim(80),
        dim(80),
        0usize..20,
        any::<u64>(),
        0usize..3,
    );
    r.run(
        &(shapes, params(4)),
        |((m, k1, k2, g, oseed, extra), (fmt, pow2, fill, skew))| {
            let p = CastParams::new(fmt, pow2);
            let t1 = Tensor::new(&fill, m * k1, k1);
            let t2 = Tensor::new(
                &Fill {
                    seed: fill.seed ^ 99,
                    ..fill
                },
                m * k2,
                k2,
            );
            let offs = if oseed % 2 == 0 {
                skewed_offsets(oseed, g, m)
            } else {
                offsets(oseed, g, m)
            };
            let m_cap = (m + 15 * g).next_multiple_of(16) + 16 * extra;
            let s = skew as usize;
            dual_padded_vs_cpu(&ctx, &p, (m, k1, k2), m_cap, &offs, &t1, &t2, (s, s))
        },
    )
    .unwrap();
}

/// END offsets from group sizes.
fn ends(sizes: &[usize]) -> Vec<i32> {
    let mut e = 0usize;
    sizes
        .iter()
        .map(|s| {
            e += s;
            e as i32
        })
        .collect()
}

/// The routing shapes of the wgrad: balanced and Zipf groups (unaligned starts), empty and
/// 1-row groups, G = 1, 17 and 4097 (the chunked launches past 2048 groups), both input
/// dtypes, four formats, pow2 on and off, aligned and unaligned buffers, k that takes the
/// vector and the scalar kernels.
#[test]
fn per_group_colwise_dual_padded_routings_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("per_group_colwise_dual_padded_routings_gpu_eq_cpu") else {
        return;
    };
    let zipf = |g: usize, m: usize| -> Vec<usize> {
        let h: f64 = (1..=g).map(|i| 1.0 / i as f64).sum();
        let mut s: Vec<usize> = (1..=g)
            .map(|i| (m as f64 / (i as f64 * h)) as usize)
            .collect();
        s[0] += m - s.iter().sum::<usize>();
        s
    };
    let mut routings: Vec<(&str, Vec<usize>)> = vec![
        ("G=1", vec![777]),
        ("G=1 aligned", vec![512]),
        ("balanced G=17", vec![61; 17]),
        ("zipf G=17", zipf(17, 3001)),
        ("empty and 1-row", vec![0, 1, 0, 0, 17, 1, 1, 0, 300, 0]),
        ("all empty", vec![0; 5]),
        ("zipf G=4097", zipf(4097, 40000)),
        ("balanced G=4097", vec![3; 4097]),
    ];
    routings.push(("one long group", vec![5, 20000, 3]));
    let mut seed = 1u64;
    for (name, sizes) in &routings {
        let offs = ends(sizes);
        let m: usize = sizes.iter().sum();
        let g = sizes.len();
        let m_cap = (m + 15 * g).next_multiple_of(16);
        for (i, (k1, k2)) in [(64usize, 40usize), (37, 8)].into_iter().enumerate() {
            for bf16 in [true, false] {
                let fmts = [
                    Fp8Format::E4M3Fn,
                    Fp8Format::E5M2,
                    Fp8Format::E4M3FnUz,
                    Fp8Format::E5M2FnUz,
                ];
                let fmt = fmts[(seed as usize + i) % 4];
                let pow2 = seed % 2 == 0;
                seed += 1;
                let fill = Fill {
                    seed,
                    special_pct: if seed % 3 == 0 { 2 } else { 0 },
                    zero_row_pct: 5,
                    mag_exp: 0,
                    bf16,
                };
                let t1 = Tensor::new(&fill, m * k1, k1);
                let t2 = Tensor::new(
                    &Fill {
                        seed: seed ^ 7,
                        ..fill
                    },
                    m * k2,
                    k2,
                );
                let skew = (seed % 2) as usize;
                let p = CastParams::new(fmt, pow2);
                dual_padded_vs_cpu(&ctx, &p, (m, k1, k2), m_cap, &offs, &t1, &t2, (skew, skew))
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
        println!("{name}: GPU == CPU");
    }
}
