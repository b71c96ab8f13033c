//! The fused MoE casts on [`Context`] (issue 14): each reads its input once per output family
//! and writes what the MoE grouped GEMMs take, bit-identical to the composition of the
//! single casts it replaces (docs/OPS.md, "Fused MoE casts"; definitions in
//! `reference/moe.rs`). Each method validates every argument first (nothing is written on
//! error), then runs exactly one backend.

use std::ffi::c_void;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::params::CastParams;
use crate::reference;
use crate::runtime::check_status;
use crate::sys;
use crate::validate::{checked_mul, require_nonzero};
use crate::view::{Dst, HpSrc, Src, StreamRef, with_hp};
use crate::workspace::Kind;

/// The outputs of a dual cast of an (m, k) operand: `out` (m*k, row-major) with `scales[m]`
/// (per row), and `out_col` (m*k, column-major `[c*m + r]`) with `scales_col[g*k]` (per
/// group and column).
pub struct DualOut<'a> {
    pub out: Dst<'a, u8>,
    pub scales: Dst<'a, f32>,
    pub out_col: Dst<'a, u8>,
    pub scales_col: Dst<'a, f32>,
}

/// Host slices of a [`DualOut`].
struct DualHost<'a> {
    out: &'a mut [u8],
    scales: &'a mut [f32],
    out_col: &'a mut [u8],
    scales_col: &'a mut [f32],
}

/// Launcher pointers of a [`DualOut`].
struct DualDev {
    out: *mut u8,
    scales: *mut f32,
    out_col: *mut u8,
    scales_col: *mut f32,
}

impl<'a> DualOut<'a> {
    /// Check the four views for an (m, k) operand in `g` groups.
    fn check(&mut self, ctx: &Context, m: usize, k: usize, g: usize) -> Result<()> {
        let mk = checked_mul("m*k", m, k)?;
        let gk = checked_mul("g*k", g, k)?;
        ctx.check_dst("out", &mut self.out, mk)?;
        ctx.check_dst("scales", &mut self.scales, m)?;
        ctx.check_dst("out_col", &mut self.out_col, mk)?;
        ctx.check_dst("scales_col", &mut self.scales_col, gk)
    }
    fn dev(&mut self) -> DualDev {
        DualDev {
            out: self.out.as_mut_ptr(),
            scales: self.scales.as_mut_ptr(),
            out_col: self.out_col.as_mut_ptr(),
            scales_col: self.scales_col.as_mut_ptr(),
        }
    }
    fn host(&mut self) -> DualHost<'a> {
        DualHost {
            out: self.out.host_slice_mut(),
            scales: self.scales.host_slice_mut(),
            out_col: self.out_col.host_slice_mut(),
            scales_col: self.scales_col.host_slice_mut(),
        }
    }
}

impl DualDev {
    fn ptrs(&self) -> [(&'static str, *const c_void); 4] {
        [
            ("out", self.out as *const c_void),
            ("scales", self.scales as *const c_void),
            ("out_col", self.out_col as *const c_void),
            ("scales_col", self.scales_col as *const c_void),
        ]
    }
}

impl Context {
    /// Device bytes of zeroed workspace the grouped MoE casts need for `groups` groups.
    pub fn moe_workspace_size(&self, groups: usize) -> Result<usize> {
        let mut bytes = 0u64;
        // SAFETY: arithmetic on the argument; writes the out-pointer only.
        check_status("moe workspace size", unsafe {
            sys::hipfp8_moe_workspace_bytes(groups as i64, &mut bytes)
        })?;
        Ok(bytes as usize)
    }

    /// Run `f` with `stream`'s zeroed workspace for `groups` groups (null when none).
    fn with_moe_workspace(
        &self,
        groups: usize,
        stream: StreamRef,
        f: impl FnOnce(*mut c_void) -> Result<()>,
    ) -> Result<()> {
        let bytes = self.moe_workspace_size(groups)?;
        if bytes == 0 {
            return f(std::ptr::null_mut());
        }
        self.workspace
            .with(self, Kind::Zeroed, bytes, stream, |ws, _| f(ws))
    }

