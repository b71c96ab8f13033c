//! The wgrad of an MoE layer on unpadded token groups through `per_group_colwise_dual_padded`:
//! the 2D x 2D grouped GEMM over its padded output runs on the library (CUTLASS) for every
//! group, and equals, bit for bit, the GEMM over torchao-style zero-padded inputs (every group
//! copied to a 16-row aligned start, zero rows after it) cast by `per_group_colwise_dual`.
//!
//! Without a GPU build or device each test prints `HIPFP8_SKIP ...` and returns (with
//! HIPFP8_REQUIRE_GPU=1 it fails instead); without CUTLASS for the device's native E4M3 it is a
//! printed skip too (the routing tested here is CUTLASS's: every non-empty group starting on a
//! 16-token boundary).

use std::ffi::c_void;

use hipfp8::device::{DeviceBuffer, Stream, gpu_for_tests, skip_test};
use hipfp8::{CastParams, Context, GemmBackend, GemmImpl, GemmParams, GroupedOp, HpSrc, bf16};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn val(&mut self) -> bf16 {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        bf16::from_f32(((u - 0.5) * 6.0) as f32)
    }
}

/// The GEMM's dequant scales: 1 / the forward scales (as torch._scaled_grouped_mm takes them).
fn recip(s: &[f32]) -> Vec<f32> {
    s.iter().map(|&v| 1.0 / v).collect()
}

/// The 2D x 2D GEMM on device operands; returns the output bits.
#[allow(clippy::too_many_arguments)]
fn gemm(
    ctx: &Context,
    stream: &Stream,
    p: &GemmParams,
    (n, mt, k): (usize, usize, usize),
    a: &DeviceBuffer<u8>,
    b: &DeviceBuffer<u8>,
    offs: &DeviceBuffer<i32>,
    sa: &[f32],
    sb: &[f32],
) -> Vec<u16> {
    let g = sa.len() / n;
    let dsa = DeviceBuffer::from_host(ctx, sa).unwrap();
    let dsb = DeviceBuffer::from_host(ctx, sb).unwrap();
    let mut out = DeviceBuffer::from_host(ctx, &vec![bf16::from_f32(-768.0); g * n * k]).unwrap();
    ctx.grouped_gemm_2d2d(
        p,
        n,
        mt,
        k,
        a.src(),
        b.src(),
        offs.src(),
        dsa.src(),
        dsb.src(),
        out.dst(),
        stream.handle(),
    )
    .unwrap();
    stream.synchronize().unwrap();
    out.to_vec().unwrap().iter().map(|x| x.to_bits()).collect()
}

