//! The MoE recipe (src/recipe.rs) on a GPU:
//! - `scale_reciprocal_gpu_eq_cpu`: the recipe's one kernel, bit for bit, on every class of
//!   f32 (powers of two, random normals, subnormals, 0, Inf, NaN);
//! - `experts_gpu_eq_composed_ops_and_cpu`: forward + backward equal, bit for bit, the same
//!   ops called one by one on the GPU (weights, casts, SwiGLU casts, reciprocals, grouped
//!   GEMMs), and the CPU backend's recipe up to the GEMMs' accumulation order (the GPU's
//!   grouped GEMM sums in another order than the CPU's, and CUTLASS's FP8 tensor-core
//!   accumulation keeps about 14 bits per k = 32 step; tests/gpu_grouped_gemm.rs bounds each
//!   GEMM). Similarity of every output over the written elements (DeepGEMM's metric)
//!   `1 - 2 <a, b> / (<a, a> + <b, b>) <= 1e-3`: a GEMM-order difference gives about 1e-5 (a
//!   changed bf16 ulp of gu or dh moves an FP8 code of h or d now and then); a wrong group,
//!   layout or scale gives 1e-1 or more;
//! - `experts_captured_on_a_fresh_stream`: forward + backward captured into one graph on a
//!   stream that never ran anything (the recipe takes all scratch from the caller's
//!   workspaces), replayed with new data and new offsets, and after a weight refresh,
//!   compared bit for bit with eager calls;
//! - `grouped_linear_gpu_eq_composed_ops`;
//! - `experts_precast_gpu_eq_bf16_calls`: the pre-cast calls from `moe_act_dual`'s operands
//!   (dequant scales) equal the high-precision calls bit for bit on the GPU.
//!
//! Without a GPU build or device each test prints `HIPFP8_SKIP ...` and returns (with
//! HIPFP8_REQUIRE_GPU=1 it fails instead).

mod recipe_support;

use hipfp8::device::{DeviceBuffer, Stream, gpu_for_tests};
use hipfp8::moe::DualOut;
use hipfp8::recipe::{ExpertsShape, Fp8Operand, LinearShape, RecipeParams, WeightCache};
use hipfp8::{
    CastParams, Context, Dst, FormatChoice, Fp8Format, GemmParams, HpSrc, MoeCastParams,
    ScaleOutput, Src, StreamRef, bf16,
};

use recipe_support::values;

fn up<T: hipfp8::runtime::DeviceCopy>(ctx: &Context, v: &[T]) -> DeviceBuffer<T> {
    DeviceBuffer::from_host(ctx, v).unwrap()
}

fn zeros<T: hipfp8::runtime::DeviceCopy>(ctx: &Context, n: usize) -> DeviceBuffer<T> {
    DeviceBuffer::zeroed(ctx, n).unwrap()
}

fn hp(b: &DeviceBuffer<bf16>) -> HpSrc<'_> {
    HpSrc::Bf16(b.src())
}

/// Memsets and copies without a stream go to the legacy default stream, which non-blocking
/// streams do not wait for: finish them before queuing work that reads the memory.
fn sync_legacy() {
    Stream::default_stream().synchronize().unwrap();
}

fn params() -> RecipeParams {
    RecipeParams {
        format: FormatChoice::Exact(Fp8Format::E4M3Fn),
        grad_format: FormatChoice::Exact(Fp8Format::E4M3Fn),
        ..RecipeParams::default()
    }
}

const S: ExpertsShape = ExpertsShape {
    m: 512,
    d: 256,
    i: 128,
    e: 4,
};
const OFFS_A: [i32; 4] = [128, 256, 384, 512];
/// An empty group, unaligned starts, rows past the end.
const OFFS_B: [i32; 4] = [100, 100, 333, 497];

