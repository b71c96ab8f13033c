//! GPU MoE routing ops (hip/route) == CPU reference (src/reference/route.rs), bit for bit; the
//! reference equals its definition (tests/route_cpu.rs).
//!
//! Every test starts with `gpu_for_tests`: without a GPU build or device it prints
//! `HIPFP8_SKIP ...` and returns (HIPFP8_REQUIRE_GPU=1 makes that a failure); with a GPU every
//! comparison must hold. All four formats, pow2 on/off, bf16 and f32 inputs with special
//! values, balanced / Zipf / ragged (empty, one-row, unrouted tail) / one-row splits, every
//! alignment, padded layouts larger than needed, permutation and offsets on the device only;
//! outputs start as a sentinel on both backends and are compared whole. Every dispatch runs
//! twice on the GPU: the workspace must come back zeroed.

mod common;
mod moe_support;
mod route_support;

use common::gpu::{DevHp, Out, check, check_f32, check_u8, params, runner};
use common::{Fill, SENT_F32, SENT_U8, Tensor};
use hipfp8::device::{DeviceBuffer, gpu_for_tests};
use hipfp8::{Context, MoeCastParams, NoParams, ScaleOutput, StreamRef, bf16};
use moe_support::SPLITS;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use route_support::Route;

const ST: StreamRef = StreamRef::DEFAULT;

fn dev_i32(ctx: &Context, v: &[i32]) -> DeviceBuffer<i32> {
    DeviceBuffer::from_host(ctx, v).unwrap_or_else(|_| DeviceBuffer::alloc(ctx, 0).unwrap())
}

fn dev_f32(ctx: &Context, v: &[f32]) -> DeviceBuffer<f32> {
    DeviceBuffer::from_host(ctx, v).unwrap_or_else(|_| DeviceBuffer::alloc(ctx, 0).unwrap())
}

/// The six outputs of a dispatch on both backends.
struct Outs {
    pad: Out<i32>,
    rows: Out<i32>,
    o: Out<u8>,
    s: Out<f32>,
    oc: Out<u8>,
    sc: Out<f32>,
}

impl Outs {
    fn new(ctx: &Context, rt: &Route, skew: usize) -> Outs {
        let (mc, k) = (rt.m_cap, rt.k);
        Outs {
            pad: Out::new(ctx, rt.g, -7, 0),
            rows: Out::new(ctx, rt.m(), -7, 0),
            o: Out::new(ctx, mc * k, SENT_U8, skew),
            s: Out::new(ctx, mc, SENT_F32, 0),
            oc: Out::new(ctx, mc * k, SENT_U8, 0),
            sc: Out::new(ctx, rt.g * k, SENT_F32, 0),
        }
    }
    /// The views the CPU run (`gpu` false) or the GPU run writes.
    fn views(&mut self, gpu: bool) -> route_support::Views<'_> {
        macro_rules! side {
            ($o:expr) => {
                if gpu { $o.gpu() } else { $o.cpu() }
            };
        }
        route_support::Views {
            offs_pad: side!(self.pad),
            slot_row: side!(self.rows),
            out: side!(self.o),
            scales: side!(self.s),
            out_col: side!(self.oc),
            scales_col: side!(self.sc),
        }
    }
    fn check(&self, what: &str) -> Result<(), TestCaseError> {
        check(&format!("{what} offs_pad"), &self.pad, |a, b| a == b)?;
        check(&format!("{what} slot_row"), &self.rows, |a, b| a == b)?;
        check_u8(&format!("{what} rowwise"), &self.o)?;
        check_f32(&format!("{what} row scales"), &self.s)?;
        check_u8(&format!("{what} colwise"), &self.oc)?;
        check_f32(&format!("{what} column scales"), &self.sc)
    }
}

/// One dispatch (weighted: the combine's backward) on the CPU and twice on the GPU.
fn dispatch_case(
    ctx: &Context,
    p: &MoeCastParams,
    rt: &Route,
    fill: &Fill,
    weighted: bool,
    skew: usize,
) -> Result<(), TestCaseError> {
    let x = Tensor::new(fill, rt.t * rt.k, rt.k);
    let dx = DevHp::new(ctx, &x, skew);
    let w = rt.weights(fill.seed);
    let (dperm, doffs, dw) = (
        dev_i32(ctx, &rt.perm),
        dev_i32(ctx, &rt.offs),
        dev_f32(ctx, &w),
    );
    let mut o = Outs::new(ctx, rt, skew);
    let s = rt.dispatch_shape();
    let cpu_in = (x.hp(), weighted.then(|| (&w).into()));
    let idx = ((&rt.perm).into(), (&rt.offs).into());
    route_support::dispatch(&Context::cpu(), p, s, cpu_in, idx, o.views(false)).unwrap();
    for rep in 0..2 {
        let gpu_in = (dx.hp(), weighted.then(|| dw.src()));
        let idx = (dperm.src(), doffs.src());
        route_support::dispatch(ctx, p, s, gpu_in, idx, o.views(true)).unwrap();
        o.check(&format!(
            "dispatch weighted={weighted} {rt:?} {:?} pow2={} {:?} skew={skew} rep={rep}",
            p.format, p.pow2_scales, p.scales
        ))?;
    }
    Ok(())
}

