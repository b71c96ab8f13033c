//! GPU fused MoE casts (hip/moe) == CPU reference (src/reference/moe.rs), bit for bit; the
//! reference equals the composition of today's casts (tests/moe_reference.rs).
//!
//! Every test starts with `gpu_for_tests`: without a GPU build or device it prints
//! `HIPFP8_SKIP ...` and returns (HIPFP8_REQUIRE_GPU=1 makes that a failure); with a GPU every
//! comparison must hold. All four formats, pow2 on/off, bf16 and f32 inputs with special
//! values, odd shapes, offsets on the device only, balanced / Zipf / ragged (empty, one-row) /
//! one-row splits; outputs start as a sentinel on both backends and are compared whole (an
//! element written by one backend only is caught). Every case runs twice on the GPU: the
//! workspace must come back zeroed.

mod common;
mod moe_support;

use common::gpu::{DevHp, Out, check_f32, check_u8, params, runner};
use common::{Fill, SENT_F32, SENT_U8, Tensor, dim};
use hipfp8::device::{DeviceBuffer, gpu_for_tests};
use hipfp8::moe::DualOut;
use hipfp8::{CastParams, Context, StreamRef};
use moe_support::{SPLITS, Split, split_offsets};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// The four outputs of a dual cast of an (m, k) operand in g groups, on both backends.
struct Dual {
    o: Out<u8>,
    s: Out<f32>,
    oc: Out<u8>,
    sc: Out<f32>,
}

impl Dual {
    fn new(ctx: &Context, m: usize, k: usize, g: usize, skew: usize) -> Dual {
        Dual {
            o: Out::new(ctx, m * k, SENT_U8, skew),
            s: Out::new(ctx, m, SENT_F32, 0),
            oc: Out::new(ctx, m * k, SENT_U8, 0),
            sc: Out::new(ctx, g * k, SENT_F32, 0),
        }
    }
    fn cpu(&mut self) -> DualOut<'_> {
        DualOut {
            out: self.o.cpu(),
            scales: self.s.cpu(),
            out_col: self.oc.cpu(),
            scales_col: self.sc.cpu(),
        }
    }
    fn gpu(&mut self) -> DualOut<'_> {
        DualOut {
            out: self.o.gpu(),
            scales: self.s.gpu(),
            out_col: self.oc.gpu(),
            scales_col: self.sc.gpu(),
        }
    }
    fn check(&self, what: &str) -> Result<(), TestCaseError> {
        check_u8(&format!("{what} rowwise"), &self.o)?;
        check_f32(&format!("{what} row scales"), &self.s)?;
        check_u8(&format!("{what} colwise"), &self.oc)?;
        check_f32(&format!("{what} column scales"), &self.sc)
    }
}

fn dev_offsets(ctx: &Context, offs: &[i32]) -> DeviceBuffer<i32> {
    DeviceBuffer::from_host(ctx, offs).unwrap_or_else(|_| DeviceBuffer::alloc(ctx, 0).unwrap())
}

fn split_strategy() -> impl Strategy<Value = Split> {
    prop::sample::select(SPLITS.to_vec())
}

fn weights_case(
    ctx: &Context,
    p: &CastParams,
    e: usize,
    k: usize,
    n: usize,
    fill: &Fill,
    skew: usize,
) -> Result<(), TestCaseError> {
    let t = Tensor::new(fill, e * k * n, k);
    let dx = DevHp::new(ctx, &t, skew);
    let ekn = e * k * n;
    let mut o = Out::new(ctx, ekn, SENT_U8, skew);
    let mut s = Out::new(ctx, e * n, SENT_F32, 0);
    let mut ot = Out::new(ctx, ekn, SENT_U8, 0);
    let mut st = Out::new(ctx, e * k, SENT_F32, 0);
    Context::cpu()
        .moe_weights_dual(
            p,
            e,
            k,
            n,
            t.hp(),
            o.cpu(),
            s.cpu(),
            ot.cpu(),
            st.cpu(),
            StreamRef::DEFAULT,
        )
        .unwrap();
    for rep in 0..2 {
        ctx.moe_weights_dual(
            p,
            e,
            k,
            n,
            dx.hp(),
            o.gpu(),
            s.gpu(),
            ot.gpu(),
            st.gpu(),
            StreamRef::DEFAULT,
        )
        .unwrap();
        let w = format!(
            "moe_weights_dual e={e} k={k} n={n} {:?} skew={skew} rep={rep}",
            p.format
        );
        check_u8(&format!("{w} out"), &o)?;
        check_f32(&format!("{w} scales"), &s)?;
        check_u8(&format!("{w} out_t"), &ot)?;
        check_f32(&format!("{w} scales_t"), &st)?;
    }
    Ok(())
}