#[test]
fn scale_reciprocal_gpu_eq_cpu() {
    let Some(ctx) = gpu_for_tests("scale_reciprocal_gpu_eq_cpu") else {
        return;
    };
    let mut x: Vec<f32> = (-130..=127).map(|e| 2f32.powi(e)).collect();
    x.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1e-40,
        -3e-39,
        f32::MAX,
    ]);
    x.extend(values(4096, 3, 1e3).iter().map(|v| v.to_f32() * 1.000_123));
    let n = x.len();
    let mut cpu = vec![0f32; n];
    Context::cpu()
        .scale_reciprocal(n, (&x).into(), (&mut cpu).into(), StreamRef::DEFAULT)
        .unwrap();
    let (dx, mut dout) = (up(&ctx, &x), zeros::<f32>(&ctx, n));
    let s = Stream::new(&ctx).unwrap();
    ctx.scale_reciprocal(n, dx.src(), dout.dst(), s.handle())
        .unwrap();
    s.synchronize().unwrap();
    let gpu = dout.to_vec().unwrap();
    for j in 0..n {
        assert_eq!(
            gpu[j].to_bits(),
            cpu[j].to_bits(),
            "1/{:e}: gpu {:e} cpu {:e}",
            x[j],
            gpu[j],
            cpu[j]
        );
    }
    println!("HIPFP8_GPU_CHECK scale_reciprocal {n} values gpu == cpu");
}

/// The experts step's inputs and outputs on one context.
struct Step {
    x: DeviceBuffer<bf16>,
    w13: DeviceBuffer<bf16>,
    w2: DeviceBuffer<bf16>,
    dy: DeviceBuffer<bf16>,
    offs: DeviceBuffer<i32>,
    saved: DeviceBuffer<u8>,
    fws: DeviceBuffer<u8>,
    bws: DeviceBuffer<u8>,
    y: DeviceBuffer<bf16>,
    dx: DeviceBuffer<bf16>,
    dw13: DeviceBuffer<bf16>,
    dw2: DeviceBuffer<bf16>,
}

struct Host {
    x: Vec<bf16>,
    w13: Vec<bf16>,
    w2: Vec<bf16>,
    dy: Vec<bf16>,
}

fn host_inputs(seed: u64) -> Host {
    let (m, d, i, e) = (S.m, S.d, S.i, S.e);
    Host {
        x: values(m * d, seed, 2.0),
        w13: values(e * 2 * i * d, seed + 1, 0.1),
        w2: values(e * d * i, seed + 2, 0.1),
        dy: values(m * d, seed + 3, 0.05),
    }
}

impl Step {
    fn new(ctx: &Context, p: &RecipeParams, h: &Host, offs: &[i32]) -> Step {
        let (m, d, i, e) = (S.m, S.d, S.i, S.e);
        Step {
            x: up(ctx, &h.x),
            w13: up(ctx, &h.w13),
            w2: up(ctx, &h.w2),
            dy: up(ctx, &h.dy),
            offs: up(ctx, offs),
            saved: zeros(ctx, ctx.moe_experts_saved_size(S).unwrap()),
            fws: zeros(ctx, ctx.moe_experts_sizes(p, S).unwrap().forward_workspace),
            bws: zeros(ctx, ctx.moe_experts_sizes(p, S).unwrap().backward_workspace),
            y: zeros(ctx, m * d),
            dx: zeros(ctx, m * d),
            dw13: zeros(ctx, e * 2 * i * d),
            dw2: zeros(ctx, e * d * i),
        }
    }
    fn upload(&mut self, h: &Host, offs: &[i32]) {
        self.x.copy_from_host(&h.x).unwrap();
        self.w13.copy_from_host(&h.w13).unwrap();
        self.w2.copy_from_host(&h.w2).unwrap();
        self.dy.copy_from_host(&h.dy).unwrap();
        self.offs.copy_from_host(offs).unwrap();
        sync_legacy();
    }
    fn fill_outputs(&mut self, byte: u8) {
        for b in [&mut self.y, &mut self.dx, &mut self.dw13, &mut self.dw2] {
            b.fill_bytes(byte).unwrap();
        }
        self.saved.fill_bytes(byte).unwrap();
        sync_legacy();
    }
    fn refresh(&self, ctx: &Context, cache: &mut WeightCache, s: StreamRef) -> u64 {
        cache
            .refresh(ctx, &[hp(&self.w13), hp(&self.w2)], s)
            .unwrap()
    }
    fn run(&mut self, ctx: &Context, p: &RecipeParams, cache: &WeightCache, s: StreamRef) {
        let g = ctx
            .moe_experts_forward(
                p,
                S,
                cache,
                hp(&self.x),
                self.offs.src(),
                self.y.dst(),
                self.saved.dst(),
                self.fws.dst(),
                s,
            )
            .unwrap();
        ctx.moe_experts_backward(
            p,
            S,
            cache,
            g,
            self.saved.src(),
            hp(&self.dy),
            self.offs.src(),
            self.dx.dst(),
            self.dw13.dst(),
            self.dw2.dst(),
            self.bws.dst(),
            s,
        )
        .unwrap();
    }
    fn outputs(&self) -> Vec<Vec<u16>> {
        [&self.y, &self.dx, &self.dw13, &self.dw2]
            .iter()
            .map(|b| b.to_vec().unwrap().iter().map(|v| v.to_bits()).collect())
            .collect()
    }
}

