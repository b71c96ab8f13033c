//! Every validation error, once per op family, and "nothing is written on error": outputs
//! are filled with a sentinel before each failing call and checked after it.

use hipfp8::{
    CastParams, Context, Error, Fp8Format, GemmParams, Loc, MxParams, MxRounding, Scaling, Src,
    StreamRef, bf16,
};

const S: StreamRef = StreamRef::DEFAULT;
const SU: u8 = 0xA5;
const SF: f32 = -3.5;

fn p() -> CastParams {
    CastParams::new(Fp8Format::E4M3Fn, false)
}

fn untouched(o: &[u8], s: &[f32]) {
    assert!(o.iter().all(|&b| b == SU), "output written on error");
    assert!(s.iter().all(|&v| v == SF), "scales written on error");
}

fn null_f32<'a>(n: usize) -> hipfp8::HpSrc<'a> {
    // SAFETY: a null pointer is never dereferenced: validation rejects it first.
    hipfp8::HpSrc::F32(unsafe { Src::from_raw(std::ptr::null(), n, Loc::Host) })
}
fn device_f32<'a>(x: &'a [f32]) -> hipfp8::HpSrc<'a> {
    // SAFETY: labelled device memory on a CPU context is rejected before any access.
    hipfp8::HpSrc::F32(unsafe { Src::from_raw(x.as_ptr(), x.len(), Loc::Device) })
}

