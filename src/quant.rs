//! The scale-and-cast op family on [`Context`]: rowwise 2D, 3D expert weights, per-group (jagged) rowwise/colwise, tensorwise, blockwise and the
//! token-group-padding cast. Each method validates every argument first (so nothing is
//! written on error), then dispatches to exactly one backend (`dispatch.rs`).

use crate::context::{BackendKind, Context};
use crate::dispatch::CastIo;
use crate::error::{Error, Result};
use crate::params::CastParams;
use crate::reference;
use crate::runtime::check_status;
use crate::validate::{checked_mul, require_no_pow2, require_nonzero};
use crate::view::{Dst, HpSrc, Src, StreamRef, with_hp};

/// Tile of a blockwise cast.
#[derive(Clone, Copy)]
enum BlockTile {
    /// 1x128 (activations): one scale per row per 128 columns.
    Row128,
    /// 128x128 (weights).
    Square128,
}

impl Context {
    /// Rowwise (axiswise, last dim) scale-and-cast of an (m, k) row-major matrix:
    /// `out[i*k + j] = encode(x[i*k + j] * scales[i])`, `scales[i] = scale(amax(row i))`.
    /// Used for the forward A operand and the dgrad grad_out. Writes m*k bytes and m scales.
    pub fn rowwise_2d(
        &self,
        p: &CastParams,
        m: usize,
        k: usize,
        x: HpSrc<'_>,
        out: Dst<'_, u8>,
        scales: Dst<'_, f32>,
        stream: StreamRef,
    ) -> Result<()> {
        let mk = checked_mul("m*k", m, k)?;
        require_nonzero("k", k)?;
        let io = CastIo::new(x, out, scales, mk, m).gpu_noop_if(mk == 0);
        self.cast_op(
            p,
            io,
            |fmt, h| {
                with_hp!(h.x, |x| reference::rowwise_2d(
                    fmt,
                    p.pow2_scales,
                    m,
                    k,
                    x,
                    h.out,
                    h.scales
                ))
            },
            |fmt, d| {
                // SAFETY: the views were validated by cast_op: device memory of this context's
                // GPU holding m*k inputs, m*k output bytes and m scales; the launcher only
                // queues work on `stream` (docs/KERNEL_ABI.md).
                let st = unsafe {
                    crate::sys::hipfp8_rowwise_2d_launch(
                        d.x,
                        d.out,
                        d.scales,
                        m as i64,
                        k as i64,
                        fmt as i32,
                        p.pow2_scales as i32,
                        d.dtype,
                        stream.0,
                    )
                };
                check_status("rowwise_2d", st)
            },
        )
    }

    /// Colwise scale-and-cast of 3D expert weights (E,K,N) stored column-major
    /// (`x[e*K*N + n*K + k]`): `scales[e*N + n]` over k; output in the same layout.
    /// Forward B operand of the MoE grouped GEMM.
    pub fn colwise_3d(
        &self,
        p: &CastParams,
        e: usize,
        k: usize,
        n: usize,
        x: HpSrc<'_>,
        out: Dst<'_, u8>,
        scales: Dst<'_, f32>,
        stream: StreamRef,
    ) -> Result<()> {
        let en = checked_mul("e*n", e, n)?;
        let ekn = checked_mul("e*n*k", en, k)?;
        require_nonzero("k", k)?;
        let io = CastIo::new(x, out, scales, ekn, en).gpu_noop_if(ekn == 0);
        self.cast_op(
            p,
            io,
            |fmt, h| {
                with_hp!(h.x, |x| reference::quant::colwise_3d(
                    fmt,
                    p.pow2_scales,
                    e,
                    k,
                    n,
                    x,
                    h.out,
                    h.scales
                ))
            },
            |fmt, d| {
                // Column-major (E,K,N) is E*N contiguous runs of K: the rowwise kernel over E*N rows.
                // SAFETY: validated by cast_op: device memory of this GPU with e*n*k inputs,
                // e*n*k output bytes and e*n scales; the launcher only queues work on `stream`.
                let st = unsafe {
                    crate::sys::hipfp8_rowwise_2d_launch(
                        d.x,
                        d.out,
                        d.scales,
                        en as i64,
                        k as i64,
                        fmt as i32,
                        p.pow2_scales as i32,
                        d.dtype,
                        stream.0,
                    )
                };
                check_status("colwise_3d", st)
            },
        )
    }