#[test]
fn moe_dispatch_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("moe_dispatch_gpu_eq_cpu") else {
        return;
    };
    let mut r = runner(160);
    let shapes = (
        prop_oneof![1 => Just(0usize), 3 => 1usize..200, 1 => 500usize..1500],
        prop_oneof![3 => 1usize..100, 1 => Just(256usize), 1 => 300usize..800],
        1usize..9,
        prop_oneof![3 => 0usize..40, 1 => 200usize..300],
        prop::sample::select(SPLITS.to_vec()),
        prop::sample::select(vec![1usize, 16, 32, 128, 5]),
        prop::sample::select(vec![0usize, 0, 7]),
        (any::<bool>(), any::<bool>()),
    );
    r.run(
        &(shapes, params(4)),
        |((t, k, topk, g, split, align, extra, (weighted, dq)), (fmt, pow2, fill, skew))| {
            let rt = Route::new(fill.seed, (t, k, topk, g), split, align, extra);
            let so = if dq {
                ScaleOutput::Dequant
            } else {
                ScaleOutput::Forward
            };
            let p = MoeCastParams::new(fmt, pow2).with_scales(so);
            dispatch_case(&ctx, &p, &rt, &fill, weighted, skew as usize)
        },
    )
    .unwrap();
}

/// The combine and the score gradient of one routing, GPU == CPU.
fn combine_case(ctx: &Context, rt: &Route, fill: &Fill) -> Result<(), TestCaseError> {
    let (_, mut rows) = rt.layout();
    // A few slots not routed (row -1) and, on the GPU only, rows past the layout are skipped:
    // the CPU refuses them, so they are not in the compared calls.
    for s in (0..rows.len()).step_by(7) {
        rows[s] = -1;
    }
    let y = Tensor::new(fill, rt.m_cap * rt.k, rt.k.max(1));
    let dout = Tensor::new(
        &Fill {
            seed: fill.seed ^ 5,
            ..*fill
        },
        rt.t * rt.k,
        rt.k.max(1),
    );
    let w = rt.weights(fill.seed);
    let (dy, ddout) = (DevHp::new(ctx, &y, 0), DevHp::new(ctx, &dout, 0));
    let (drows, dw) = (dev_i32(ctx, &rows), dev_f32(ctx, &w));
    let s = rt.combine_shape();
    let mut out = Out::new(ctx, rt.t * rt.k, bf16::from_f32(-3.0), 0);
    let mut ds = Out::new(ctx, rt.m(), SENT_F32, 0);
    let cpu = Context::cpu();
    cpu.moe_combine(
        &NoParams,
        s,
        y.hp(),
        (&rows).into(),
        (&w).into(),
        out.cpu(),
        ST,
    )
    .unwrap();
    cpu.moe_combine_bwd_scores(
        &NoParams,
        s,
        dout.hp(),
        y.hp(),
        (&rows).into(),
        ds.cpu(),
        ST,
    )
    .unwrap();
    ctx.moe_combine(&NoParams, s, dy.hp(), drows.src(), dw.src(), out.gpu(), ST)
        .unwrap();
    ctx.moe_combine_bwd_scores(&NoParams, s, ddout.hp(), dy.hp(), drows.src(), ds.gpu(), ST)
        .unwrap();
    let what = format!("{rt:?} bf16={}", fill.bf16);
    check(&format!("combine {what}"), &out, |a, b| {
        a.to_bits() == b.to_bits()
    })?;
    check_f32(&format!("combine_bwd_scores {what}"), &ds)
}

#[test]
fn moe_combine_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("moe_combine_gpu_eq_cpu") else {
        return;
    };
    let mut r = runner(96);
    let shapes = (
        prop_oneof![1 => Just(0usize), 3 => 1usize..200, 1 => 500usize..1200],
        prop_oneof![1 => Just(0usize), 3 => 1usize..100, 1 => 700usize..1100],
        1usize..9,
        0usize..40,
        prop::sample::select(SPLITS.to_vec()),
        prop::sample::select(vec![1usize, 16, 128]),
    );
    r.run(
        &(shapes, params(1)),
        |((t, k, topk, g, split, align), (_, _, fill, _))| {
            let rt = Route::new(fill.seed, (t, k.max(1), topk, g), split, align, 3);
            combine_case(&ctx, &Route { k, ..rt }, &fill)
        },
    )
    .unwrap();
}

#[test]
fn moe_route_on_a_deepseek_layer_shape() {
    // One layer of the benchmark's shape (4096 tokens, top-8 of 32 experts, hidden 7168),
    // Zipf routing, padded to 16: the dispatch, its weighted backward, the combine.
    let Some(ctx) = gpu_for_tests("moe_route_on_a_deepseek_layer_shape") else {
        return;
    };
    let rt = Route::new(42, (4096, 7168, 8, 32), SPLITS[1], 16, 0);
    let p = MoeCastParams::new(hipfp8::Fp8Format::E4M3Fn, true);
    let f = route_support::fill(42, true);
    dispatch_case(&ctx, &p, &rt, &f, false, 0).unwrap();
    let p = p.with_scales(ScaleOutput::Dequant);
    dispatch_case(&ctx, &p, &rt, &f, true, 0).unwrap();
    combine_case(&ctx, &rt, &f).unwrap();
}