#[test]
fn quant_family_errors() {
    let ctx = Context::cpu();
    let x = vec![1.0f32; 64];
    let (mut o, mut s) = (vec![SU; 64], vec![SF; 64]);
    let offs = vec![2i32, 4];
    // InvalidShape: a zero reduced dimension.
    let r = ctx.colwise_3d(
        &p(),
        2,
        0,
        2,
        (&x).into(),
        (&mut o).into(),
        (&mut s).into(),
        S,
    );
    assert!(matches!(r, Err(Error::InvalidShape(_))), "{r:?}");
    let r = ctx.rowwise_3d_transpose_rhs(
        &p(),
        2,
        2,
        0,
        (&x).into(),
        (&mut o).into(),
        (&mut s).into(),
        S,
    );
    assert!(matches!(r, Err(Error::InvalidShape(_))), "{r:?}");
    // SizeOverflow
    let r = ctx.blockwise_1x128(
        &p(),
        usize::MAX,
        3,
        (&x).into(),
        (&mut o).into(),
        (&mut s).into(),
        S,
    );
    assert!(matches!(r, Err(Error::SizeOverflow(_))), "{r:?}");
    let r = ctx.per_group_colwise(
        &p(),
        usize::MAX / 2,
        4,
        (&x).into(),
        (&offs).into(),
        (&mut o).into(),
        (&mut s).into(),
        S,
    );
    assert!(matches!(r, Err(Error::SizeOverflow(_))), "{r:?}");
    // NullPointer
    let r = ctx.blockwise_128x128(
        &p(),
        4,
        4,
        null_f32(16),
        (&mut o).into(),
        (&mut s).into(),
        S,
    );
    assert_eq!(r, Err(Error::NullPointer("x")));
    // WrongLocation
    let r = ctx.per_group_rowwise(
        &p(),
        4,
        4,
        device_f32(&x),
        (&offs).into(),
        (&mut o).into(),
        (&mut s).into(),
        S,
    );
    assert!(matches!(r, Err(Error::WrongLocation(_))), "{r:?}");
    // InputTooSmall / OutputTooSmall
    let mut am = vec![SF; 1];
    let r = ctx.tensorwise(
        &p(),
        65,
        (&x).into(),
        (&mut o).into(),
        (&mut s[..1]).into(),
        (&mut am).into(),
        S,
    );
    assert!(
        matches!(r, Err(Error::InputTooSmall { what: "x", .. })),
        "{r:?}"
    );
    let r = ctx.per_group_colwise(
        &p(),
        8,
        8,
        (&x).into(),
        (&offs).into(),
        (&mut o[..63]).into(),
        (&mut s).into(),
        S,
    );
    assert!(
        matches!(r, Err(Error::OutputTooSmall { what: "out", .. })),
        "{r:?}"
    );
    let r = ctx.per_group_colwise(
        &p(),
        8,
        8,
        (&x).into(),
        (&offs).into(),
        (&mut o).into(),
        (&mut s[..15]).into(),
        S,
    );
    assert!(
        matches!(r, Err(Error::OutputTooSmall { what: "scales", .. })),
        "{r:?}"
    );
    // InvalidOffsets: decreasing, negative, past the extent.
    for bad in [vec![4i32, 2], vec![-1], vec![9]] {
        let r = ctx.per_group_colwise(
            &p(),
            8,
            8,
            (&x).into(),
            (&bad).into(),
            (&mut o).into(),
            (&mut s).into(),
            S,
        );
        assert!(matches!(r, Err(Error::InvalidOffsets(_))), "{bad:?}: {r:?}");
        let (mut o2, mut s2) = (vec![SU; 64], vec![SF; 16]);
        let r = ctx.per_group_colwise_dual(
            &p(),
            8,
            4,
            4,
            (&x[..32]).into(),
            (&x[..32]).into(),
            (&bad).into(),
            (&mut o[..32]).into(),
            (&mut s[..8]).into(),
            (&mut o2[..32]).into(),
            (&mut s2[..8]).into(),
            S,
        );
        assert!(matches!(r, Err(Error::InvalidOffsets(_))), "{bad:?}: {r:?}");
        untouched(&o2, &s2);
        let r = ctx.per_group_rowwise(
            &p(),
            8,
            8,
            (&x).into(),
            (&bad).into(),
            (&mut o).into(),
            (&mut s).into(),
            S,
        );
        assert!(matches!(r, Err(Error::InvalidOffsets(_))), "{bad:?}: {r:?}");
    }
    // rowwise_2d_padded: m_cap too small for the worst case; bad offsets; padded_offs short.
    let mut po = vec![-1i32; 2];
    let r = ctx.rowwise_2d_padded(
        &p(),
        4,
        4,
        33,
        (&x).into(),
        (&offs).into(),
        (&mut o).into(),
        (&mut s).into(),
        (&mut po).into(),
        S,
    );
    assert!(matches!(r, Err(Error::InvalidShape(_))), "{r:?}");
    let (mut ob, mut sb) = (vec![SU; 34 * 4], vec![SF; 34]);
    let r = ctx.rowwise_2d_padded(
        &p(),
        4,
        4,
        34,
        (&x).into(),
        (&[3i32, 2][..]).into(),
        (&mut ob).into(),
        (&mut sb).into(),
        (&mut po).into(),
        S,
    );
    assert!(matches!(r, Err(Error::InvalidOffsets(_))), "{r:?}");
    let r = ctx.rowwise_2d_padded(
        &p(),
        4,
        4,
        34,
        (&x).into(),
        (&offs).into(),
        (&mut ob).into(),
        (&mut sb).into(),
        (&mut po[..1]).into(),
        S,
    );
    assert!(
        matches!(
            r,
            Err(Error::OutputTooSmall {
                what: "padded_offs",
                ..
            })
        ),
        "{r:?}"
    );
    untouched(&ob, &sb);
    assert_eq!(po, vec![-1, -1]);
    untouched(&o, &s);
    // And the same buffers do get written by a valid call (the sentinel check is not vacuous).
    ctx.per_group_colwise(
        &p(),
        8,
        8,
        (&x).into(),
        (&offs).into(),
        (&mut o).into(),
        (&mut s).into(),
        S,
    )
    .unwrap();
    assert!(o[..4].iter().all(|&b| b != SU) && s[0] != SF);
}