    /// Transpose-rowwise cast of 3D expert weights (E,K,N) column-major: output (E,N,K)
    /// column-major (`out[e*N*K + k*N + n]`), `scales[e*K + k]` over n. Dgrad B operand.
    pub fn rowwise_3d_transpose_rhs(
        &self,
        p: &CastParams,
        e: usize,
        k: usize,
        n: usize,
        x: HpSrc<'_>,
        out: Dst<'_, u8>,
        scales: Dst<'_, f32>,
        stream: StreamRef,
    ) -> Result<()> {
        let ek = checked_mul("e*k", e, k)?;
        let ekn = checked_mul("e*k*n", ek, n)?;
        require_nonzero("n", n)?;
        let io = CastIo::new(x, out, scales, ekn, ek).gpu_noop_if(ekn == 0);
        self.cast_op(
            p,
            io,
            |fmt, h| {
                with_hp!(h.x, |x| reference::quant::rowwise_3d_transpose_rhs(
                    fmt,
                    p.pow2_scales,
                    e,
                    k,
                    n,
                    x,
                    h.out,
                    h.scales
                ))
            },
            |fmt, d| {
                self.with_colwise_workspace(e, k, 0, stream, |ws| {
                    // SAFETY: validated by cast_op: device memory of this GPU with e*k*n
                    // inputs and output bytes and e*k scales; `ws` is the context's zeroed
                    // workspace of the size the launcher asked for; work is only queued on
                    // `stream`.
                    let st = unsafe {
                        crate::sys::hipfp8_rowwise_3d_transpose_rhs_launch(
                            d.x,
                            d.out,
                            d.scales,
                            e as i64,
                            k as i64,
                            n as i64,
                            fmt as i32,
                            p.pow2_scales as i32,
                            d.dtype,
                            ws,
                            stream.0,
                        )
                    };
                    check_status("rowwise_3d_transpose_rhs", st)
                })
            },
        )
    }

    /// Per-group colwise cast of an (M,K) row-major matrix with END offsets along M:
    /// output column-major (`out[k*M + m]`), `scales[g*K + k]` over the group's rows of
    /// column k. Empty groups get `amax_to_scale(0)`; rows past `offs[G-1]` are not written.
    pub fn per_group_colwise(
        &self,
        p: &CastParams,
        m: usize,
        k: usize,
        x: HpSrc<'_>,
        offs: Src<'_, i32>,
        out: Dst<'_, u8>,
        scales: Dst<'_, f32>,
        stream: StreamRef,
    ) -> Result<()> {
        let g = offs.len();
        let mk = checked_mul("m*k", m, k)?;
        let gk = checked_mul("g*k", g, k)?;
        let io = CastIo::new(x, out, scales, mk, gk)
            .grouped(offs, m)
            .gpu_noop_if(gk == 0);
        self.cast_op(
            p,
            io,
            |fmt, h| {
                with_hp!(h.x, |x| reference::quant::per_group_colwise(
                    fmt,
                    p.pow2_scales,
                    m,
                    k,
                    x,
                    h.offs,
                    h.out,
                    h.scales
                ))
            },
            |fmt, d| {
                self.with_colwise_workspace(g, k, 0, stream, |ws| {
                    // SAFETY: validated by cast_op: device memory of this GPU with m*k inputs
                    // and output bytes, G*k scales and G offsets (clamped by the kernel, never
                    // read on the host); `ws` is the context's zeroed workspace of the size the
                    // launcher asked for; work is only queued on `stream`.
                    let st = unsafe {
                        crate::sys::hipfp8_per_group_colwise_launch(
                            d.x,
                            d.offs,
                            d.out,
                            d.scales,
                            m as i64,
                            k as i64,
                            g as i64,
                            fmt as i32,
                            p.pow2_scales as i32,
                            d.dtype,
                            ws,
                            stream.0,
                        )
                    };
                    check_status("per_group_colwise", st)
                })
            },
        )
    }