#[test]
fn moe_weights_dual_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("moe_weights_dual_gpu_eq_cpu") else {
        return;
    };
    let mut r = runner(96);
    let shapes = (
        0usize..5,
        prop_oneof![3 => dim(200), 1 => 500usize..2100],
        dim(130),
    );
    r.run(
        &(shapes, params(4)),
        |((e, k, n), (fmt, pow2, fill, skew))| {
            weights_case(
                &ctx,
                &CastParams::new(fmt, pow2),
                e,
                k,
                n,
                &fill,
                skew as usize,
            )
        },
    )
    .unwrap();
}

fn act_case(
    ctx: &Context,
    p: &CastParams,
    m: usize,
    k: usize,
    offs: &[i32],
    fill: &Fill,
    skew: usize,
) -> Result<(), TestCaseError> {
    let g = offs.len();
    let t = Tensor::new(fill, m * k, k);
    let dx = DevHp::new(ctx, &t, skew);
    let doffs = dev_offsets(ctx, offs);
    let mut d = Dual::new(ctx, m, k, g, skew);
    Context::cpu()
        .moe_act_dual(p, m, k, t.hp(), offs.into(), d.cpu(), StreamRef::DEFAULT)
        .unwrap();
    for rep in 0..2 {
        ctx.moe_act_dual(p, m, k, dx.hp(), doffs.src(), d.gpu(), StreamRef::DEFAULT)
            .unwrap();
        d.check(&format!(
            "moe_act_dual m={m} k={k} offs={offs:?} {:?} skew={skew} rep={rep}",
            p.format
        ))?;
    }
    Ok(())
}

#[test]
fn moe_act_dual_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("moe_act_dual_gpu_eq_cpu") else {
        return;
    };
    let mut r = runner(128);
    let shapes = (
        prop_oneof![1 => Just(0usize), 3 => dim(400), 1 => 1000usize..6000],
        prop_oneof![3 => dim(100), 1 => Just(64usize), 1 => 200usize..700],
        0usize..40,
        split_strategy(),
        any::<u64>(),
    );
    r.run(
        &(shapes, params(4)),
        |((m, k, g, split, seed), (fmt, pow2, fill, skew))| {
            let offs = split_offsets(split, seed, g, m);
            act_case(
                &ctx,
                &CastParams::new(fmt, pow2),
                m,
                k,
                &offs,
                &fill,
                skew as usize,
            )
        },
    )
    .unwrap();
}