#[test]
fn cast_transpose_errors() {
    let ctx = Context::cpu();
    let x = vec![2.0f32; 64];
    let (mut o, mut ot, mut s, mut st) = (vec![SU; 64], vec![SU; 64], vec![SF; 8], vec![SF; 8]);
    macro_rules! call {
        ($sc:expr, $m:expr, $k:expr, $x:expr, $o:expr, $ot:expr, $s:expr, $st:expr) => {
            ctx.cast_transpose(&p(), $sc, $m, $k, $x, $o, $ot, $s, $st, S)
        };
    }
    let r = call!(
        Scaling::Rowwise,
        8,
        0,
        (&x).into(),
        (&mut o).into(),
        (&mut ot).into(),
        (&mut s).into(),
        (&mut st).into()
    );
    assert!(matches!(r, Err(Error::InvalidShape(_))), "{r:?}");
    let r = call!(
        Scaling::Tensorwise,
        usize::MAX,
        2,
        (&x).into(),
        (&mut o).into(),
        (&mut ot).into(),
        (&mut s).into(),
        (&mut st).into()
    );
    assert!(matches!(r, Err(Error::SizeOverflow(_))), "{r:?}");
    let r = call!(
        Scaling::Rowwise,
        8,
        8,
        null_f32(64),
        (&mut o).into(),
        (&mut ot).into(),
        (&mut s).into(),
        (&mut st).into()
    );
    assert_eq!(r, Err(Error::NullPointer("x")));
    let r = call!(
        Scaling::Rowwise,
        8,
        8,
        device_f32(&x),
        (&mut o).into(),
        (&mut ot).into(),
        (&mut s).into(),
        (&mut st).into()
    );
    assert!(matches!(r, Err(Error::WrongLocation(_))), "{r:?}");
    let r = call!(
        Scaling::Rowwise,
        8,
        9,
        (&x).into(),
        (&mut o).into(),
        (&mut ot).into(),
        (&mut s).into(),
        (&mut st).into()
    );
    assert!(matches!(r, Err(Error::InputTooSmall { .. })), "{r:?}");
    let r = call!(
        Scaling::Rowwise,
        8,
        8,
        (&x).into(),
        (&mut o).into(),
        (&mut ot[..60]).into(),
        (&mut s).into(),
        (&mut st).into()
    );
    assert!(
        matches!(r, Err(Error::OutputTooSmall { what: "out_t", .. })),
        "{r:?}"
    );
    let r = call!(
        Scaling::Rowwise,
        8,
        8,
        (&x).into(),
        (&mut o).into(),
        (&mut ot).into(),
        (&mut s).into(),
        (&mut st[..7]).into()
    );
    assert!(
        matches!(
            r,
            Err(Error::OutputTooSmall {
                what: "scales_t",
                ..
            })
        ),
        "{r:?}"
    );
    untouched(&o, &s);
    untouched(&ot, &st);
    // Tensorwise needs only one scale each.
    call!(
        Scaling::Tensorwise,
        8,
        8,
        (&x).into(),
        (&mut o).into(),
        (&mut ot).into(),
        (&mut s[..1]).into(),
        (&mut st[..1]).into()
    )
    .unwrap();
}