    /// Two [`Context::per_group_colwise`] casts sharing M and the offsets, in one launch
    /// (wgrad: grad_out (M,K1) and the activations (M,K2) together).
    pub fn per_group_colwise_dual(
        &self,
        p: &CastParams,
        m: usize,
        k1: usize,
        k2: usize,
        x1: HpSrc<'_>,
        x2: HpSrc<'_>,
        offs: Src<'_, i32>,
        mut out1: Dst<'_, u8>,
        mut scales1: Dst<'_, f32>,
        mut out2: Dst<'_, u8>,
        mut scales2: Dst<'_, f32>,
        stream: StreamRef,
    ) -> Result<()> {
        let g = offs.len();
        let mk1 = checked_mul("m*k1", m, k1)?;
        let mk2 = checked_mul("m*k2", m, k2)?;
        let gk1 = checked_mul("g*k1", g, k1)?;
        let gk2 = checked_mul("g*k2", g, k2)?;
        self.check_hp("x1", &x1, mk1)?;
        self.check_hp("x2", &x2, mk2)?;
        self.check_dst("out1", &mut out1, mk1)?;
        self.check_dst("scales1", &mut scales1, gk1)?;
        self.check_dst("out2", &mut out2, mk2)?;
        self.check_dst("scales2", &mut scales2, gk2)?;
        self.check_offsets(&offs, m)?;
        let fmt = self.resolve(p.format);
        let gpu_noop = gk1 == 0 && gk2 == 0;
        let (x1p, d1) = x1.raw_parts();
        let (x2p, d2) = x2.raw_parts();
        if self.backend() == BackendKind::Gpu && !gpu_noop && d1 != d2 {
            return Err(Error::NotSupported(format!(
                "per_group_colwise_dual on the GPU takes one input dtype for both tensors (got {} and {})",
                x1.dtype_name(),
                x2.dtype_name()
            )));
        }
        let (o1, s1) = (out1.as_mut_ptr(), scales1.as_mut_ptr());
        let (o2, s2) = (out2.as_mut_ptr(), scales2.as_mut_ptr());
        let offp = offs.as_ptr();
        let ptrs = [
            ("x1", x1p),
            ("x2", x2p),
            ("offs", offp as *const _),
            ("out1", o1 as *const _),
            ("scales1", s1 as *const _),
            ("out2", o2 as *const _),
            ("scales2", s2 as *const _),
        ];
        self.dispatch(
            gpu_noop,
            &ptrs,
            || {
                let (o1, s1) = (out1.host_slice_mut(), scales1.host_slice_mut());
                let (o2, s2) = (out2.host_slice_mut(), scales2.host_slice_mut());
                let offs = offs.host_slice();
                let pw = p.pow2_scales;
                with_hp!(x1, |a| with_hp!(x2, |b| {
                    reference::quant::per_group_colwise_dual(
                        fmt, pw, m, k1, k2, a, b, offs, o1, s1, o2, s2,
                    )
                }))
            },
            || {
                self.with_colwise_workspace(g, k1, k2, stream, |ws| {
                    // SAFETY: as for per_group_colwise, for both tensors (m*k1 and m*k2
                    // elements, G*k1 and G*k2 scales).
                    let st = unsafe {
                        crate::sys::hipfp8_per_group_colwise_dual_launch(
                            x1p,
                            x2p,
                            offp,
                            o1,
                            s1,
                            o2,
                            s2,
                            m as i64,
                            k1 as i64,
                            k2 as i64,
                            g as i64,
                            fmt as i32,
                            p.pow2_scales as i32,
                            d1,
                            ws,
                            stream.0,
                        )
                    };
                    check_status("per_group_colwise_dual", st)
                })
            },
        )
    }