const NAMES: [&str; 4] = ["y", "dx", "dW13", "dW2"];

/// Dequant scales of `v` on the GPU.
fn inv(ctx: &Context, v: &DeviceBuffer<f32>, s: StreamRef) -> DeviceBuffer<f32> {
    let mut o = zeros::<f32>(ctx, v.len());
    ctx.scale_reciprocal(v.len(), v.src(), o.dst(), s).unwrap();
    o
}

type Quantized = (
    DeviceBuffer<u8>,
    DeviceBuffer<f32>,
    DeviceBuffer<u8>,
    DeviceBuffer<f32>,
);

/// (E,K,N) weights to both layouts with the single casts: (forward B, its dequant scales,
/// dgrad B, its dequant scales).
fn weights(
    ctx: &Context,
    cp: &CastParams,
    (e, k, n): (usize, usize, usize),
    w: &DeviceBuffer<bf16>,
    s: StreamRef,
) -> Quantized {
    let (mut q, mut sc, mut t, mut ts) = (
        zeros::<u8>(ctx, e * k * n),
        zeros::<f32>(ctx, e * n),
        zeros::<u8>(ctx, e * k * n),
        zeros::<f32>(ctx, e * k),
    );
    ctx.colwise_3d(cp, e, k, n, hp(w), q.dst(), sc.dst(), s)
        .unwrap();
    ctx.rowwise_3d_transpose_rhs(cp, e, k, n, hp(w), t.dst(), ts.dst(), s)
        .unwrap();
    (q, inv(ctx, &sc, s), t, inv(ctx, &ts, s))
}

/// An (m, k) operand rowwise and per-group colwise with the single casts, with dequant scales.
fn act(
    ctx: &Context,
    cp: &CastParams,
    (m, k): (usize, usize),
    x: HpSrc<'_>,
    offs: &DeviceBuffer<i32>,
    s: StreamRef,
) -> Quantized {
    let g = offs.len();
    let (mut q, mut sc, mut c, mut cs) = (
        zeros::<u8>(ctx, m * k),
        zeros::<f32>(ctx, m),
        zeros::<u8>(ctx, m * k),
        zeros::<f32>(ctx, g * k),
    );
    ctx.rowwise_2d(cp, m, k, x, q.dst(), sc.dst(), s).unwrap();
    ctx.per_group_colwise(cp, m, k, x, offs.src(), c.dst(), cs.dst(), s)
        .unwrap();
    (q, inv(ctx, &sc, s), c, inv(ctx, &cs, s))
}