    /// Expert weights (E,K,N) column-major (`x[e*K*N + n*K + k]`) to both grouped-GEMM
    /// operands from one call: `out` / `scales` exactly as [`Context::colwise_3d`] writes them
    /// (forward B, `scales[e*N + n]` over k) and `out_t` / `scales_t` exactly as
    /// [`Context::rowwise_3d_transpose_rhs`] (dgrad B, `out_t[e*N*K + k*N + n]`,
    /// `scales_t[e*K + k]` over n). k and n must be > 0.
    pub fn moe_weights_dual(
        &self,
        p: &CastParams,
        e: usize,
        k: usize,
        n: usize,
        x: HpSrc<'_>,
        mut out: Dst<'_, u8>,
        mut scales: Dst<'_, f32>,
        mut out_t: Dst<'_, u8>,
        mut scales_t: Dst<'_, f32>,
        stream: StreamRef,
    ) -> Result<()> {
        let en = checked_mul("e*n", e, n)?;
        let ek = checked_mul("e*k", e, k)?;
        let ekn = checked_mul("e*k*n", en, k)?;
        require_nonzero("k", k)?;
        require_nonzero("n", n)?;
        self.check_hp("x", &x, ekn)?;
        self.check_dst("out", &mut out, ekn)?;
        self.check_dst("scales", &mut scales, en)?;
        self.check_dst("out_t", &mut out_t, ekn)?;
        self.check_dst("scales_t", &mut scales_t, ek)?;
        let fmt = self.resolve(p.format);
        let (xp, dtype) = x.raw_parts();
        let (o, s, ot, st) = (
            out.as_mut_ptr(),
            scales.as_mut_ptr(),
            out_t.as_mut_ptr(),
            scales_t.as_mut_ptr(),
        );
        let ptrs = [
            ("x", xp),
            ("out", o as *const c_void),
            ("scales", s as *const c_void),
            ("out_t", ot as *const c_void),
            ("scales_t", st as *const c_void),
        ];
        self.dispatch(
            ekn == 0,
            &ptrs,
            || {
                let (o, s) = (out.host_slice_mut(), scales.host_slice_mut());
                let (ot, st) = (out_t.host_slice_mut(), scales_t.host_slice_mut());
                with_hp!(x, |x| reference::moe::weights_dual(
                    fmt,
                    p.pow2_scales,
                    e,
                    k,
                    n,
                    x,
                    o,
                    s,
                    ot,
                    st
                ))
            },
            || {
                // SAFETY: the views were checked above: device memory of this context's GPU
                // with e*k*n inputs, e*k*n bytes in each output, e*n and e*k scales; the
                // launcher only queues work on `stream`.
                let rc = unsafe {
                    sys::hipfp8_moe_weights_dual_launch(
                        xp,
                        o,
                        s,
                        ot,
                        st,
                        e as i64,
                        k as i64,
                        n as i64,
                        fmt as i32,
                        p.pow2_scales as i32,
                        dtype,
                        stream.0,
                    )
                };
                check_status("moe_weights_dual", rc)
            },
        )
    }

