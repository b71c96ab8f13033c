//! The fused MoE casts on [`Context`] (issue 14): one call writes both layouts a MoE grouped
//! GEMM pair takes (the SwiGLU ones computing their input on the fly), bit-identical to the
//! composition of the single casts it replaces (docs/OPS.md, "Fused MoE casts"; definitions in
//! `reference/moe.rs`). Each method validates every argument first (nothing is written on
//! error), then runs exactly one backend.

use std::ffi::{c_int, c_void};

use crate::context::{BackendKind, Context};
use crate::error::{Error, Result};
use crate::format::Fp8Format;
use crate::params::CastParams;
use crate::reference;
use crate::runtime::check_status;
use crate::sys;
use crate::validate::{checked_mul, require_nonzero, validate_offsets};
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

    /// The body the grouped dual casts share: `inputs` (name, view, elements; one dtype) are
    /// cast into the (m, k) outputs `o` over END `offs` along m. Checks every view, then runs
    /// `cpu` (host slices) or `gpu` (launcher pointers and the stream's zeroed workspace).
    fn grouped_dual<'a>(
        &self,
        p: &CastParams,
        op: &'static str,
        m: usize,
        k: usize,
        inputs: &[(&'static str, HpSrc<'a>, usize)],
        offs: Src<'a, i32>,
        mut o: DualOut<'a>,
        stream: StreamRef,
        cpu: impl FnOnce(Fp8Format, DualHost<'a>, &'a [i32]) -> Result<()>,
        gpu: impl FnOnce(Fp8Format, &DualDev, i32, *mut c_void) -> c_int,
    ) -> Result<()> {
        let g = offs.len();
        require_nonzero("k", k)?;
        for (what, x, len) in inputs {
            self.check_hp(what, x, *len)?;
        }
        o.check(self, m, k, g)?;
        self.check_src("offs", &offs, g)?;
        if self.backend() == BackendKind::Cpu {
            validate_offsets(offs.host_slice(), m)?;
        }
        let fmt = self.resolve(p.format);
        let dtype = inputs[0].1.raw_parts().1;
        if let Some((_, x, _)) = inputs.iter().find(|(_, x, _)| x.raw_parts().1 != dtype) {
            return Err(Error::NotSupported(format!(
                "{op} takes one dtype for all its inputs (got {} and {})",
                inputs[0].1.dtype_name(),
                x.dtype_name()
            )));
        }
        let d = o.dev();
        let null = ("", std::ptr::null());
        let mut ptrs = [null; 7];
        for (slot, (what, x, _)) in ptrs.iter_mut().zip(inputs) {
            *slot = (what, x.raw_parts().0);
        }
        ptrs[2] = ("offs", offs.as_ptr() as *const c_void);
        ptrs[3..].copy_from_slice(&d.ptrs());
        self.dispatch(
            m == 0 && g == 0,
            &ptrs,
            || cpu(fmt, o.host(), offs.host_slice()),
            || self.with_moe_workspace(g, stream, |ws| check_status(op, gpu(fmt, &d, dtype, ws))),
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
        o: DualOut<'_>,
        stream: StreamRef,
    ) -> Result<()> {
        let mk = checked_mul("m*k", m, k)?;
        let g = offs.len();
        let pw = p.pow2_scales;
        let xp = x.raw_parts().0;
        let op = "moe_act_dual";
        self.grouped_dual(
            p,
            op,
            m,
            k,
            &[("x", x, mk)],
            offs,
            o,
            stream,
            |fmt, h, offs| {
                with_hp!(x, |x| reference::moe::act_dual(
                    fmt,
                    pw,
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
            |fmt, d, dtype, ws| {
                // SAFETY: grouped_dual checked the views: device memory of this GPU with m*k
                // inputs and bytes per output, m and g*k scales, g offsets (clamped by the
                // kernels, never read on the host); `ws` is the stream's zeroed workspace of
                // the size the launcher asked for; work is only queued on `stream`.
                unsafe {
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
                        pw as i32,
                        dtype,
                        ws,
                        stream.0,
                    )
                }
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
        o: DualOut<'_>,
        stream: StreamRef,
    ) -> Result<()> {
        let m2i = checked_mul("m*2i", m, checked_mul("2*i", 2, i)?)?;
        require_nonzero("i", i)?;
        let g = offs.len();
        let pw = p.pow2_scales;
        let gp = gu.raw_parts().0;
        self.grouped_dual(
            p,
            "moe_swiglu_quant",
            m,
            i,
            &[("gu", gu, m2i)],
            offs,
            o,
            stream,
            |fmt, h, offs| {
                with_hp!(gu, |gu| reference::moe::swiglu_quant(
                    fmt,
                    pw,
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
            |fmt, d, dtype, ws| {
                // SAFETY: as for moe_act_dual, with m*2i inputs and (m, i) outputs.
                unsafe {
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
                        pw as i32,
                        dtype,
                        ws,
                        stream.0,
                    )
                }
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
        o: DualOut<'_>,
        stream: StreamRef,
    ) -> Result<()> {
        let i2 = checked_mul("2*i", 2, i)?;
        let (mi, m2i) = (checked_mul("m*i", m, i)?, checked_mul("m*2i", m, i2)?);
        require_nonzero("i", i)?;
        let g = offs.len();
        let pw = p.pow2_scales;
        let (dp, gp) = (grad_h.raw_parts().0, gu.raw_parts().0);
        self.grouped_dual(
            p,
            "moe_swiglu_bwd_quant",
            m,
            i2,
            &[("grad_h", grad_h, mi), ("gu", gu, m2i)],
            offs,
            o,
            stream,
            |fmt, h, offs| {
                let (o, s, oc, sc) = (h.out, h.scales, h.out_col, h.scales_col);
                match (grad_h, gu) {
                    (HpSrc::Bf16(a), HpSrc::Bf16(b)) => reference::moe::swiglu_bwd_quant(
                        fmt,
                        pw,
                        m,
                        i,
                        a.host_slice(),
                        b.host_slice(),
                        offs,
                        o,
                        s,
                        oc,
                        sc,
                    ),
                    (HpSrc::F32(a), HpSrc::F32(b)) => reference::moe::swiglu_bwd_quant(
                        fmt,
                        pw,
                        m,
                        i,
                        a.host_slice(),
                        b.host_slice(),
                        offs,
                        o,
                        s,
                        oc,
                        sc,
                    ),
                    _ => Err(Error::NotSupported("mixed input dtypes".into())),
                }
            },
            |fmt, d, dtype, ws| {
                // SAFETY: as for moe_act_dual, with m*i and m*2i inputs and (m, 2i) outputs.
                unsafe {
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
                        pw as i32,
                        dtype,
                        ws,
                        stream.0,
                    )
                }
            },
        )
    }
}