#[allow(clippy::too_many_arguments)]
fn swiglu_case(
    ctx: &Context,
    p: &CastParams,
    m: usize,
    i: usize,
    offs: &[i32],
    fill: &Fill,
    skew: usize,
    bwd: bool,
) -> Result<(), TestCaseError> {
    let g = offs.len();
    let t = Tensor::new(fill, m * 2 * i, 2 * i);
    let dh = Tensor::new(
        &Fill {
            seed: fill.seed ^ 0x77,
            ..*fill
        },
        m * i,
        i,
    );
    let (dgu, ddh) = (DevHp::new(ctx, &t, skew), DevHp::new(ctx, &dh, 0));
    let doffs = dev_offsets(ctx, offs);
    let w = if bwd { 2 * i } else { i };
    let mut d = Dual::new(ctx, m, w, g, skew);
    let c = Context::cpu();
    let st = StreamRef::DEFAULT;
    if bwd {
        c.moe_swiglu_bwd_quant(p, m, i, dh.hp(), t.hp(), offs.into(), d.cpu(), st)
            .unwrap();
    } else {
        c.moe_swiglu_quant(p, m, i, t.hp(), offs.into(), d.cpu(), st)
            .unwrap();
    }
    for rep in 0..2 {
        if bwd {
            ctx.moe_swiglu_bwd_quant(p, m, i, ddh.hp(), dgu.hp(), doffs.src(), d.gpu(), st)
                .unwrap();
        } else {
            ctx.moe_swiglu_quant(p, m, i, dgu.hp(), doffs.src(), d.gpu(), st)
                .unwrap();
        }
        let op = if bwd {
            "moe_swiglu_bwd_quant"
        } else {
            "moe_swiglu_quant"
        };
        d.check(&format!(
            "{op} m={m} i={i} offs={offs:?} {:?} skew={skew} rep={rep}",
            p.format
        ))?;
    }
    Ok(())
}

fn swiglu_gpu_eq_cpu(name: &str, bwd: bool) {
    let Some(ctx) = gpu_for_tests(name) else {
        return;
    };
    let mut r = runner(96);
    let shapes = (
        prop_oneof![1 => Just(0usize), 3 => dim(300), 1 => 1000usize..4000],
        prop_oneof![3 => dim(80), 1 => 100usize..400],
        0usize..24,
        split_strategy(),
        any::<u64>(),
    );
    r.run(
        &(shapes, params(4)),
        |((m, i, g, split, seed), (fmt, pow2, fill, skew))| {
            let offs = split_offsets(split, seed, g, m);
            swiglu_case(
                &ctx,
                &CastParams::new(fmt, pow2),
                m,
                i,
                &offs,
                &fill,
                skew as usize,
                bwd,
            )
        },
    )
    .unwrap();
}

#[test]
fn moe_swiglu_quant_gpu_eq_cpu() {
    swiglu_gpu_eq_cpu("moe_swiglu_quant_gpu_eq_cpu", false);
}

#[test]
fn moe_swiglu_bwd_quant_gpu_eq_cpu() {
    swiglu_gpu_eq_cpu("moe_swiglu_bwd_quant_gpu_eq_cpu", true);
}

/// Shapes of the MoE recipe's size class (many tokens per expert, wide rows, balanced and
/// Zipf routing over 32 experts; 4096 groups past the shared-memory group tables of the other
/// casts), every op, bf16 inputs.
#[test]
fn moe_casts_large_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("moe_casts_large_gpu_eq_cpu") else {
        return;
    };
    let fill = |seed| Fill {
        seed,
        special_pct: 0,
        zero_row_pct: 1,
        mag_exp: 0,
        bf16: true,
    };
    let fmts = [hipfp8::Fp8Format::E4M3Fn, hipfp8::Fp8Format::E4M3FnUz];
    for (j, fmt) in fmts.into_iter().enumerate() {
        let p = CastParams::new(fmt, j == 1);
        weights_case(&ctx, &p, 8, 1024, 768, &fill(1), 0).unwrap();
        for split in [Split::Balanced, Split::Zipf] {
            let offs = split_offsets(split, 7, 32, 8192);
            act_case(&ctx, &p, 8192, 1024, &offs, &fill(2), 0).unwrap();
            let offs = split_offsets(split, 9, 32, 4096);
            swiglu_case(&ctx, &p, 4096, 768, &offs, &fill(3), 0, false).unwrap();
            swiglu_case(&ctx, &p, 4096, 768, &offs, &fill(4), 0, true).unwrap();
        }
        let offs = split_offsets(Split::Ragged, 11, 4096, 6000);
        act_case(&ctx, &p, 6000, 96, &offs, &fill(5), 0).unwrap();
    }
}