    /// Activations or gradients x (M,K) row-major with END offsets along M to both grouped
    /// GEMM operands from one call: `o.out` / `o.scales` exactly as [`Context::rowwise_2d`]
    /// writes them (every row, the 2D x 3D operand) and `o.out_col` / `o.scales_col` exactly
    /// as [`Context::per_group_colwise`] (the 2D x 2D wgrad operand; rows past `offs[G-1]`
    /// are not written there). k must be > 0.
    pub fn moe_act_dual(
        &self,
        p: &CastParams,
        m: usize,
        k: usize,
        x: HpSrc<'_>,
        offs: Src<'_, i32>,
        mut o: DualOut<'_>,
        stream: StreamRef,
    ) -> Result<()> {
        let g = offs.len();
        let mk = checked_mul("m*k", m, k)?;
        require_nonzero("k", k)?;
        self.check_hp("x", &x, mk)?;
        o.check(self, m, k, g)?;
        self.check_offsets(&offs, m)?;
        let fmt = self.resolve(p.format);
        let (xp, dtype) = x.raw_parts();
        let d = o.dev();
        let [p0, p1, p2, p3] = d.ptrs();
        let ptrs = [
            ("x", xp),
            ("offs", offs.as_ptr() as *const c_void),
            p0,
            p1,
            p2,
            p3,
        ];
        self.dispatch(
            m == 0 && g == 0,
            &ptrs,
            || {
                let h = o.host();
                let offs = offs.host_slice();
                with_hp!(x, |x| reference::moe::act_dual(
                    fmt,
                    p.pow2_scales,
                    m,
                    k,
                    x,
                    offs,
                    h.out,
                    h.scales,
                    h.out_col,
                    h.scales_col
                ))
            },
            || {
                self.with_moe_workspace(g, stream, |ws| {
                    // SAFETY: views checked above (device memory of this GPU: m*k inputs and
                    // bytes per output, m and g*k scales, g offsets the kernels clamp and never
                    // read on the host); `ws` is the stream's zeroed workspace of the size the
                    // launcher asked for; work is only queued on `stream`.
                    let rc = unsafe {
                        sys::hipfp8_moe_act_dual_launch(
                            xp,
                            offs.as_ptr(),
                            d.out,
                            d.scales,
                            d.out_col,
                            d.scales_col,
                            m as i64,
                            k as i64,
                            g as i64,
                            fmt as i32,
                            p.pow2_scales as i32,
                            dtype,
                            ws,
                            stream.0,
                        )
                    };
                    check_status("moe_act_dual", rc)
                })
            },
        )
    }

    /// SwiGLU forward fused with the down projection's casts: `gu` (M, 2I) row-major is the
    /// gate/up GEMM output (gate = columns `[0, I)`, up = `[I, 2I)`); `h = silu(gate) * up`
    /// (M, I), computed in the input dtype's arithmetic as torch's `F.silu(g) * u`
    /// (`reference::moe::swiglu_h`), is cast as [`Context::moe_act_dual`] casts x, without
    /// being stored. i must be > 0.
    pub fn moe_swiglu_quant(
        &self,
        p: &CastParams,
        m: usize,
        i: usize,
        gu: HpSrc<'_>,
        offs: Src<'_, i32>,
        mut o: DualOut<'_>,
        stream: StreamRef,
    ) -> Result<()> {
        let g = offs.len();
        let i2 = checked_mul("2*i", 2, i)?;
        let m2i = checked_mul("m*2i", m, i2)?;
        require_nonzero("i", i)?;
        self.check_hp("gu", &gu, m2i)?;
        o.check(self, m, i, g)?;
        self.check_offsets(&offs, m)?;
        let fmt = self.resolve(p.format);
        let (gp, dtype) = gu.raw_parts();
        let d = o.dev();
        let [p0, p1, p2, p3] = d.ptrs();
        let ptrs = [
            ("gu", gp),
            ("offs", offs.as_ptr() as *const c_void),
            p0,
            p1,
            p2,
            p3,
        ];
        self.dispatch(
            m == 0 && g == 0,
            &ptrs,
            || {
                let h = o.host();
                let offs = offs.host_slice();
                with_hp!(gu, |gu| reference::moe::swiglu_quant(
                    fmt,
                    p.pow2_scales,
                    m,
                    i,
                    gu,
                    offs,
                    h.out,
                    h.scales,
                    h.out_col,
                    h.scales_col
                ))
            },
            || {
                self.with_moe_workspace(g, stream, |ws| {
                    // SAFETY: as for moe_act_dual, with m*2i inputs and (m, i) outputs.
                    let rc = unsafe {
                        sys::hipfp8_moe_swiglu_quant_launch(
                            gp,
                            offs.as_ptr(),
                            d.out,
                            d.scales,
                            d.out_col,
                            d.scales_col,
                            m as i64,
                            i as i64,
                            g as i64,
                            fmt as i32,
                            p.pow2_scales as i32,
                            dtype,
                            ws,
                            stream.0,
                        )
                    };
                    check_status("moe_swiglu_quant", rc)
                })
            },
        )
    }