    /// Per-group rowwise cast of an (M,K) row-major matrix with END offsets along K:
    /// output row-major, `scales[g*M + m]` over row m within the group's columns.
    /// Columns past `offs[G-1]` are not written.
    pub fn per_group_rowwise(
        &self,
        p: &CastParams,
        m: usize,
        k: usize,
        x: HpSrc<'_>,
        offs: Src<'_, i32>,
        out: Dst<'_, u8>,
        scales: Dst<'_, f32>,
        stream: StreamRef,
    ) -> Result<()> {
        let g = offs.len();
        let mk = checked_mul("m*k", m, k)?;
        let gm = checked_mul("g*m", g, m)?;
        let io = CastIo::new(x, out, scales, mk, gm)
            .grouped(offs, k)
            .gpu_noop_if(gm == 0);
        self.cast_op(
            p,
            io,
            |fmt, h| {
                with_hp!(h.x, |x| reference::quant::per_group_rowwise(
                    fmt,
                    p.pow2_scales,
                    m,
                    k,
                    x,
                    h.offs,
                    h.out,
                    h.scales
                ))
            },
            |fmt, d| {
                self.with_grouped_scratch(g, stream, |ws| {
                    // SAFETY: validated by cast_op: device memory of this GPU with m*k inputs
                    // and output bytes, G*m scales and G offsets (clamped by the kernel); `ws`
                    // is null or the zeroed scratch of the size the launcher asked for; work is
                    // only queued on `stream`.
                    let st = unsafe {
                        crate::sys::hipfp8_per_group_rowwise_launch(
                            d.x,
                            d.offs,
                            d.out,
                            d.scales,
                            m as i64,
                            k as i64,
                            g as i64,
                            fmt as i32,
                            p.pow2_scales as i32,
                            d.dtype,
                            ws,
                            stream.0,
                        )
                    };
                    check_status("per_group_rowwise", st)
                })
            },
        )
    }

    /// Tensorwise cast of `n` elements: `amax[0]` over all of them, `scale[0]` from it,
    /// `out[i] = encode(x[i] * scale)`. On the GPU: two phases, no host sync.
    pub fn tensorwise(
        &self,
        p: &CastParams,
        n: usize,
        x: HpSrc<'_>,
        mut out: Dst<'_, u8>,
        mut scale: Dst<'_, f32>,
        mut amax: Dst<'_, f32>,
        stream: StreamRef,
    ) -> Result<()> {
        self.check_hp("x", &x, n)?;
        self.check_dst("out", &mut out, n)?;
        self.check_dst("scale", &mut scale, 1)?;
        self.check_dst("amax", &mut amax, 1)?;
        let fmt = self.resolve(p.format);
        let (xp, dtype) = x.raw_parts();
        let (op, sp, ap) = (out.as_mut_ptr(), scale.as_mut_ptr(), amax.as_mut_ptr());
        let ptrs = [
            ("x", xp),
            ("out", op as *const _),
            ("scale", sp as *const _),
            ("amax", ap as *const _),
        ];
        // n == 0 still launches: the amax and scale of an empty tensor are written.
        self.dispatch(
            false,
            &ptrs,
            || {
                let (o, s, a) = (
                    out.host_slice_mut(),
                    scale.host_slice_mut(),
                    amax.host_slice_mut(),
                );
                with_hp!(x, |x| reference::quant::tensorwise(
                    fmt,
                    p.pow2_scales,
                    &x[..n],
                    o,
                    &mut s[0],
                    &mut a[0]
                ))
            },
            || {
                // SAFETY: validated above: device memory of this GPU with n inputs, n output bytes, one scale and one amax; the launcher only queues work on `stream`.
                let st = unsafe {
                    crate::sys::hipfp8_tensorwise_launch(
                        xp,
                        op,
                        sp,
                        ap,
                        n as i64,
                        fmt as i32,
                        p.pow2_scales as i32,
                        dtype,
                        stream.0,
                    )
                };
                check_status("tensorwise", st)
            },
        )
    }

