//! GPU fused MoE casts (hip/moe) == CPU reference (src/reference/moe.rs), bit for bit; the
//! reference equals the composition of today's casts (tests/moe_reference.rs).
//!
//! Every test starts with `gpu_for_tests`: without a GPU build or device it prints
//! `HIPFP8_SKIP ...` and returns (HIPFP8_REQUIRE_GPU=1 makes that a failure); with a GPU every
//! comparison must hold. All four formats, pow2 on/off, bf16 and f32 inputs with special
//! values, odd shapes, offsets on the device only, balanced / Zipf / ragged (empty, one-row) /
//! one-row splits, forward and dequant scale outputs; outputs start as a sentinel on both
//! backends and are compared whole (an element written by one backend only is caught). Every case runs twice on the GPU: the
//! workspace must come back zeroed.

mod common;
mod moe_support;

use common::gpu::{DevHp, Out, check_f32, check_u8, params, runner, selftest};
use common::{Fill, SENT_F32, SENT_U8, Tensor, dim};
use hipfp8::device::{DeviceBuffer, Stream, gpu_for_tests};
use hipfp8::moe::DualOut;
use hipfp8::{Context, MoeCastParams, ScaleOutput, StreamRef, bf16};
use moe_support::{SPLITS, Split, scale_output, split_offsets};
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

/// Half `h` (0, 1) along n of the (e, k, n) weight `v`: each expert's `half` = k*n/2 elements.
fn half_of<T: Copy>(v: &[T], e: usize, half: usize, h: usize) -> Vec<T> {
    (0..e)
        .flat_map(|x| v[(2 * x + h) * half..][..half].iter().copied())
        .collect()
}

/// The two halves along n of the (e, k, n) weight `t`.
fn halves(t: &Tensor, e: usize, half: usize) -> [Tensor; 2] {
    [0, 1].map(|h| Tensor {
        vals: half_of(&t.vals, e, half, h),
        b: t.b.as_ref().map(|b| half_of(b, e, half, h)),
    })
}

/// The weights' dual cast on the GPU (of `t` whole, or with `split` of its two halves through
/// moe_weights_dual_halves) against the CPU reference of the whole weight.
fn weights_case(
    ctx: &Context,
    p: &MoeCastParams,
    (e, k, n): (usize, usize, usize),
    fill: &Fill,
    skew: usize,
    split: bool,
) -> Result<(), TestCaseError> {
    let t = Tensor::new(fill, e * k * n, k);
    let dx = DevHp::new(ctx, &t, skew);
    let parts = halves(&t, e, k * n / 2).map(|h| DevHp::new(ctx, &h, skew));
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
        let (out, sc, out_t, sc_t, d) = (o.gpu(), s.gpu(), ot.gpu(), st.gpu(), StreamRef::DEFAULT);
        if split {
            let [a, b] = &parts;
            ctx.moe_weights_dual_halves(p, e, k, n, a.hp(), b.hp(), out, sc, out_t, sc_t, d)
        } else {
            ctx.moe_weights_dual(p, e, k, n, dx.hp(), out, sc, out_t, sc_t, d)
        }
        .unwrap();
        let w = format!(
            "moe_weights_dual e={e} k={k} n={n} {:?} skew={skew} halves={split} rep={rep}",
            p
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
        &(shapes, params(4), scale_output()),
        |((e, k, n), (fmt, pow2, fill, skew), so)| {
            let p = MoeCastParams::new(fmt, pow2).with_scales(so);
            weights_case(&ctx, &p, (e, k, n), &fill, skew as usize, false)
        },
    )
    .unwrap();
}

/// The halves op (the experts' W13 as w1 and w3): two sources, every half size (odd halves put
/// a source boundary inside a 16-row unit), more experts than one launch's group chunk.
#[test]
fn moe_weights_dual_halves_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("moe_weights_dual_halves_gpu_eq_cpu") else {
        return;
    };
    let mut r = runner(64);
    let shapes = (
        prop_oneof![4 => 0usize..5, 1 => Just(2100usize)],
        prop_oneof![3 => dim(200), 1 => 500usize..2100],
        dim(65),
    );
    r.run(
        &(shapes, params(4), scale_output()),
        |((e, k, h), (fmt, pow2, fill, skew), so)| {
            // 2100 experts only with small weights
            let (k, h) = if e > 64 {
                (k.min(24), h.min(9))
            } else {
                (k, h)
            };
            let p = MoeCastParams::new(fmt, pow2).with_scales(so);
            weights_case(&ctx, &p, (e, k, 2 * h), &fill, skew as usize, true)
        },
    )
    .unwrap();
}