    /// SwiGLU backward fused with the gate/up projection's casts: from `grad_h` (M, I) and the
    /// forward's `gu` (M, 2I), both of one dtype, `d = [d_gate | d_up]` (M, 2I) as torch's
    /// autograd of `F.silu(g) * u` computes it (`reference::moe::swiglu_bwd`) is cast as
    /// [`Context::moe_act_dual`] casts x (K = 2I), without being stored. i must be > 0.
    pub fn moe_swiglu_bwd_quant(
        &self,
        p: &CastParams,
        m: usize,
        i: usize,
        grad_h: HpSrc<'_>,
        gu: HpSrc<'_>,
        offs: Src<'_, i32>,
        mut o: DualOut<'_>,
        stream: StreamRef,
    ) -> Result<()> {
        let g = offs.len();
        let i2 = checked_mul("2*i", 2, i)?;
        let mi = checked_mul("m*i", m, i)?;
        let m2i = checked_mul("m*2i", m, i2)?;
        require_nonzero("i", i)?;
        self.check_hp("grad_h", &grad_h, mi)?;
        self.check_hp("gu", &gu, m2i)?;
        o.check(self, m, i2, g)?;
        self.check_offsets(&offs, m)?;
        let fmt = self.resolve(p.format);
        let (dp, d1) = grad_h.raw_parts();
        let (gp, d2) = gu.raw_parts();
        if d1 != d2 {
            return Err(Error::NotSupported(format!(
                "moe_swiglu_bwd_quant takes one dtype for grad_h and gu (got {} and {})",
                grad_h.dtype_name(),
                gu.dtype_name()
            )));
        }
        let d = o.dev();
        let [p0, p1, p2, p3] = d.ptrs();
        let ptrs = [
            ("grad_h", dp),
            ("gu", gp),
            ("offs", offs.as_ptr() as *const c_void),
            p0,
            p1,
            p2,
            p3,
        ];
        self.dispatch(
            m == 0 && g == 0,
            &ptrs,
            || {
                let h = o.host();
                let offs = offs.host_slice();
                let pw = p.pow2_scales;
                match (grad_h, gu) {
                    (HpSrc::Bf16(a), HpSrc::Bf16(b)) => reference::moe::swiglu_bwd_quant(
                        fmt,
                        pw,
                        m,
                        i,
                        a.host_slice(),
                        b.host_slice(),
                        offs,
                        h.out,
                        h.scales,
                        h.out_col,
                        h.scales_col,
                    ),
                    (HpSrc::F32(a), HpSrc::F32(b)) => reference::moe::swiglu_bwd_quant(
                        fmt,
                        pw,
                        m,
                        i,
                        a.host_slice(),
                        b.host_slice(),
                        offs,
                        h.out,
                        h.scales,
                        h.out_col,
                        h.scales_col,
                    ),
                    _ => unreachable!("dtypes checked equal above"),
                }
            },
            || {
                self.with_moe_workspace(g, stream, |ws| {
                    // SAFETY: as for moe_act_dual, with m*i and m*2i inputs and (m, 2i)
                    // outputs.
                    let rc = unsafe {
                        sys::hipfp8_moe_swiglu_bwd_quant_launch(
                            dp,
                            gp,
                            offs.as_ptr(),
                            d.out,
                            d.scales,
                            d.out_col,
                            d.scales_col,
                            m as i64,
                            i as i64,
                            g as i64,
                            fmt as i32,
                            p.pow2_scales as i32,
                            d1,
                            ws,
                            stream.0,
                        )
                    };
                    check_status("moe_swiglu_bwd_quant", rc)
                })
            },
        )
    }
}