/// The composed step on the GPU: the single ops, dequant scales from scale_reciprocal.
fn composed(ctx: &Context, st: &Step, s: StreamRef) -> Vec<Vec<u16>> {
    let (m, d, i, e) = (S.m, S.d, S.i, S.e);
    let cp = CastParams::new(Fp8Format::E4M3Fn, true);
    let gp = GemmParams::new(Fp8Format::E4M3Fn, Fp8Format::E4M3Fn);
    let inv = |v: &DeviceBuffer<f32>| inv(ctx, v, s);
    let (w13q, w13si, w13t, w13tsi) = weights(ctx, &cp, (e, d, 2 * i), &st.w13, s);
    let (w2q, w2si, w2t, w2tsi) = weights(ctx, &cp, (e, i, d), &st.w2, s);
    let act = |x: HpSrc<'_>, k: usize| act(ctx, &cp, (m, k), x, &st.offs, s);
    let dual = |n: usize| {
        (
            zeros::<u8>(ctx, m * n),
            zeros::<f32>(ctx, m),
            zeros::<u8>(ctx, m * n),
            zeros::<f32>(ctx, e * n),
        )
    };
    let gemm = |kk: usize,
                nn: usize,
                a: &DeviceBuffer<u8>,
                b: &DeviceBuffer<u8>,
                sa: &DeviceBuffer<f32>,
                sb: &DeviceBuffer<f32>,
                out: &mut DeviceBuffer<bf16>| {
        ctx.grouped_gemm_2d3d(
            &gp,
            m,
            kk,
            nn,
            e,
            a.src(),
            b.src(),
            st.offs.src(),
            sa.src(),
            sb.src(),
            out.dst(),
            s,
        )
        .unwrap();
    };
    let wgrad = |nn: usize,
                 kk: usize,
                 (a, sa): (Src<'_, u8>, Src<'_, f32>),
                 b: &DeviceBuffer<u8>,
                 sb: &DeviceBuffer<f32>,
                 out: Dst<'_, bf16>| {
        ctx.grouped_gemm_2d2d(
            &gp,
            nn,
            m,
            kk,
            a,
            b.src(),
            st.offs.src(),
            sa,
            sb.src(),
            out,
            s,
        )
        .unwrap();
    };
    let (xq, xsi, xc, xcsi) = act(hp(&st.x), d);
    let mut gu = zeros::<bf16>(ctx, m * 2 * i);
    gemm(d, 2 * i, &xq, &w13q, &xsi, &w13si, &mut gu);
    let (mut hq, mut hs, mut hc, mut hcs) = dual(i);
    let o = DualOut {
        out: hq.dst(),
        scales: hs.dst(),
        out_col: hc.dst(),
        scales_col: hcs.dst(),
    };
    ctx.moe_swiglu_quant(&cp.into(), m, i, hp(&gu), st.offs.src(), o, s)
        .unwrap();
    let (hsi, hcsi) = (inv(&hs), inv(&hcs));
    let mut y = zeros::<bf16>(ctx, m * d);
    y.fill_bytes(0xA5).unwrap();
    sync_legacy();
    gemm(i, d, &hq, &w2q, &hsi, &w2si, &mut y);
    let (dyq, dysi, dyc, dycsi) = act(hp(&st.dy), d);
    let mut dh = zeros::<bf16>(ctx, m * i);
    gemm(d, i, &dyq, &w2t, &dysi, &w2tsi, &mut dh);
    let mut dw2 = zeros::<bf16>(ctx, e * d * i);
    wgrad(d, i, (dyc.src(), dycsi.src()), &hc, &hcsi, dw2.dst());
    let (mut dq, mut ds, mut dc, mut dcs) = dual(2 * i);
    let o = DualOut {
        out: dq.dst(),
        scales: ds.dst(),
        out_col: dc.dst(),
        scales_col: dcs.dst(),
    };
    ctx.moe_swiglu_bwd_quant(&cp.into(), m, i, hp(&dh), hp(&gu), st.offs.src(), o, s)
        .unwrap();
    let (dsi, dcsi) = (inv(&ds), inv(&dcs));
    let mut dx = zeros::<bf16>(ctx, m * d);
    dx.fill_bytes(0xA5).unwrap();
    sync_legacy();
    gemm(2 * i, d, &dq, &w13t, &dsi, &w13tsi, &mut dx);
    // The W13 wgrad per half of d (gate, up) with its half of the scales, as the recipe:
    // dW13 (2, e, i, d) = [dW1; dW3].
    let mut dw13 = zeros::<bf16>(ctx, e * 2 * i * d);
    let dcsi_host = dcsi.to_vec().unwrap(); // s is a blocking stream: the copy waits for it
    let halves: Vec<DeviceBuffer<f32>> = (0..2)
        .map(|h| {
            let sh: Vec<f32> = (0..e)
                .flat_map(|g| dcsi_host[g * 2 * i + h * i..][..i].to_vec())
                .collect();
            up(ctx, &sh)
        })
        .collect();
    for (h, sh) in halves.iter().enumerate() {
        let a = dc.src_range(h * m * i..(h + 1) * m * i).unwrap();
        let out = dw13.dst_range(h * e * i * d..(h + 1) * e * i * d).unwrap();
        wgrad(i, d, (a, sh.src()), &xc, &xcsi, out);
    }
    Stream::default_stream().synchronize().unwrap();
    [&y, &dx, &dw13, &dw2]
        .iter()
        .map(|b| b.to_vec().unwrap().iter().map(|v| v.to_bits()).collect())
        .collect()
}