    /// Tensorwise cast with a scale the caller already has (delayed scaling: a scale from the
    /// amax history of earlier steps): `out[i] = encode(x[i] * scale[0])`, and `amax[0] =
    /// max |x|` for the history. One read of x, one kernel on the GPU; the scale is read on the
    /// device (no host sync). Any scale is accepted and used as is (NaN, Inf, 0 and values that
    /// overflow the format follow the encode rule); `p.pow2_scales` must be false, since no
    /// scale is derived here.
    pub fn tensorwise_scaled(
        &self,
        p: &CastParams,
        n: usize,
        x: HpSrc<'_>,
        scale: Src<'_, f32>,
        mut out: Dst<'_, u8>,
        mut amax: Dst<'_, f32>,
        stream: StreamRef,
    ) -> Result<()> {
        require_no_pow2(p)?;
        self.check_hp("x", &x, n)?;
        self.check_src("scale", &scale, 1)?;
        self.check_dst("out", &mut out, n)?;
        self.check_dst("amax", &mut amax, 1)?;
        let fmt = self.resolve(p.format);
        let (xp, dtype) = x.raw_parts();
        let (scp, op, ap) = (scale.as_ptr(), out.as_mut_ptr(), amax.as_mut_ptr());
        let ptrs = [
            ("x", xp),
            ("scale", scp as *const _),
            ("out", op as *const _),
            ("amax", ap as *const _),
        ];
        // n == 0 still launches: the amax of an empty tensor (0) is written.
        self.dispatch(
            false,
            &ptrs,
            || {
                let sc = scale.host_slice()[0];
                let (o, a) = (out.host_slice_mut(), amax.host_slice_mut());
                a[0] = with_hp!(x, |x| reference::quant::tensorwise_scaled(
                    fmt,
                    sc,
                    &x[..n],
                    o
                ));
            },
            || {
                // SAFETY: validated above: device memory of this GPU with n inputs, one scale,
                // n output bytes and one amax; the launcher only queues work on `stream`.
                let st = unsafe {
                    crate::sys::hipfp8_tensorwise_scaled_launch(
                        xp, scp, op, ap, n as i64, fmt as i32, dtype, stream.0,
                    )
                };
                check_status("tensorwise_scaled", st)
            },
        )
    }

    /// Blockwise 1x128 cast (DeepSeek-V3 activations): scales (M, ceil(K/128)) row-major;
    /// a row's last block reduces over the columns that exist.
    pub fn blockwise_1x128(
        &self,
        p: &CastParams,
        m: usize,
        k: usize,
        x: HpSrc<'_>,
        out: Dst<'_, u8>,
        scales: Dst<'_, f32>,
        stream: StreamRef,
    ) -> Result<()> {
        self.blockwise(BlockTile::Row128, p, m, k, x, out, scales, stream)
    }

    /// Blockwise 128x128 cast (DeepSeek-V3 weights): scales (ceil(M/128), ceil(K/128))
    /// row-major; edge tiles reduce over what exists.
    pub fn blockwise_128x128(
        &self,
        p: &CastParams,
        m: usize,
        k: usize,
        x: HpSrc<'_>,
        out: Dst<'_, u8>,
        scales: Dst<'_, f32>,
        stream: StreamRef,
    ) -> Result<()> {
        self.blockwise(BlockTile::Square128, p, m, k, x, out, scales, stream)
    }

    /// The two blockwise casts: they differ only in the scale count, the reference function
    /// and the launcher.
    #[allow(clippy::too_many_arguments)]
    fn blockwise(
        &self,
        tile: BlockTile,
        p: &CastParams,
        m: usize,
        k: usize,
        x: HpSrc<'_>,
        out: Dst<'_, u8>,
        scales: Dst<'_, f32>,
        stream: StreamRef,
    ) -> Result<()> {
        let mk = checked_mul("m*k", m, k)?;
        let ns = match tile {
            BlockTile::Row128 => checked_mul("m*ceil(k/128)", m, k.div_ceil(128))?,
            BlockTile::Square128 => {
                checked_mul("ceil(m/128)*ceil(k/128)", m.div_ceil(128), k.div_ceil(128))?
            }
        };
        let io = CastIo::new(x, out, scales, mk, ns).gpu_noop_if(mk == 0);
        self.cast_op(
            p,
            io,
            |fmt, h| {
                with_hp!(h.x, |x| match tile {
                    BlockTile::Row128 => reference::quant::blockwise_1x128(
                        fmt,
                        p.pow2_scales,
                        m,
                        k,
                        x,
                        h.out,
                        h.scales
                    ),
                    BlockTile::Square128 => reference::quant::blockwise_128x128(
                        fmt,
                        p.pow2_scales,
                        m,
                        k,
                        x,
                        h.out,
                        h.scales
                    ),
                })
            },
            |fmt, d| {
                // SAFETY: validated by cast_op: device memory of this GPU with m*k inputs and output bytes and `ns` scales (the tile's count); the launchers only queue work on `stream`.
                let (st, name) = unsafe {
                    let (x, o, sc, mm, kk, f, p2, dt) = (
                        d.x,
                        d.out,
                        d.scales,
                        m as i64,
                        k as i64,
                        fmt as i32,
                        p.pow2_scales as i32,
                        d.dtype,
                    );
                    match tile {
                        BlockTile::Row128 => (
                            crate::sys::hipfp8_blockwise_1x128_launch(
                                x, o, sc, mm, kk, f, p2, dt, stream.0,
                            ),
                            "blockwise_1x128",
                        ),
                        BlockTile::Square128 => (
                            crate::sys::hipfp8_blockwise_128x128_launch(
                                x, o, sc, mm, kk, f, p2, dt, stream.0,
                            ),
                            "blockwise_128x128",
                        ),
                    }
                };
                check_status(name, st)
            },
        )
    }