fn act_case(
    ctx: &Context,
    p: &MoeCastParams,
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
            p
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
        &(shapes, params(4), scale_output()),
        |((m, k, g, split, seed), (fmt, pow2, fill, skew), so)| {
            let offs = split_offsets(split, seed, g, m);
            act_case(
                &ctx,
                &MoeCastParams::new(fmt, pow2).with_scales(so),
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
    p: &MoeCastParams,
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
            p
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
        &(shapes, params(4), scale_output()),
        |((m, i, g, split, seed), (fmt, pow2, fill, skew), so)| {
            let offs = split_offsets(split, seed, g, m);
            swiglu_case(
                &ctx,
                &MoeCastParams::new(fmt, pow2).with_scales(so),
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

/// The SwiGLU kernels' bf16 rounding (one hardware instruction where port.h gives the target
/// one, the integer rule elsewhere) equals the rule on every f32 bit pattern, NaN and Inf
/// included (on targets without the instruction both are the rule: reported, trivially clean).
#[test]
fn bf16_round_hw_matches_rule_exhaustively() {
    let Some(ctx) = gpu_for_tests("bf16_round_hw_matches_rule_exhaustively") else {
        return;
    };
    let bad = selftest(
        &ctx,
        "bf16 rounding over all f32 bit patterns",
        |m, f, h| {
            // SAFETY: device buffers of the sizes the launcher documents, zeroed; default stream.
            unsafe { hipfp8::sys::hipfp8_bf16_round_selftest_launch(m, f, h, std::ptr::null_mut()) }
        },
    );
    assert_eq!(bad, 0, "the hardware bf16 rounding differs from the rule");
}

/// Shapes of the MoE recipe's size class (many tokens per expert, wide rows, balanced and
/// Zipf routing over 32 experts; 4096 groups past the shared-memory group tables of the other
/// casts; SwiGLU groups of 1024 tokens on average, which take the split column pass), every
/// op, bf16 inputs.
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
        let so = [ScaleOutput::Forward, ScaleOutput::Dequant][j];
        let p = MoeCastParams::new(fmt, j == 1).with_scales(so);
        weights_case(&ctx, &p, (8, 1024, 768), &fill(1), 0, false).unwrap();
        for split in [Split::Balanced, Split::Zipf] {
            let offs = split_offsets(split, 7, 32, 8192);
            act_case(&ctx, &p, 8192, 1024, &offs, &fill(2), 0).unwrap();
            let offs = split_offsets(split, 9, 32, 4096);
            swiglu_case(&ctx, &p, 4096, 768, &offs, &fill(3), 0, false).unwrap();
            swiglu_case(&ctx, &p, 4096, 768, &offs, &fill(4), 0, true).unwrap();
            // 1024-token groups: the split column pass (8 blocks per group)
            let offs = split_offsets(split, 13, 8, 8192);
            swiglu_case(&ctx, &p, 8192, 520, &offs, &fill(6), 0, false).unwrap();
            swiglu_case(&ctx, &p, 8192, 520, &offs, &fill(7), 0, true).unwrap();
        }
        let offs = split_offsets(Split::Ragged, 11, 4096, 6000);
        act_case(&ctx, &p, 6000, 96, &offs, &fill(5), 0).unwrap();
    }
}

/// The device buffers of the captured step: inputs, offsets, and (codes, scales) pairs.
struct Step {
    x: DeviceBuffer<bf16>,
    gu: DeviceBuffer<bf16>,
    dh: DeviceBuffer<bf16>,
    w: DeviceBuffer<bf16>,
    offs: DeviceBuffer<i32>,
    codes: [DeviceBuffer<u8>; 8],
    scales: [DeviceBuffer<f32>; 8],
}

const CAP: (usize, usize, usize, usize) = (300, 96, 48, 5); // m, k, i, groups
const CAP_W: (usize, usize, usize) = (3, 64, 40); // e, k, n

/// Host inputs of the captured step: x, gu, dh, w (bf16) and the offsets.
type StepInputs = (Vec<bf16>, Vec<bf16>, Vec<bf16>, Vec<bf16>, Vec<i32>);

/// The captured step's inputs for `seed`.
fn step_inputs(seed: u64) -> StepInputs {
    let ((m, k, i, g), (e, wk, wn)) = (CAP, CAP_W);
    let t = |s: u64, n: usize, row: usize| {
        let f = Fill {
            seed: seed * 16 + s,
            special_pct: 0,
            zero_row_pct: 5,
            mag_exp: 0,
            bf16: true,
        };
        Tensor::new(&f, n, row).b.unwrap()
    };
    let split = if seed % 2 == 0 {
        Split::Zipf
    } else {
        Split::Ragged
    };
    (
        t(1, m * k, k),
        t(2, m * 2 * i, 2 * i),
        t(3, m * i, i),
        t(4, e * wk * wn, wk),
        split_offsets(split, seed, g, m),
    )
}

/// A device bf16 buffer as an op input.
fn hp(b: &DeviceBuffer<bf16>) -> hipfp8::HpSrc<'_> {
    hipfp8::HpSrc::Bf16(b.src())
}

impl Step {
    fn new(ctx: &Context) -> Step {
        let ((m, k, i, g), (e, wk, wn)) = (CAP, CAP_W);
        let (x, gu, dh, w, offs) = step_inputs(0);
        let up = |v: &[bf16]| DeviceBuffer::from_host(ctx, v).unwrap();
        let codes = [
            m * k,
            m * k,
            m * i,
            m * i,
            m * 2 * i,
            m * 2 * i,
            e * wk * wn,
            e * wk * wn,
        ];
        let scales = [m, g * k, m, g * i, m, g * 2 * i, e * wn, e * wk];
        Step {
            x: up(&x),
            gu: up(&gu),
            dh: up(&dh),
            w: up(&w),
            offs: DeviceBuffer::from_host(ctx, &offs).unwrap(),
            codes: codes.map(|n| DeviceBuffer::alloc(ctx, n).unwrap()),
            scales: scales.map(|n| DeviceBuffer::alloc(ctx, n).unwrap()),
        }
    }
    fn upload(&mut self, seed: u64) {
        let (x, gu, dh, w, offs) = step_inputs(seed);
        self.x.copy_from_host(&x).unwrap();
        self.gu.copy_from_host(&gu).unwrap();
        self.dh.copy_from_host(&dh).unwrap();
        self.w.copy_from_host(&w).unwrap();
        self.offs.copy_from_host(&offs).unwrap();
        for b in &mut self.codes {
            b.fill_bytes(0xA5).unwrap();
        }
    }
    /// The four ops, queued on `s`.
    fn run(&mut self, ctx: &Context, p: &MoeCastParams, s: StreamRef) {
        let ((m, k, i, _), (e, wk, wn)) = (CAP, CAP_W);
        let [c0, c1, c2, c3, c4, c5, c6, c7] = &mut self.codes;
        let [s0, s1, s2, s3, s4, s5, s6, s7] = &mut self.scales;
        let d = DualOut {
            out: c0.dst(),
            scales: s0.dst(),
            out_col: c1.dst(),
            scales_col: s1.dst(),
        };
        ctx.moe_act_dual(p, m, k, hp(&self.x), self.offs.src(), d, s)
            .unwrap();
        let d = DualOut {
            out: c2.dst(),
            scales: s2.dst(),
            out_col: c3.dst(),
            scales_col: s3.dst(),
        };
        ctx.moe_swiglu_quant(p, m, i, hp(&self.gu), self.offs.src(), d, s)
            .unwrap();
        let d = DualOut {
            out: c4.dst(),
            scales: s4.dst(),
            out_col: c5.dst(),
            scales_col: s5.dst(),
        };
        ctx.moe_swiglu_bwd_quant(p, m, i, hp(&self.dh), hp(&self.gu), self.offs.src(), d, s)
            .unwrap();
        ctx.moe_weights_dual(
            p,
            e,
            wk,
            wn,
            hp(&self.w),
            c6.dst(),
            s6.dst(),
            c7.dst(),
            s7.dst(),
            s,
        )
        .unwrap();
    }
    fn snapshot(&self) -> (Vec<Vec<u8>>, Vec<Vec<u32>>) {
        let c = self.codes.iter().map(|b| b.to_vec().unwrap()).collect();
        let s = self
            .scales
            .iter()
            .map(|b| b.to_vec().unwrap().iter().map(|v| v.to_bits()).collect())
            .collect();
        (c, s)
    }
}

/// Every MoE cast captured in one graph on a stream warmed up by one eager pass (the grouped
/// ones take the stream's zeroed workspace, which must not grow while captured), replayed on
/// new inputs and new device offsets, equals the same calls run eagerly, and the act_dual
/// outputs (codes and dequant scales) equal the CPU reference.
#[test]
fn moe_casts_captured_and_replayed() {
    let Some(ctx) = gpu_for_tests("moe_casts_captured_and_replayed") else {
        return;
    };
    let p = MoeCastParams::new(hipfp8::Fp8Format::E4M3Fn, true).with_scales(ScaleOutput::Dequant);
    let mut st = Step::new(&ctx);
    let cap = Stream::new_non_blocking(&ctx).unwrap();
    st.run(&ctx, &p, cap.handle());
    cap.synchronize().unwrap();
    cap.begin_capture().unwrap();
    st.run(&ctx, &p, cap.handle());
    let graph = cap.end_capture().unwrap();
    let eager = Stream::new_non_blocking(&ctx).unwrap();
    for seed in [1u64, 2] {
        st.upload(seed);
        graph.launch(&cap).unwrap();
        cap.synchronize().unwrap();
        let replayed = st.snapshot();
        st.upload(seed);
        st.run(&ctx, &p, eager.handle());
        eager.synchronize().unwrap();
        assert!(
            replayed == st.snapshot(),
            "seed {seed}: graph replay != eager calls"
        );
        let (m, k, g) = (CAP.0, CAP.1, CAP.3);
        let (x, _, _, _, offs) = step_inputs(seed);
        let c = Context::cpu();
        let mut d = Dual::new(&ctx, m, k, g, 0);
        c.moe_act_dual(
            &p,
            m,
            k,
            (&x).into(),
            (&offs).into(),
            d.cpu(),
            StreamRef::DEFAULT,
        )
        .unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert!(
            replayed.0[0] == d.o.host[..m * k] && replayed.0[1] == d.oc.host[..m * k],
            "seed {seed}: replay != CPU"
        );
        assert!(
            replayed.1[0] == bits(&d.s.host[..m]) && replayed.1[1] == bits(&d.sc.host[..g * k]),
            "seed {seed}: replayed dequant scales != CPU"
        );
    }
}
