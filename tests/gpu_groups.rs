//! Every grouped scale-and-cast on the GPU at any group count (issue 17): 1, around the
//! kernels' internal limits (2047-2049: the shared-memory tables of one launch; 3071-3073 and
//! 4095-4097: where the tables used to outgrow shared memory; multiples of the 2048-group
//! chunk +- 1) and 65536 groups, bf16 and f32, aligned and unaligned views (the vector and the
//! element-wise kernels), against the CPU bit for bit, outputs compared whole (sentinels).
//! Bad device offsets (decreasing, negative, past the extent) at every count are clamped as
//! documented. Skips with a printed reason
//! without a GPU (HIPFP8_REQUIRE_GPU=1 makes that a failure).

mod common;

use common::gpu::{DevHp, Out, check_f32, check_u8};
use common::{Fill, SENT_F32, SENT_U8, Tensor, offsets};
use hipfp8::device::{DeviceBuffer, gpu_for_tests};
use hipfp8::{CastParams, Context, Fp8Format, StreamRef};

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