#[test]
fn scaled_cast_errors() {
    let ctx = Context::cpu();
    let x = vec![2.0f32; 64];
    let scale = vec![1.0f32];
    let (mut o, mut ot, mut a) = (vec![SU; 64], vec![SU; 64], vec![SF]);
    let pow2 = CastParams::new(Fp8Format::E4M3Fn, true);
    macro_rules! ct {
        ($p:expr, $m:expr, $k:expr, $x:expr, $sc:expr, $o:expr, $ot:expr, $a:expr) => {
            ctx.cast_transpose_scaled($p, $m, $k, $x, $sc, $o, $ot, $a, S)
        };
    }
    // pow2 rounding applies to derived scales only: refused, not ignored.
    let r = ct!(
        &pow2,
        8,
        8,
        (&x).into(),
        (&scale).into(),
        (&mut o).into(),
        (&mut ot).into(),
        (&mut a).into()
    );
    assert!(matches!(r, Err(Error::InvalidEnum(_))), "{r:?}");
    let r = ctx.tensorwise_scaled(
        &pow2,
        64,
        (&x).into(),
        (&scale).into(),
        (&mut o).into(),
        (&mut a).into(),
        S,
    );
    assert!(matches!(r, Err(Error::InvalidEnum(_))), "{r:?}");
    // The scale is an input of one element.
    let r = ct!(
        &p(),
        8,
        8,
        (&x).into(),
        (&scale[..0]).into(),
        (&mut o).into(),
        (&mut ot).into(),
        (&mut a).into()
    );
    assert!(
        matches!(r, Err(Error::InputTooSmall { what: "scale", .. })),
        "{r:?}"
    );
    let r = ctx.tensorwise_scaled(
        &p(),
        64,
        (&x).into(),
        (&scale[..0]).into(),
        (&mut o).into(),
        (&mut a).into(),
        S,
    );
    assert!(
        matches!(r, Err(Error::InputTooSmall { what: "scale", .. })),
        "{r:?}"
    );
    let r = ct!(
        &p(),
        8,
        0,
        (&x).into(),
        (&scale).into(),
        (&mut o).into(),
        (&mut ot).into(),
        (&mut a).into()
    );
    assert!(matches!(r, Err(Error::InvalidShape(_))), "{r:?}");
    let r = ct!(
        &p(),
        8,
        8,
        device_f32(&x),
        (&scale).into(),
        (&mut o).into(),
        (&mut ot).into(),
        (&mut a).into()
    );
    assert!(matches!(r, Err(Error::WrongLocation(_))), "{r:?}");
    let r = ct!(
        &p(),
        8,
        8,
        (&x).into(),
        (&scale).into(),
        (&mut o).into(),
        (&mut ot[..63]).into(),
        (&mut a).into()
    );
    assert!(
        matches!(r, Err(Error::OutputTooSmall { what: "out_t", .. })),
        "{r:?}"
    );
    let r = ct!(
        &p(),
        8,
        8,
        (&x).into(),
        (&scale).into(),
        (&mut o).into(),
        (&mut ot).into(),
        (&mut a[..0]).into()
    );
    assert!(
        matches!(r, Err(Error::OutputTooSmall { what: "amax", .. })),
        "{r:?}"
    );
    let r = ctx.tensorwise_scaled(
        &p(),
        65,
        (&x).into(),
        (&scale).into(),
        (&mut o).into(),
        (&mut a).into(),
        S,
    );
    assert!(
        matches!(r, Err(Error::InputTooSmall { what: "x", .. })),
        "{r:?}"
    );
    untouched(&o, &a);
    untouched(&ot, &a);
    ct!(
        &p(),
        8,
        8,
        (&x).into(),
        (&scale).into(),
        (&mut o).into(),
        (&mut ot).into(),
        (&mut a).into()
    )
    .unwrap();
    assert_eq!(a[0], 2.0);
    assert!(
        o.iter()
            .chain(&ot)
            .all(|&b| b == Fp8Format::E4M3Fn.encode(2.0))
    );
}