fn similarity_diff(a: &[u16], b: &[u16], n: usize) -> f64 {
    let f = |v: u16| bf16::from_bits(v).to_f64();
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for j in 0..n {
        let (x, y) = (f(a[j]), f(b[j]));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    1.0 - 2.0 * ab / (aa + bb)
}

#[test]
fn experts_gpu_eq_composed_ops_and_cpu() {
    let Some(ctx) = gpu_for_tests("experts_gpu_eq_composed_ops_and_cpu") else {
        return;
    };
    let p = params();
    let cpu = Context::cpu();
    for offs in [OFFS_A, OFFS_B] {
        let h = host_inputs(5);
        let stream = Stream::new(&ctx).unwrap();
        let s = stream.handle();
        let mut st = Step::new(&ctx, &p, &h, &offs);
        st.fill_outputs(0xA5);
        let mut cache = WeightCache::new(&ctx, &p, &S.projections()).unwrap();
        st.refresh(&ctx, &mut cache, s);
        st.run(&ctx, &p, &cache, s);
        stream.synchronize().unwrap();
        let got = st.outputs();
        let want = composed(&ctx, &st, s);
        for (k, name) in NAMES.iter().enumerate() {
            if let Some(j) = (0..got[k].len()).find(|&j| got[k][j] != want[k][j]) {
                panic!(
                    "offsets {offs:?}: {name}[{j}]: recipe {:#06x}, composed ops {:#06x}",
                    got[k][j], want[k][j]
                );
            }
        }
        // The CPU backend's recipe.
        let d = S.d;
        let rows = *offs.last().unwrap() as usize * d;
        let cpu_out = cpu_recipe(&cpu, &p, &h, &offs);
        for (k, name) in NAMES.iter().enumerate() {
            let n = if k < 2 { rows } else { got[k].len() };
            let diff = similarity_diff(&got[k], &cpu_out[k], n);
            println!("offsets {offs:?}: {name} gpu vs cpu similarity diff {diff:.2e}");
            assert!(
                diff <= 1e-3,
                "offsets {offs:?}: {name} gpu vs cpu diff {diff}"
            );
        }
    }
    println!("HIPFP8_GPU_CHECK experts recipe gpu == composed gpu ops (bitwise), ~= cpu recipe");
}

/// `pad_wgrad` on the GPU: y and dx bit-identical to the unpadded recipe's (the padding only
/// touches the wgrad operands), dW13 and dW2 equal to the CPU recipe's up to the GEMMs'
/// summation order (the CPU's padded and unpadded results are bit-identical,
/// tests/recipe_cpu.rs), with aligned groups and with unaligned / empty groups and rows past
/// the last offset (there every wgrad group runs the library GEMM instead of the reference
/// kernel).
#[test]
fn experts_pad_wgrad_gpu() {
    let Some(ctx) = gpu_for_tests("experts_pad_wgrad_gpu") else {
        return;
    };
    let p = params();
    let pp = RecipeParams {
        pad_wgrad: true,
        ..p
    };
    let cpu = Context::cpu();
    for offs in [OFFS_A, OFFS_B] {
        let h = host_inputs(11);
        let stream = Stream::new(&ctx).unwrap();
        let s = stream.handle();
        let mut st = Step::new(&ctx, &p, &h, &offs);
        let mut cache = WeightCache::new(&ctx, &p, &S.projections()).unwrap();
        st.refresh(&ctx, &mut cache, s);
        st.fill_outputs(0xA5);
        st.run(&ctx, &p, &cache, s);
        stream.synchronize().unwrap();
        let plain = st.outputs();
        st.fill_outputs(0x5A);
        st.run(&ctx, &pp, &cache, s);
        stream.synchronize().unwrap();
        let padded = st.outputs();
        let rows = *offs.last().unwrap() as usize * S.d;
        for k in 0..2 {
            if let Some(j) = (0..rows).find(|&j| plain[k][j] != padded[k][j]) {
                panic!(
                    "offsets {offs:?}: {}[{j}]: padded {:#06x}, unpadded {:#06x}",
                    NAMES[k], padded[k][j], plain[k][j]
                );
            }
        }
        let want = cpu_recipe(&cpu, &pp, &h, &offs);
        for k in 2..4 {
            let diff = similarity_diff(&padded[k], &want[k], padded[k].len());
            println!(
                "offsets {offs:?}: padded {} gpu vs cpu similarity diff {diff:.2e}",
                NAMES[k]
            );
            assert!(diff <= 1e-3, "offsets {offs:?}: {} diff {diff}", NAMES[k]);
        }
    }
    println!("HIPFP8_GPU_CHECK experts recipe pad_wgrad: y, dx == unpadded; dW ~= cpu");
}

/// The CPU backend's recipe (forward + backward) on the host inputs: y, dx, dW13, dW2 bits.
fn cpu_recipe(cpu: &Context, p: &RecipeParams, h: &Host, offs: &[i32]) -> Vec<Vec<u16>> {
    let (m, d, i, e) = (S.m, S.d, S.i, S.e);
    let mut c = WeightCache::new(cpu, p, &S.projections()).unwrap();
    c.refresh(cpu, &[(&h.w13).into(), (&h.w2).into()], StreamRef::DEFAULT)
        .unwrap();
    let mut saved = vec![0u8; cpu.moe_experts_saved_size(S).unwrap()];
    let sizes = cpu.moe_experts_sizes(p, S).unwrap();
    let (mut fws, mut bws) = (
        vec![0u8; sizes.forward_workspace],
        vec![0u8; sizes.backward_workspace],
    );
    let (mut y, mut dx) = (vec![bf16::ZERO; m * d], vec![bf16::ZERO; m * d]);
    let (mut dw13, mut dw2) = (vec![bf16::ZERO; e * 2 * i * d], vec![bf16::ZERO; e * d * i]);
    let g = cpu
        .moe_experts_forward(
            p,
            S,
            &c,
            (&h.x).into(),
            offs.into(),
            (&mut y).into(),
            (&mut saved).into(),
            (&mut fws).into(),
            StreamRef::DEFAULT,
        )
        .unwrap();
    cpu.moe_experts_backward(
        p,
        S,
        &c,
        g,
        (&saved).into(),
        (&h.dy).into(),
        offs.into(),
        (&mut dx).into(),
        (&mut dw13).into(),
        (&mut dw2).into(),
        (&mut bws).into(),
        StreamRef::DEFAULT,
    )
    .unwrap();
    let bits = |v: &[bf16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    vec![bits(&y), bits(&dx), bits(&dw13), bits(&dw2)]
}

#[test]
fn experts_captured_on_a_fresh_stream() {
    let Some(ctx) = gpu_for_tests("experts_captured_on_a_fresh_stream") else {
        return;
    };
    let p = params();
    let h = host_inputs(99);
    let mut st = Step::new(&ctx, &p, &h, &OFFS_A);
    let mut cache = WeightCache::new(&ctx, &p, &S.projections()).unwrap();
    let eager = Stream::new_non_blocking(&ctx).unwrap();
    st.refresh(&ctx, &mut cache, eager.handle());
    st.run(&ctx, &p, &cache, eager.handle());
    eager.synchronize().unwrap();
    // A stream that never ran anything: the recipe's scratch is all in the caller's buffers.
    let cap = Stream::new_non_blocking(&ctx).unwrap();
    cap.begin_capture().unwrap();
    st.run(&ctx, &p, &cache, cap.handle());
    assert!(cap.is_capturing().unwrap());
    let graph = cap.end_capture().unwrap();
    for (round, (seed, offs, refresh)) in [
        (1u64, OFFS_A, false),
        (7, OFFS_B, true),
        (13, OFFS_A, false),
    ]
    .into_iter()
    .enumerate()
    {
        let hr = host_inputs(seed);
        st.upload(&hr, &offs);
        if refresh {
            // New weights (an optimizer step), quantized into the same cache memory the graph reads.
            st.refresh(&ctx, &mut cache, cap.handle());
        }
        st.fill_outputs(0xA5);
        graph.launch(&cap).unwrap();
        cap.synchronize().unwrap();
        let replayed = st.outputs();
        let saved_r = st.saved.to_vec().unwrap();
        st.fill_outputs(0xA5);
        st.run(&ctx, &p, &cache, eager.handle());
        eager.synchronize().unwrap();
        let direct = st.outputs();
        for (k, name) in NAMES.iter().enumerate() {
            assert!(
                replayed[k] == direct[k],
                "round {round} (offsets {offs:?}): {name} differs between the replay and eager calls (first at {:?})",
                replayed[k].iter().zip(&direct[k]).position(|(a, b)| a != b)
            );
            assert!(
                replayed[k].iter().any(|&v| v != 0xA5A5),
                "round {round}: {name} not written"
            );
        }
        assert!(
            saved_r == st.saved.to_vec().unwrap(),
            "round {round}: saved tensors differ"
        );
    }
    println!(
        "HIPFP8_GPU_CHECK experts recipe fwd+bwd graph == eager for 3 rounds (new data, offsets, weights)"
    );
}

#[test]
fn grouped_linear_gpu_eq_composed_ops() {
    let Some(ctx) = gpu_for_tests("grouped_linear_gpu_eq_composed_ops") else {
        return;
    };
    let p = params();
    let ls = LinearShape {
        m: 512,
        k: 256,
        n: 384,
        e: 4,
    };
    let (m, k, n, e) = (ls.m, ls.k, ls.n, ls.e);
    let stream = Stream::new(&ctx).unwrap();
    let s = stream.handle();
    let (x, w, dy) = (
        up(&ctx, &values(m * k, 1, 1.0)),
        up(&ctx, &values(e * k * n, 2, 0.1)),
        up(&ctx, &values(m * n, 3, 0.1)),
    );
    let offs = up(&ctx, &OFFS_B);
    let mut cache = WeightCache::new(&ctx, &p, &[ls.projection()]).unwrap();
    let g = cache.refresh(&ctx, &[hp(&w)], s).unwrap();
    let mut fws = zeros::<u8>(
        &ctx,
        ctx.grouped_linear_forward_workspace_size(&p, ls).unwrap(),
    );
    let mut bws = zeros::<u8>(
        &ctx,
        ctx.grouped_linear_backward_workspace_size(&p, ls).unwrap(),
    );
    let (mut y, mut dx, mut dw) = (
        zeros::<bf16>(&ctx, m * n),
        zeros::<bf16>(&ctx, m * k),
        zeros::<bf16>(&ctx, e * k * n),
    );
    ctx.grouped_linear_forward(&p, ls, &cache, hp(&x), offs.src(), y.dst(), fws.dst(), s)
        .unwrap();
    ctx.grouped_linear_backward(
        &p,
        ls,
        &cache,
        g,
        hp(&x),
        hp(&dy),
        offs.src(),
        dx.dst(),
        dw.dst(),
        bws.dst(),
        s,
    )
    .unwrap();
    stream.synchronize().unwrap();
    // Composed.
    let cp = CastParams::new(Fp8Format::E4M3Fn, true);
    let gp = GemmParams::new(Fp8Format::E4M3Fn, Fp8Format::E4M3Fn);
    let (wq, wsi, wt, wtsi) = weights(&ctx, &cp, (e, k, n), &w, s);
    let (xq, xsi, xc, xcsi) = act(&ctx, &cp, (m, k), hp(&x), &offs, s);
    let (gq, gsi, gc, gcsi) = act(&ctx, &cp, (m, n), hp(&dy), &offs, s);
    let (mut cy, mut cdx, mut cdw) = (
        zeros::<bf16>(&ctx, m * n),
        zeros::<bf16>(&ctx, m * k),
        zeros::<bf16>(&ctx, e * k * n),
    );
    ctx.grouped_gemm_2d3d(
        &gp,
        m,
        k,
        n,
        e,
        xq.src(),
        wq.src(),
        offs.src(),
        xsi.src(),
        wsi.src(),
        cy.dst(),
        s,
    )
    .unwrap();
    ctx.grouped_gemm_2d3d(
        &gp,
        m,
        n,
        k,
        e,
        gq.src(),
        wt.src(),
        offs.src(),
        gsi.src(),
        wtsi.src(),
        cdx.dst(),
        s,
    )
    .unwrap();
    ctx.grouped_gemm_2d2d(
        &gp,
        n,
        m,
        k,
        gc.src(),
        xc.src(),
        offs.src(),
        gcsi.src(),
        xcsi.src(),
        cdw.dst(),
        s,
    )
    .unwrap();
    stream.synchronize().unwrap();
    for (name, a, b) in [("y", &y, &cy), ("dx", &dx, &cdx), ("dW", &dw, &cdw)] {
        let (a, b) = (a.to_vec().unwrap(), b.to_vec().unwrap());
        let first = a
            .iter()
            .zip(&b)
            .position(|(u, v)| u.to_bits() != v.to_bits());
        assert!(
            first.is_none(),
            "grouped linear {name}: recipe != composed ops at {first:?}"
        );
    }
    println!("HIPFP8_GPU_CHECK grouped linear gpu == composed gpu ops (bitwise)");
}

/// `moe_act_dual` of an (m, d) operand with dequant scales: rowwise codes and scales, then
/// per-group colwise codes and scales.
fn act_dual_dq(
    ctx: &Context,
    f: Fp8Format,
    x: HpSrc<'_>,
    offs: &DeviceBuffer<i32>,
    s: StreamRef,
) -> Quantized {
    let (m, d, e) = (S.m, S.d, S.e);
    let p = MoeCastParams::from(CastParams::new(f, true)).with_scales(ScaleOutput::Dequant);
    let (mut q, mut sc, mut c, mut cs) = (
        zeros::<u8>(ctx, m * d),
        zeros::<f32>(ctx, m),
        zeros::<u8>(ctx, m * d),
        zeros::<f32>(ctx, e * d),
    );
    let out = DualOut {
        out: q.dst(),
        scales: sc.dst(),
        out_col: c.dst(),
        scales_col: cs.dst(),
    };
    ctx.moe_act_dual(&p, m, d, x, offs.src(), out, s).unwrap();
    (q, sc, c, cs)
}

fn operand<'a>(q: &'a DeviceBuffer<u8>, sc: &'a DeviceBuffer<f32>) -> Fp8Operand<'a> {
    Fp8Operand {
        q: q.src(),
        s: sc.src(),
    }
}

#[test]
fn experts_precast_gpu_eq_bf16_calls() {
    let Some(ctx) = gpu_for_tests("experts_precast_gpu_eq_bf16_calls") else {
        return;
    };
    let p = params();
    for offs in [OFFS_A, OFFS_B] {
        let h = host_inputs(9);
        let stream = Stream::new(&ctx).unwrap();
        let s = stream.handle();
        let mut st = Step::new(&ctx, &p, &h, &offs);
        st.fill_outputs(0xA5);
        let mut cache = WeightCache::new(&ctx, &p, &S.projections()).unwrap();
        st.refresh(&ctx, &mut cache, s);
        st.run(&ctx, &p, &cache, s);
        stream.synchronize().unwrap();
        let want = st.outputs();
        st.fill_outputs(0xA5);
        let (xq, xs, xc, xcs) = act_dual_dq(&ctx, Fp8Format::E4M3Fn, hp(&st.x), &st.offs, s);
        let (dq, ds, dc, dcs) = act_dual_dq(&ctx, Fp8Format::E4M3Fn, hp(&st.dy), &st.offs, s);
        let z = ctx.moe_experts_precast_sizes(&p, S).unwrap();
        let (mut saved, mut fws, mut bws) = (
            zeros::<u8>(&ctx, z.saved),
            zeros::<u8>(&ctx, z.forward_workspace),
            zeros::<u8>(&ctx, z.backward_workspace),
        );
        let g = ctx
            .moe_experts_forward_precast(
                &p,
                S,
                &cache,
                operand(&xq, &xs),
                st.offs.src(),
                st.y.dst(),
                saved.dst(),
                fws.dst(),
                s,
            )
            .unwrap();
        ctx.moe_experts_backward_precast(
            &p,
            S,
            &cache,
            g,
            saved.src(),
            operand(&dq, &ds),
            operand(&dc, &dcs),
            operand(&xc, &xcs),
            st.offs.src(),
            st.dx.dst(),
            st.dw13.dst(),
            st.dw2.dst(),
            bws.dst(),
            s,
        )
        .unwrap();
        stream.synchronize().unwrap();
        let got = st.outputs();
        for (k, name) in NAMES.iter().enumerate() {
            if let Some(j) = (0..got[k].len()).find(|&j| got[k][j] != want[k][j]) {
                panic!(
                    "offsets {offs:?}: {name}[{j}]: pre-cast {:#06x}, bf16 call {:#06x}",
                    got[k][j], want[k][j]
                );
            }
        }
    }
}
