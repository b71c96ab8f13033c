//! The fused MoE C exports (src/ffi/moe.rs) on a CPU context write exactly what the Rust
//! methods (`Context::moe_*`) write for the same arguments: every output byte for byte
//! (scales bit for bit), for bf16 and f32 inputs, two formats, pow2 on and off, forward and
//! dequant scale outputs (HIPFP8_FLAG_DEQUANT_SCALES), shapes whose
//! dimensions all differ (a swapped descriptor field changes the result) and offsets with an
//! empty group. Outputs start as a sentinel on both sides and are compared whole.

use std::mem::size_of;
use std::ptr::null_mut;

use hipfp8::ffi::*;
use hipfp8::moe::DualOut;
use hipfp8::{Context, Fp8Format, HpSrc, MoeCastParams, ScaleOutput, StreamRef, bf16};

use hipfp8_status::*;

mod support;
use support::ffi_ops::{BF16, Ctx, F32, last_error};

const NS: hipStream_t = null_mut();
const SENT_U8: u8 = 0xA5;
const SENT_F32: f32 = -7.25;

/// Deterministic inputs with a spread of magnitudes and signs (and a NaN and an Inf).
fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            match i % 53 {
                7 => f32::NAN,
                19 => f32::INFINITY,
                _ => ((s >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * (1 << (s % 9)) as f32,
            }
        })
        .collect()
}

/// One input as both dtypes.
struct Input {
    f: Vec<f32>,
    b: Vec<bf16>,
}

impl Input {
    fn new(n: usize, seed: u32) -> Input {
        let f = data(n, seed);
        let b = f.iter().map(|&v| bf16::from_f32(v)).collect();
        Input { f, b }
    }
    fn hp(&self, bf: bool) -> HpSrc<'_> {
        if bf {
            self.b[..].into()
        } else {
            self.f[..].into()
        }
    }
    fn ptr(&self, bf: bool) -> (*const std::ffi::c_void, usize) {
        if bf {
            (self.b.as_ptr().cast(), self.b.len())
        } else {
            (self.f.as_ptr().cast(), self.f.len())
        }
    }
}

/// The four outputs of a dual cast (out, scales, out2, scales2).
#[derive(Clone, PartialEq, Debug)]
struct Outs {
    o: Vec<u8>,
    s: Vec<u32>,
    o2: Vec<u8>,
    s2: Vec<u32>,
}

impl Outs {
    fn new(n: usize, s: usize, s2: usize) -> Outs {
        let f = SENT_F32.to_bits();
        Outs {
            o: vec![SENT_U8; n],
            s: vec![f; s],
            o2: vec![SENT_U8; n],
            s2: vec![f; s2],
        }
    }
    /// The f32 scales (stored as bits so that NaNs compare by payload).
    fn sc(v: &mut [u32]) -> &mut [f32] {
        // SAFETY: u32 and f32 have the same size and alignment; every bit pattern is an f32.
        unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), v.len()) }
    }
    fn dual(&mut self) -> DualOut<'_> {
        DualOut {
            out: (&mut self.o[..]).into(),
            scales: Outs::sc(&mut self.s).into(),
            out_col: (&mut self.o2[..]).into(),
            scales_col: Outs::sc(&mut self.s2).into(),
        }
    }
    fn written(&self) -> bool {
        self.o.iter().any(|&b| b != SENT_U8) && self.s2.iter().any(|&v| v != SENT_F32.to_bits())
    }
}

/// Call a C export with its leading arguments, then the four outputs of `$got` and the
/// default stream.
macro_rules! dual_call {
    ($f:ident($($arg:expr),+), $got:ident) => {
        $f(
            $($arg,)+
            $got.o.as_mut_ptr(),
            $got.o.len(),
            $got.s.as_mut_ptr().cast(),
            $got.s.len(),
            $got.o2.as_mut_ptr(),
            $got.o2.len(),
            $got.s2.as_mut_ptr().cast(),
            $got.s2.len(),
            NS,
        )
    };
}

fn ok(st: hipfp8_status, what: &str) {
    assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{what}: {}", last_error());
}