#[test]
fn mx_errors() {
    let ctx = Context::cpu();
    let x = vec![1.0f32; 64];
    let (mut o, mut s) = (vec![SU; 64], vec![SU; 8]);
    let mp = MxParams::new(Fp8Format::E4M3Fn, MxRounding::Floor);
    // UnsupportedFormat: FNUZ elements, explicitly or through Auto on an FNUZ-native context.
    for f in [Fp8Format::E4M3FnUz, Fp8Format::E5M2FnUz] {
        let r = ctx.mxfp8_dim0(
            &MxParams::new(f, MxRounding::Rceil),
            2,
            32,
            (&x).into(),
            (&mut o).into(),
            (&mut s).into(),
            S,
        );
        assert!(matches!(r, Err(Error::UnsupportedFormat(_))), "{r:?}");
    }
    let fnuz = Context::cpu_with_fnuz_native(true);
    let r = fnuz.mxfp8_dim1(
        &MxParams::default(),
        32,
        2,
        (&x).into(),
        (&mut o).into(),
        (&mut s).into(),
        S,
    );
    assert!(matches!(r, Err(Error::UnsupportedFormat(_))), "{r:?}");
    let r = ctx.mxfp8_dim0(
        &mp,
        usize::MAX,
        64,
        (&x).into(),
        (&mut o).into(),
        (&mut s).into(),
        S,
    );
    assert!(matches!(r, Err(Error::SizeOverflow(_))), "{r:?}");
    let r = ctx.mxfp8_dim0(
        &mp,
        2,
        32,
        null_f32(64),
        (&mut o).into(),
        (&mut s).into(),
        S,
    );
    assert_eq!(r, Err(Error::NullPointer("x")));
    let r = ctx.mxfp8_dim1(
        &mp,
        32,
        2,
        device_f32(&x),
        (&mut o).into(),
        (&mut s).into(),
        S,
    );
    assert!(matches!(r, Err(Error::WrongLocation(_))), "{r:?}");
    let r = ctx.mxfp8_dim1(&mp, 33, 2, (&x).into(), (&mut o).into(), (&mut s).into(), S);
    assert!(matches!(r, Err(Error::InputTooSmall { .. })), "{r:?}");
    // dim1 of (64, 1): scales (1, 2); dim0 of (2, 33): scales (2, 2) -> 4 needed.
    let r = ctx.mxfp8_dim0(
        &mp,
        1,
        64,
        (&x).into(),
        (&mut o).into(),
        (&mut s[..1]).into(),
        S,
    );
    assert!(
        matches!(r, Err(Error::OutputTooSmall { what: "scales", .. })),
        "{r:?}"
    );
    let r = ctx.mxfp8_dim1(
        &mp,
        64,
        1,
        (&x).into(),
        (&mut o[..63]).into(),
        (&mut s).into(),
        S,
    );
    assert!(
        matches!(r, Err(Error::OutputTooSmall { what: "out", .. })),
        "{r:?}"
    );
    assert!(
        o.iter().all(|&b| b == SU) && s.iter().all(|&b| b == SU),
        "written on error"
    );
}