#[test]
fn padded_wgrad_runs_on_the_library_and_equals_the_zero_padded_wgrad() {
    let name = "padded_wgrad_runs_on_the_library_and_equals_the_zero_padded_wgrad";
    let Some(ctx) = gpu_for_tests(name) else {
        return;
    };
    let fmt = ctx.native_format();
    if hipfp8::grouped_gemm_gpu::library_impl(&ctx, fmt, fmt) != Some(GemmImpl::CutlassSm90) {
        skip_test(
            name,
            "no CUTLASS for the native E4M3 here (the routing tested is CUTLASS's)",
        );
        return;
    }
    let stream = Stream::new(&ctx).unwrap();
    // dy (M, N) and the activations A (M, K); grad_B[g] = dy_g^T A_g, (N, K) per group.
    let (n, k) = (192usize, 136usize);
    // Zipf-like routing with unaligned starts, an empty and a 1-row group.
    let sizes = [1900usize, 951, 0, 633, 475, 1, 380, 317, 271, 237, 33];
    let g = sizes.len();
    let m: usize = sizes.iter().sum();
    let mut offs = Vec::new();
    let mut e = 0;
    for s in sizes {
        e += s;
        offs.push(e as i32);
    }
    let mut rng = Rng(4242);
    let dy: Vec<bf16> = (0..m * n).map(|_| rng.val()).collect();
    let act: Vec<bf16> = (0..m * k).map(|_| rng.val()).collect();
    let cast = CastParams::new(fmt, false);
    let s = stream.handle();

    // The padded cast of the unpadded inputs.
    let m_cap = (m + 15 * g).next_multiple_of(16);
    let (ddy, dact) = (
        DeviceBuffer::from_host(&ctx, &dy).unwrap(),
        DeviceBuffer::from_host(&ctx, &act).unwrap(),
    );
    let doffs = DeviceBuffer::from_host(&ctx, &offs).unwrap();
    let mut o1 = DeviceBuffer::from_host(&ctx, &vec![0xA5u8; m_cap * n]).unwrap();
    let mut o2 = DeviceBuffer::from_host(&ctx, &vec![0xA5u8; m_cap * k]).unwrap();
    let mut s1 = DeviceBuffer::from_host(&ctx, &vec![0f32; g * n]).unwrap();
    let mut s2 = DeviceBuffer::from_host(&ctx, &vec![0f32; g * k]).unwrap();
    let mut po = DeviceBuffer::from_host(&ctx, &vec![-1i32; g]).unwrap();
    ctx.per_group_colwise_dual_padded(
        &cast,
        m,
        n,
        k,
        m_cap,
        HpSrc::Bf16(ddy.src()),
        HpSrc::Bf16(dact.src()),
        doffs.src(),
        o1.dst(),
        s1.dst(),
        o2.dst(),
        s2.dst(),
        po.dst(),
        s,
    )
    .unwrap();
    stream.synchronize().unwrap();

    // torchao-style: the inputs zero-padded on the host, cast by per_group_colwise_dual.
    let mut offs_p = Vec::new();
    let mut lp = 0usize;
    let (mut dyp, mut actp) = (Vec::new(), Vec::new());
    let mut lo = 0usize;
    for s in sizes {
        let ps = s.div_ceil(16) * 16;
        dyp.extend_from_slice(&dy[lo * n..(lo + s) * n]);
        dyp.resize((lp + ps) * n, bf16::ZERO);
        actp.extend_from_slice(&act[lo * k..(lo + s) * k]);
        actp.resize((lp + ps) * k, bf16::ZERO);
        lo += s;
        lp += ps;
        offs_p.push(lp as i32);
    }
    let mp = lp;
    assert_eq!(po.to_vec().unwrap(), offs_p, "padded END offsets");
    let (ddyp, dactp) = (
        DeviceBuffer::from_host(&ctx, &dyp).unwrap(),
        DeviceBuffer::from_host(&ctx, &actp).unwrap(),
    );
    let doffs_p = DeviceBuffer::from_host(&ctx, &offs_p).unwrap();
    let mut q1 = DeviceBuffer::from_host(&ctx, &vec![0u8; mp * n]).unwrap();
    let mut q2 = DeviceBuffer::from_host(&ctx, &vec![0u8; mp * k]).unwrap();
    let mut t1 = DeviceBuffer::from_host(&ctx, &vec![0f32; g * n]).unwrap();
    let mut t2 = DeviceBuffer::from_host(&ctx, &vec![0f32; g * k]).unwrap();
    ctx.per_group_colwise_dual(
        &cast,
        mp,
        n,
        k,
        HpSrc::Bf16(ddyp.src()),
        HpSrc::Bf16(dactp.src()),
        doffs_p.src(),
        q1.dst(),
        t1.dst(),
        q2.dst(),
        t2.dst(),
        s,
    )
    .unwrap();
    stream.synchronize().unwrap();
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    let (s1h, s2h) = (s1.to_vec().unwrap(), s2.to_vec().unwrap());
    assert_eq!(bits(s1h.clone()), bits(t1.to_vec().unwrap()), "dy scales");
    assert_eq!(
        bits(s2h.clone()),
        bits(t2.to_vec().unwrap()),
        "activation scales"
    );
    // The data: the padded layout is torchao's followed by zero rows up to m_cap.
    let (o1h, o2h) = (o1.to_vec().unwrap(), o2.to_vec().unwrap());
    let (q1h, q2h) = (q1.to_vec().unwrap(), q2.to_vec().unwrap());
    for (o, q, cols) in [(&o1h, &q1h, n), (&o2h, &q2h, k)] {
        for c in 0..cols {
            assert_eq!(
                o[c * m_cap..c * m_cap + mp],
                q[c * mp..(c + 1) * mp],
                "column {c}"
            );
            assert!(o[c * m_cap + mp..(c + 1) * m_cap].iter().all(|&b| b == 0));
        }
    }

    // The plan: the library, no fallback, for the padded extent (Mt = m_cap) and torchao's.
    let lib = GemmParams::new(fmt, fmt).with_backend(GemmBackend::Library);
    let ptrs = |a: &DeviceBuffer<u8>, b: &DeviceBuffer<u8>| {
        Some([
            a.as_ptr() as *const c_void,
            b.as_ptr() as *const c_void,
            std::ptr::null::<c_void>().wrapping_add(256),
        ])
    };
    for (mt, a, b) in [(m_cap, &o1, &o2), (mp, &q1, &q2)] {
        let plan = ctx
            .grouped_gemm_plan(&lib, GroupedOp::TwoD2D { n, mt, k }, g, ptrs(a, b))
            .unwrap();
        assert_eq!(
            (plan.imp, plan.fallback.clone()),
            (GemmImpl::CutlassSm90, None),
            "Mt = {mt}: {}",
            plan.describe()
        );
        println!("Mt = {mt}: {}", plan.describe());
    }
    let (sa, sb) = (recip(&s1h), recip(&s2h));
    let ours = gemm(&ctx, &stream, &lib, (n, m_cap, k), &o1, &o2, &po, &sa, &sb);
    let torchao = gemm(
        &ctx,
        &stream,
        &lib,
        (n, mp, k),
        &q1,
        &q2,
        &doffs_p,
        &sa,
        &sb,
    );
    let diff = ours.iter().zip(&torchao).filter(|(a, b)| a != b).count();
    assert_eq!(diff, 0, "{diff} of {} wgrad elements differ", ours.len());
    // Every group on CUTLASS: the reference kernel (which owns exactly the groups off a
    // 16-token boundary and the empty ones) gives other bits on the big groups (CUTLASS's
    // fast FP8 accumulation, tests/gpu_grouped_gemm.rs); the empty group is zeros.
    let reference = GemmParams::new(fmt, fmt).with_backend(GemmBackend::Reference);
    let by_ref = gemm(
        &ctx,
        &stream,
        &reference,
        (n, m_cap, k),
        &o1,
        &o2,
        &po,
        &sa,
        &sb,
    );
    let block = n * k;
    for (gi, &sz) in sizes.iter().enumerate() {
        let r = gi * block..(gi + 1) * block;
        if sz == 0 {
            assert!(
                ours[r].iter().all(|&b| b == 0),
                "empty group {gi} must be +0"
            );
        } else if sz >= 256 {
            let d = ours[r.clone()]
                .iter()
                .zip(&by_ref[r])
                .filter(|(a, b)| a != b)
                .count();
            assert!(
                d > 0,
                "group {gi} ({sz} tokens) is bit-identical to the reference kernel: not CUTLASS?"
            );
        }
    }
    println!(
        "padded wgrad == zero-padded wgrad, bit for bit, on CUTLASS ({g} groups, m_cap {m_cap})"
    );
}