#[test]
fn moe_c_exports_equal_rust_methods() {
    let rust = Context::cpu();
    let c = Ctx::cpu();
    let st = StreamRef::DEFAULT;
    let (e, k, n) = (3usize, 5usize, 7usize);
    let (m, i) = (11usize, 6usize);
    let offs: Vec<i32> = vec![4, 4, 9, 11];
    let g = offs.len();
    let mut cases = 0;
    for (fmt, cfmt) in [
        (Fp8Format::E4M3Fn, hipfp8_format::HIPFP8_FORMAT_E4M3FN),
        (Fp8Format::E5M2, hipfp8_format::HIPFP8_FORMAT_E5M2),
    ] {
        for pow2 in [false, true] {
            for (bf, dq) in [(true, false), (false, false), (true, true), (false, true)] {
                let so = [ScaleOutput::Forward, ScaleOutput::Dequant][dq as usize];
                let p = MoeCastParams::new(fmt, pow2).with_scales(so);
                let dtype = if bf { BF16 } else { F32 };
                let dq_flag = hipfp8_flag::HIPFP8_FLAG_DEQUANT_SCALES as u32;
                let (format, flags) = (cfmt as u32, pow2 as u32 | (dq as u32 * dq_flag));
                let what = format!("{fmt:?} pow2={pow2} bf16={bf} {so:?}");

                // weights (e, k, n)
                let w = Input::new(e * k * n, 1);
                let mut want = Outs::new(e * k * n, e * n, e * k);
                let mut got = want.clone();
                let d = want.dual();
                rust.moe_weights_dual(
                    &p,
                    e,
                    k,
                    n,
                    w.hp(bf),
                    d.out,
                    d.scales,
                    d.out_col,
                    d.scales_col,
                    st,
                )
                .unwrap();
                let desc = hipfp8_cast_3d_desc {
                    size: size_of::<hipfp8_cast_3d_desc>(),
                    input_dtype: dtype,
                    format,
                    flags,
                    e,
                    k,
                    n,
                };
                let (x, xl) = w.ptr(bf);
                let r = dual_call!(hipfp8_moe_weights_dual(c.0, &desc, x, xl), got);
                ok(r, "hipfp8_moe_weights_dual");
                assert!(want.written(), "weights {what}: nothing written");
                assert_eq!(got, want, "hipfp8_moe_weights_dual {what}");

                // activations (m, k)
                let a = Input::new(m * k, 2);
                let mut want = Outs::new(m * k, m, g * k);
                let mut got = want.clone();
                rust.moe_act_dual(&p, m, k, a.hp(bf), (&offs).into(), want.dual(), st)
                    .unwrap();
                let desc = hipfp8_cast_2d_desc {
                    size: size_of::<hipfp8_cast_2d_desc>(),
                    input_dtype: dtype,
                    format,
                    flags,
                    m,
                    k,
                };
                let (x, xl) = a.ptr(bf);
                let r = dual_call!(
                    hipfp8_moe_act_dual(c.0, &desc, x, xl, offs.as_ptr(), g),
                    got
                );
                ok(r, "hipfp8_moe_act_dual");
                assert!(want.written(), "act {what}: nothing written");
                assert_eq!(got, want, "hipfp8_moe_act_dual {what}");

                // SwiGLU forward (m, i) and backward
                let desc = hipfp8_moe_swiglu_desc {
                    size: size_of::<hipfp8_moe_swiglu_desc>(),
                    input_dtype: dtype,
                    format,
                    flags,
                    m,
                    i,
                };
                let gu = Input::new(m * 2 * i, 3);
                let mut want = Outs::new(m * i, m, g * i);
                let mut got = want.clone();
                rust.moe_swiglu_quant(&p, m, i, gu.hp(bf), (&offs).into(), want.dual(), st)
                    .unwrap();
                let (x, xl) = gu.ptr(bf);
                let r = dual_call!(
                    hipfp8_moe_swiglu_quant(c.0, &desc, x, xl, offs.as_ptr(), g),
                    got
                );
                ok(r, "hipfp8_moe_swiglu_quant");
                assert!(want.written(), "swiglu {what}: nothing written");
                assert_eq!(got, want, "hipfp8_moe_swiglu_quant {what}");

                let dh = Input::new(m * i, 4);
                let mut want = Outs::new(m * 2 * i, m, g * 2 * i);
                let mut got = want.clone();
                let o = want.dual();
                rust.moe_swiglu_bwd_quant(&p, m, i, dh.hp(bf), gu.hp(bf), (&offs).into(), o, st)
                    .unwrap();
                let (y, yl) = dh.ptr(bf);
                let r = dual_call!(
                    hipfp8_moe_swiglu_bwd_quant(c.0, &desc, y, yl, x, xl, offs.as_ptr(), g),
                    got
                );
                ok(r, "hipfp8_moe_swiglu_bwd_quant");
                assert!(want.written(), "swiglu bwd {what}: nothing written");
                assert_eq!(got, want, "hipfp8_moe_swiglu_bwd_quant {what}");
                cases += 4;
            }
        }
    }
    assert_eq!(cases, 64);
}

/// The backward's two inputs share the descriptor's one dtype in C; in Rust two dtypes are
/// refused (`NotSupported`) with nothing written.
#[test]
fn swiglu_bwd_refuses_two_dtypes_in_rust() {
    let rust = Context::cpu();
    let (m, i) = (4usize, 3usize);
    let offs = vec![2, 4];
    let dh = Input::new(m * i, 5);
    let gu = Input::new(m * 2 * i, 6);
    let mut o = Outs::new(m * 2 * i, m, 2 * 2 * i);
    let p = MoeCastParams::new(Fp8Format::E4M3Fn, false);
    let r = rust.moe_swiglu_bwd_quant(
        &p,
        m,
        i,
        dh.hp(true),
        gu.hp(false),
        (&offs).into(),
        o.dual(),
        StreamRef::DEFAULT,
    );
    let msg = format!("{r:?}");
    assert!(matches!(r, Err(hipfp8::Error::NotSupported(_))), "{msg}");
    assert!(msg.contains("grad_h") && msg.contains("gu"), "{msg}");
    assert_eq!(o, Outs::new(m * 2 * i, m, 2 * 2 * i), "written on failure");
}