#[test]
fn gemm_errors() {
    let ctx = Context::cpu();
    let gp = GemmParams::new(Fp8Format::E4M3Fn, Fp8Format::E5M2);
    let (m, k, n, e) = (8usize, 4usize, 3usize, 2usize);
    let a = vec![0x38u8; m * k];
    let b = vec![0x3Cu8; e * k * n];
    let sa = vec![1.0f32; m];
    let sb = vec![1.0f32; e * n];
    let offs = vec![3i32, 8];
    let sent = bf16::from_f32(-2.0);
    let mut out = vec![sent; m * n];
    // GroupCountMismatch: offs has 2 entries, E = 3.
    let b3 = vec![0x3Cu8; 3 * k * n];
    let sb3 = vec![1.0f32; 3 * n];
    let r = ctx.grouped_gemm_2d3d(
        &gp,
        m,
        k,
        n,
        3,
        (&a).into(),
        (&b3).into(),
        (&offs).into(),
        (&sa).into(),
        (&sb3).into(),
        (&mut out).into(),
        S,
    );
    assert_eq!(
        r,
        Err(Error::GroupCountMismatch {
            expected: 3,
            got: 2
        })
    );
    let r = ctx.grouped_gemm_2d3d(
        &gp,
        m,
        0,
        n,
        e,
        (&a).into(),
        (&b).into(),
        (&offs).into(),
        (&sa).into(),
        (&sb).into(),
        (&mut out).into(),
        S,
    );
    assert!(matches!(r, Err(Error::InvalidShape(_))), "{r:?}");
    let r = ctx.grouped_gemm_2d3d(
        &gp,
        usize::MAX,
        k,
        n,
        e,
        (&a).into(),
        (&b).into(),
        (&offs).into(),
        (&sa).into(),
        (&sb).into(),
        (&mut out).into(),
        S,
    );
    assert!(matches!(r, Err(Error::SizeOverflow(_))), "{r:?}");
    // SAFETY: null is rejected before use.
    let null_a: Src<'_, u8> = unsafe { Src::from_raw(std::ptr::null(), m * k, Loc::Host) };
    let r = ctx.grouped_gemm_2d3d(
        &gp,
        m,
        k,
        n,
        e,
        null_a,
        (&b).into(),
        (&offs).into(),
        (&sa).into(),
        (&sb).into(),
        (&mut out).into(),
        S,
    );
    assert_eq!(r, Err(Error::NullPointer("a")));
    // SAFETY: device-labelled memory is rejected by a CPU context before use.
    let dev_offs: Src<'_, i32> = unsafe { Src::from_raw(offs.as_ptr(), 2, Loc::Device) };
    let r = ctx.grouped_gemm_2d3d(
        &gp,
        m,
        k,
        n,
        e,
        (&a).into(),
        (&b).into(),
        dev_offs,
        (&sa).into(),
        (&sb).into(),
        (&mut out).into(),
        S,
    );
    assert!(matches!(r, Err(Error::WrongLocation(_))), "{r:?}");
    let r = ctx.grouped_gemm_2d3d(
        &gp,
        m,
        k,
        n,
        e,
        (&a).into(),
        (&b).into(),
        (&offs).into(),
        (&sa[..7]).into(),
        (&sb).into(),
        (&mut out).into(),
        S,
    );
    assert!(
        matches!(
            r,
            Err(Error::InputTooSmall {
                what: "scale_a",
                ..
            })
        ),
        "{r:?}"
    );
    let r = ctx.grouped_gemm_2d3d(
        &gp,
        m,
        k,
        n,
        e,
        (&a).into(),
        (&b).into(),
        (&offs).into(),
        (&sa).into(),
        (&sb).into(),
        (&mut out[..23]).into(),
        S,
    );
    assert!(
        matches!(r, Err(Error::OutputTooSmall { what: "out", .. })),
        "{r:?}"
    );
    let r = ctx.grouped_gemm_2d3d(
        &gp,
        m,
        k,
        n,
        e,
        (&a).into(),
        (&b).into(),
        (&[5i32, 3][..]).into(),
        (&sa).into(),
        (&sb).into(),
        (&mut out).into(),
        S,
    );
    assert!(matches!(r, Err(Error::InvalidOffsets(_))), "{r:?}");
    // 2d2d: a (N=3, Mt=8), b (Mt=8, K=4), offs past Mt.
    let (nn, mt, kk) = (3usize, 8usize, 4usize);
    let a2 = vec![0x38u8; nn * mt];
    let b2 = vec![0x38u8; mt * kk];
    let (sa2, sb2) = (vec![1.0f32; 2 * nn], vec![1.0f32; 2 * kk]);
    let mut out2 = vec![sent; 2 * nn * kk];
    let r = ctx.grouped_gemm_2d2d(
        &gp,
        nn,
        mt,
        kk,
        (&a2).into(),
        (&b2).into(),
        (&[4i32, 9][..]).into(),
        (&sa2).into(),
        (&sb2).into(),
        (&mut out2).into(),
        S,
    );
    assert!(matches!(r, Err(Error::InvalidOffsets(_))), "{r:?}");
    let r = ctx.grouped_gemm_2d2d(
        &gp,
        nn,
        mt,
        kk,
        (&a2).into(),
        (&b2).into(),
        (&offs).into(),
        (&sa2).into(),
        (&sb2[..7]).into(),
        (&mut out2).into(),
        S,
    );
    assert!(
        matches!(
            r,
            Err(Error::InputTooSmall {
                what: "scale_b",
                ..
            })
        ),
        "{r:?}"
    );
    assert!(
        out.iter().chain(&out2).all(|&v| v == sent),
        "written on error"
    );
    // The valid calls write.
    ctx.grouped_gemm_2d3d(
        &gp,
        m,
        k,
        n,
        e,
        (&a).into(),
        (&b).into(),
        (&offs).into(),
        (&sa).into(),
        (&sb).into(),
        (&mut out).into(),
        S,
    )
    .unwrap();
    // 0x38 = 1.0 in E4M3FN, 0x3C = 1.0 in E5M2: each output is K = 4.
    assert!(out.iter().all(|&v| v.to_f32() == 4.0));
}