    /// Rowwise cast that pads every token group (END offsets along M) to a multiple of 16
    /// rows, in one pass: group g's rows land at `[padded_offs[g-1], ...)` in `out`
    /// (m_cap, K) and `scales[m_cap]`; padding rows are zeros with scale `amax_to_scale(0)`;
    /// `padded_offs[g]` receives the padded END offsets. Needs `m_cap >= m + 15*G` (the
    /// worst case, so a GPU caller can size buffers without reading offsets). Rows past the
    /// padded end are untouched.
    pub fn rowwise_2d_padded(
        &self,
        p: &CastParams,
        m: usize,
        k: usize,
        m_cap: usize,
        x: HpSrc<'_>,
        offs: Src<'_, i32>,
        mut out: Dst<'_, u8>,
        mut scales: Dst<'_, f32>,
        mut padded_offs: Dst<'_, i32>,
        stream: StreamRef,
    ) -> Result<()> {
        let mk = checked_mul("m*k", m, k)?;
        let g = offs.len();
        let worst = checked_mul("15*g", 15, g)?
            .checked_add(m)
            .ok_or_else(|| Error::SizeOverflow("m + 15*g overflows".into()))?;
        let capk = checked_mul("m_cap*k", m_cap, k)?;
        require_nonzero("k", k)?;
        if m_cap < worst {
            return Err(Error::InvalidShape(format!(
                "m_cap = {m_cap} < m + 15*G = {worst}: padded groups may not fit"
            )));
        }
        if m_cap > i32::MAX as usize {
            return Err(Error::SizeOverflow(format!(
                "m_cap = {m_cap} does not fit the int32 padded offsets"
            )));
        }
        self.check_hp("x", &x, mk)?;
        self.check_dst("out", &mut out, capk)?;
        self.check_dst("scales", &mut scales, m_cap)?;
        self.check_dst("padded_offs", &mut padded_offs, g)?;
        self.check_offsets(&offs, m)?;
        let fmt = self.resolve(p.format);
        let (xp, dtype) = x.raw_parts();
        let (op, sp, pp) = (
            out.as_mut_ptr(),
            scales.as_mut_ptr(),
            padded_offs.as_mut_ptr(),
        );
        let offp = offs.as_ptr();
        let ptrs = [
            ("x", xp),
            ("offs", offp as *const _),
            ("out", op as *const _),
            ("scales", sp as *const _),
            ("padded_offs", pp as *const _),
        ];
        self.dispatch(
            g == 0,
            &ptrs,
            || {
                let (o, s, po) = (
                    out.host_slice_mut(),
                    scales.host_slice_mut(),
                    padded_offs.host_slice_mut(),
                );
                let offs = offs.host_slice();
                with_hp!(x, |x| reference::quant::rowwise_2d_padded(
                    fmt,
                    p.pow2_scales,
                    k,
                    x,
                    offs,
                    o,
                    s,
                    po
                ))
            },
            || {
                self.with_grouped_scratch(g, stream, |ws| {
                    // SAFETY: validated above: device memory of this GPU with m*k inputs, m_cap*k output bytes, m_cap scales and G offsets in and out, m_cap >= m + 15*G so every padded row fits; offsets are clamped by the kernel; `ws` is null or the zeroed scratch of the size the launcher asked for; the launcher only queues work on `stream`.
                    let st = unsafe {
                        crate::sys::hipfp8_rowwise_2d_padded_launch(
                            xp,
                            offp,
                            op,
                            sp,
                            pp,
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
                    check_status("rowwise_2d_padded", st)
                })
            },
        )
    }
}