#[test]
fn colwise_dual_padded_errors() {
    let ctx = Context::cpu();
    let (m, k1, k2) = (8usize, 3usize, 2usize);
    let offs = [3i32, 8];
    let x1 = vec![1.0f32; m * k1];
    let x2 = vec![2.0f32; m * k2];
    let cap = 48usize; // round_up(8 + 15*2, 16)
    let (mut o1, mut s1) = (vec![SU; cap * k1], vec![SF; 2 * k1]);
    let (mut o2, mut s2) = (vec![SU; cap * k2], vec![SF; 2 * k2]);
    let mut po = vec![-1i32; 2];
    let mut call = |m_cap: usize, offs: &[i32], po_len: usize, k1: usize, k2: usize| {
        ctx.per_group_colwise_dual_padded(
            &p(),
            m,
            k1,
            k2,
            m_cap,
            (&x1[..m * k1]).into(),
            (&x2[..m * k2]).into(),
            offs.into(),
            (&mut o1).into(),
            (&mut s1).into(),
            (&mut o2).into(),
            (&mut s2).into(),
            (&mut po[..po_len]).into(),
            S,
        )
    };
    // m_cap below the worst case m + 15*G = 38 (even when these offsets would fit in 32).
    let r = call(32, &offs, 2, k1, k2);
    assert!(
        matches!(&r, Err(Error::InvalidShape(e)) if e.contains("m + 15*G")),
        "{r:?}"
    );
    // m_cap >= m + 15*G but not a multiple of 16: the message names the m_cap to pass.
    let r = call(38, &offs, 2, k1, k2);
    assert!(
        matches!(&r, Err(Error::InvalidShape(e)) if e.contains("multiple of 16") && e.contains("48")),
        "{r:?}"
    );
    // m_cap beyond int32 (k1 = k2 = 0 so no output length rejects it first).
    let r = call(1 << 31, &offs, 2, 0, 0);
    assert!(matches!(r, Err(Error::SizeOverflow(_))), "{r:?}");
    // bad offsets, padded_offs too short
    let r = call(cap, &[5, 3], 2, k1, k2);
    assert!(matches!(r, Err(Error::InvalidOffsets(_))), "{r:?}");
    let r = call(cap, &[3, 9], 2, k1, k2);
    assert!(matches!(r, Err(Error::InvalidOffsets(_))), "{r:?}");
    let r = call(cap, &offs, 1, k1, k2);
    assert!(
        matches!(
            r,
            Err(Error::OutputTooSmall {
                what: "padded_offs",
                ..
            })
        ),
        "{r:?}"
    );
    // an output sized for m rows, not m_cap
    let r = ctx.per_group_colwise_dual_padded(
        &p(),
        m,
        k1,
        k2,
        cap,
        (&x1).into(),
        (&x2).into(),
        (&offs[..]).into(),
        (&mut vec![SU; m * k1]).into(),
        (&mut vec![SF; 2 * k1]).into(),
        (&mut vec![SU; cap * k2]).into(),
        (&mut vec![SF; 2 * k2]).into(),
        (&mut vec![-1i32; 2]).into(),
        S,
    );
    assert!(
        matches!(r, Err(Error::OutputTooSmall { what: "out1", .. })),
        "{r:?}"
    );
    untouched(&o1, &s1);
    untouched(&o2, &s2);
    assert_eq!(po, vec![-1, -1]);
    // The same buffers are written by a valid call: every byte (data or zero), the scales and
    // the padded END offsets (3 -> 16, 5 -> 16).
    ctx.per_group_colwise_dual_padded(
        &p(),
        m,
        k1,
        k2,
        cap,
        (&x1).into(),
        (&x2).into(),
        (&offs[..]).into(),
        (&mut o1).into(),
        (&mut s1).into(),
        (&mut o2).into(),
        (&mut s2).into(),
        (&mut po).into(),
        S,
    )
    .unwrap();
    assert_eq!(po, vec![16, 32]);
    assert!(o1.iter().chain(&o2).all(|&b| b != SU));
    assert!(s1.iter().chain(&s2).all(|&v| v != SF));
}
