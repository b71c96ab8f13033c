//! The fused MoE casts on [`Context`] (issue 14): one call writes both layouts a MoE grouped
//! GEMM pair takes (the SwiGLU ones computing their input on the fly), bit-identical to the
//! composition of the single casts it replaces (docs/OPS.md, "Fused MoE casts"; definitions in
//! `reference/moe.rs`). Each op is one [`OpDecl`] (`dispatch.rs`); [`Context::run`] validates
//! every argument first (nothing is written on error), then runs exactly one backend.
//!
//! They take [`MoeCastParams`]: a cast's format and pow2 choice and what the scale outputs
//! hold, the forward scales (as the single casts write them) or the grouped GEMMs' dequant
//! scales (the forward scales through `scale_reciprocal`, bit for bit; the codes are the same).

use crate::context::Context;
use crate::dispatch::{
    BufDecl, Dev, Dim, Elem, GpuRun, Host, LenFn, OpDecl, View, device_bytes, len_m, len_mk,
    op_methods,
};
use crate::error::{Error, Result};
use crate::format::Fp8Format;
use crate::knobs::host_var;
use crate::params::{MoeCastParams, ScaleOutput};
use crate::reference::{self, Dual, Rule, Scaled, try_scratch};
use crate::runtime::check_status;
use crate::sys;
use crate::validate::{check_wgrad_cap, checked_mul};
use crate::view::{Dst, HpSrc, Src, StreamRef, with_hp};
use std::ffi::c_void;

/// The outputs of a dual cast of an (m, k) operand: `out` (m*k, row-major) with `scales[m]`
/// (per row), and `out_col` (m*k, column-major `[c*m + r]`) with `scales_col[g*k]` (per
/// group and column).
pub struct DualOut<'a> {
    pub out: Dst<'a, u8>,
    pub scales: Dst<'a, f32>,
    pub out_col: Dst<'a, u8>,
    pub scales_col: Dst<'a, f32>,
}

/// The shape of [`MOE_WEIGHTS_DUAL`]: (e, k, n).
type Ekn = (usize, usize, usize);

fn len_ekn(&(e, k, n): &Ekn, _: usize) -> Result<usize> {
    checked_mul("e*k*n", checked_mul("e*k", e, k)?, n)
}

/// `2i` of an (m, i) SwiGLU shape: the columns of gu (and of the backward's outputs).
fn two_i(i: usize) -> Result<usize> {
    checked_mul("2*i", 2, i)
}

/// `m*2i`: the elements of gu.
fn len_m2i(&(m, i): &(usize, usize), _: usize) -> Result<usize> {
    checked_mul("m*2i", m, two_i(i)?)
}

/// The outputs of a dual cast of an (m, cols) operand whose cols the shape gives: `out`,
/// `scales`, `out_col`, `scales_col` (see [`DualOut`]).
const fn dual_outs(
    mk: LenFn<(usize, usize)>,
    gk: LenFn<(usize, usize)>,
) -> [BufDecl<(usize, usize)>; 4] {
    [
        BufDecl::output("out", Elem::U8, mk),
        BufDecl::output("scales", Elem::F32, len_m),
        BufDecl::output("out_col", Elem::U8, mk),
        BufDecl::output("scales_col", Elem::F32, gk),
    ]
}

/// The buffers of a one-input grouped dual cast: `input`, offs along m, [`dual_outs`].
const fn one_input_bufs(
    input: &'static str,
    len: LenFn<(usize, usize)>,
    mk: LenFn<(usize, usize)>,
    gk: LenFn<(usize, usize)>,
) -> [BufDecl<(usize, usize)>; 6] {
    let [o, s, oc, sc] = dual_outs(mk, gk);
    [
        BufDecl::hp(input, len),
        BufDecl::offsets("offs", |s| s.0),
        o,
        s,
        oc,
        sc,
    ]
}

/// The launchers' `dequant` argument: 1 when the scale outputs hold dequant scales.
fn dequant(p: &MoeCastParams) -> i32 {
    (p.scales == ScaleOutput::Dequant) as i32
}

/// A grouped dual cast launches when it has rows to cast or group scales to write.
fn empty_grouped(&(m, _): &(usize, usize), g: usize) -> bool {
    m == 0 && g == 0
}

/// The grouped launchers: (input, [gu,] offs, out, scales, out_col, scales_col, m_cap,
/// offs_pad, m, cols, groups, format, pow2, dequant, dtype, workspace, stream) with cols = k
/// or i.
#[derive(Clone, Copy)]
pub(crate) enum Grouped {
    /// `hipfp8_moe_act_dual_launch` (input x, cols = k).
    Act,
    /// `hipfp8_moe_swiglu_quant_launch` (input gu, cols = i).
    Swiglu,
    /// `hipfp8_moe_swiglu_bwd_quant_launch` (inputs grad_h and gu, cols = i).
    SwigluBwd,
}

impl<'a> DualOut<'a> {
    /// The four outputs as views, in declaration order.
    fn views(self) -> [View<'a>; 4] {
        [
            self.out.into(),
            self.scales.into(),
            self.out_col.into(),
            self.scales_col.into(),
        ]
    }
}

/// Whether [`Context::moe_weights_dual`] and [`Context::moe_act_dual`] run as the two
/// single-purpose casts they fuse (colwise_3d + rowwise_3d_transpose_rhs; rowwise_2d +
/// per_group_colwise, each writing the requested scales), or as the fused row and codes passes
/// (`HIPFP8_MOE_DUAL=fused`). The same bytes either way; the single-purpose casts ran faster
/// on all but one benchmark shape (bench/NOTES.md, session 21).
pub(crate) fn dual_composed() -> bool {
    host_var("HIPFP8_MOE_DUAL").as_deref() != Some("fused")
}

/// The device pointers of a dual cast of expert weights: `out`, `scales` (colwise_3d's),
/// `out_t`, `scales_t` (rowwise_3d_transpose_rhs's).
pub(crate) struct WeightsOut {
    pub out: *mut u8,
    pub scales: *mut f32,
    pub out_t: *mut u8,
    pub scales_t: *mut f32,
}

/// Queue the dual cast of the expert weights x0 (e, k, n0) (dtype `dtype`) stacked along n per
/// expert with x1 (e, k, n1) when x1 is not null, on `stream`: the two single-purpose casts
/// ([`dual_composed`]), the second with the stream's zeroed colwise workspace, or the fused
/// launcher.
///
/// # Safety
/// Device memory of `ctx`'s GPU, validated by the caller: e*k*n0 (and e*k*n1) inputs of
/// `dtype`, e*k*(n0+n1) bytes in `o.out` and `o.out_t`, e*(n0+n1) and e*k scales; k > 0 and
/// n0 + n1 > 0 when e > 0; the caller's device is active.
pub(crate) unsafe fn launch_weights_dual(
    ctx: &Context,
    p: &MoeCastParams,
    fmt: Fp8Format,
    (e, k, n0, n1): (usize, usize, usize, usize),
    (x0, x1, dtype): (*const c_void, *const c_void, i32),
    o: WeightsOut,
    stream: StreamRef,
) -> Result<()> {
    let (f, pw, dq) = (fmt as i32, p.pow2_scales as i32, dequant(p));
    let (e64, k64, n0, n1) = (e as i64, k as i64, n0 as i64, n1 as i64);
    if !dual_composed() {
        // SAFETY: the caller's contract (the launchers only queue work on `stream`).
        let st = unsafe {
            if x1.is_null() {
                sys::hipfp8_moe_weights_dual_launch(
                    x0, o.out, o.scales, o.out_t, o.scales_t, e64, k64, n0, f, pw, dq, dtype,
                    stream.0,
                )
            } else {
                sys::hipfp8_moe_weights_dual_pair_launch(
                    x0, x1, o.out, o.scales, o.out_t, o.scales_t, e64, k64, n0, n1, f, pw, dq,
                    dtype, stream.0,
                )
            }
        };
        return check_status("moe_weights_dual", st);
    }
    // SAFETY: the caller's contract.
    let st = unsafe {
        sys::hipfp8_colwise_3d_pair_launch(
            x0, x1, o.out, o.scales, e64, k64, n0, n1, f, pw, dq, dtype, stream.0,
        )
    };
    check_status("moe_weights_dual (colwise_3d)", st)?;
    ctx.with_colwise_workspace(e, k, 0, stream, |ws| {
        // SAFETY: the caller's contract; `ws` is the stream's zeroed workspace of the size
        // the launcher asks for.
        let st = unsafe {
            sys::hipfp8_rowwise_3d_transpose_rhs_pair_launch(
                x0, x1, o.out_t, o.scales_t, e64, k64, n0, n1, f, pw, dq, dtype, ws, stream.0,
            )
        };
        check_status("moe_weights_dual (rowwise_3d_transpose_rhs)", st)
    })
}

impl Context {
    /// Device bytes of zeroed workspace the grouped MoE casts need for `groups` groups (the
    /// fused passes; [`Context::moe_act_dual`] also needs
    /// [`Context::colwise_workspace_size`] of (groups, k, 0), and
    /// [`Context::moe_weights_dual`] that of (e, k, 0): a caller-bound workspace takes the
    /// largest).
    pub fn moe_workspace_size(&self, groups: usize) -> Result<usize> {
        // SAFETY: arithmetic on the argument; writes the out-pointer only.
        device_bytes("moe workspace size", |b| unsafe {
            sys::hipfp8_moe_workspace_bytes(groups as i64, b)
        })
    }
}

impl Grouped {
    /// Columns of the op's outputs for `cols` (2*cols for the SwiGLU backward's [d_gate | d_up]).
    fn width(self, cols: usize) -> usize {
        match self {
            Grouped::SwigluBwd => 2 * cols,
            _ => cols,
        }
    }
}

/// The GPU arm of the grouped ops: the stream's zeroed workspace, then the launcher of `k`
/// with (m, cols), the column output padded to `m_cap` rows when given.
fn launch_grouped(
    ctx: &Context,
    k: Grouped,
    p: &MoeCastParams,
    fmt: Fp8Format,
    (m, cols): (usize, usize),
    m_cap: Option<usize>,
    d: &Dev,
    stream: StreamRef,
) -> Result<()> {
    let (op, input) = match k {
        Grouped::Act => ("moe_act_dual", "x"),
        Grouped::Swiglu => ("moe_swiglu_quant", "gu"),
        Grouped::SwigluBwd => ("moe_swiglu_bwd_quant", "grad_h"),
    };
    let g = d.groups();
    let (x, offs, dtype) = (d.ptr(input), d.ptr("offs"), d.dtype(input));
    let (o, s) = (d.ptr("out"), d.ptr("scales"));
    let (oc, sc) = (d.ptr("out_col"), d.ptr("scales_col"));
    let (cap, pad_offs): (i64, *mut i32) = match m_cap {
        Some(c) => (c as i64, d.ptr("offs_pad")),
        None => (0, std::ptr::null_mut()),
    };
    let (m, cols64, g64) = (m as i64, cols as i64, g as i64);
    let (f, pw, dq) = (fmt as i32, p.pow2_scales as i32, dequant(p));
    if matches!(k, Grouped::Act) && dual_composed() {
        // SAFETY: as below: rowwise_2d (one expert of m rows) of x into out / scales.
        let st = unsafe {
            sys::hipfp8_colwise_3d_pair_launch(
                x,
                std::ptr::null(),
                o,
                s,
                1,
                cols64,
                m,
                0,
                f,
                pw,
                dq,
                dtype,
                stream.0,
            )
        };
        check_status("moe_act_dual (rowwise_2d)", st)?;
        return ctx.with_colwise_workspace(g, cols, 0, stream, |ws| {
            // SAFETY: as below; `ws` is the stream's zeroed colwise workspace of the size the
            // launchers ask for.
            let st = unsafe {
                match m_cap {
                    None => sys::hipfp8_per_group_colwise_launch(
                        x, offs, oc, sc, m, cols64, g64, f, pw, dq, dtype, ws, stream.0,
                    ),
                    Some(_) => {
                        let (x2, o2, s2) =
                            (std::ptr::null(), std::ptr::null_mut(), std::ptr::null_mut());
                        sys::hipfp8_per_group_colwise_dual_padded_launch(
                            x, x2, offs, oc, sc, o2, s2, pad_offs, m, cols64, 0, cap, g64, f, pw,
                            dq, dtype, ws, stream.0,
                        )
                    }
                }
            };
            check_status("moe_act_dual (per_group_colwise)", st)
        });
    }
    let cols = cols64;
    ctx.with_zeroed_or_null(ctx.moe_workspace_size(g)?, stream, |ws| {
        // SAFETY: validated by Context::run: device memory of this GPU with the declared
        // lengths (inputs, of one dtype for the backward, m*cols bytes per output (m*2i for
        // the backward; m_cap*cols (m_cap*2i) padded, with g padded offsets), m and g*cols
        // (g*2i) scales, g offsets, clamped by the kernels and never read on the host); `ws`
        // is the stream's zeroed workspace of the size the launcher asked for; work is only
        // queued on `stream`.
        let st = unsafe {
            match k {
                Grouped::Act => sys::hipfp8_moe_act_dual_launch(
                    x, offs, o, s, oc, sc, cap, pad_offs, m, cols, g64, f, pw, dq, dtype, ws,
                    stream.0,
                ),
                Grouped::Swiglu => sys::hipfp8_moe_swiglu_quant_launch(
                    x, offs, o, s, oc, sc, cap, pad_offs, m, cols, g64, f, pw, dq, dtype, ws,
                    stream.0,
                ),
                Grouped::SwigluBwd => sys::hipfp8_moe_swiglu_bwd_quant_launch(
                    x,
                    d.ptr("gu"),
                    offs,
                    o,
                    s,
                    oc,
                    sc,
                    cap,
                    pad_offs,
                    m,
                    cols,
                    g64,
                    f,
                    pw,
                    dq,
                    dtype,
                    ws,
                    stream.0,
                ),
            }
        };
        check_status(op, st)
    })
}

/// The CPU arm of the grouped ops: the reference of `k` with (m, cols), its column output
/// padded to `m_cap` rows by [`reference::moe::pad_cols`] when given.
fn grouped_cpu(
    k: Grouped,
    p: &MoeCastParams,
    fmt: Fp8Format,
    (m, cols): (usize, usize),
    m_cap: Option<usize>,
    h: &mut Host<'_>,
) -> Result<()> {
    let offs = h.src("offs");
    let rows = Scaled::new(h.dst("out"), h.dst("scales"));
    let w = k.width(cols);
    let mut unpadded = match m_cap {
        // m*w: the op's output length, checked.
        Some(_) => try_scratch::<u8>("padded colwise codes", m * w)?,
        None => Vec::new(),
    };
    let codes = match m_cap {
        Some(_) => &mut unpadded[..],
        None => h.dst("out_col"),
    };
    let out = Dual {
        rows,
        cols: Scaled::new(codes, h.dst("scales_col")),
    };
    let rule = Rule::new(fmt, p.pow2_scales);
    // gu has 2*cols columns (checked by the op).
    macro_rules! bwd {
        ($dh:expr, $gu:expr) => {{
            let gu = reference::Grouped {
                m,
                k: 2 * cols,
                x: $gu.host_slice(),
                offs,
            };
            reference::moe::swiglu_bwd_quant(rule, p.scales, gu, $dh.host_slice(), out)
        }};
    }
    let r = match k {
        Grouped::Act => with_hp!(h.hp("x"), |x| {
            reference::moe::act_dual(
                rule,
                p.scales,
                reference::Grouped {
                    m,
                    k: cols,
                    x,
                    offs,
                },
                out,
            )
        }),
        Grouped::Swiglu => with_hp!(h.hp("gu"), |x| {
            let x = reference::Grouped {
                m,
                k: 2 * cols,
                x,
                offs,
            };
            reference::moe::swiglu_quant(rule, p.scales, x, out)
        }),
        Grouped::SwigluBwd => match (h.hp("grad_h"), h.hp("gu")) {
            (HpSrc::Bf16(dh), HpSrc::Bf16(gu)) => bwd!(dh, gu),
            (HpSrc::F32(dh), HpSrc::F32(gu)) => bwd!(dh, gu),
            // Context::run checked one dtype (`hp_like`).
            _ => Err(Error::NotSupported("mixed input dtypes".into())),
        },
    };
    r?;
    if let Some(cap) = m_cap {
        let (offs_pad, out_col) = (h.dst("offs_pad"), h.dst("out_col"));
        reference::moe::pad_cols((w, m), offs, &unpadded, cap, out_col, offs_pad);
    }
    Ok(())
}

impl Grouped {
    /// The declaration of the grouped op `self` with the buffers `bufs` (of the one-input
    /// ops: [`one_input_bufs`]).
    const fn decl(
        self,
        c_name: &'static str,
        bufs: &'static [BufDecl<(usize, usize)>],
        nonzero: &'static [(&'static str, Dim<(usize, usize)>)],
    ) -> OpDecl<MoeCastParams, (usize, usize)> {
        OpDecl {
            c_name,
            bufs,
            nonzero,
            check: None,
            gpu_run: GpuRun::Checked {
                noop: empty_grouped,
            },
            cpu: match self {
                Grouped::Act => |p, fmt, &s, h| grouped_cpu(Grouped::Act, p, fmt, s, None, h),
                Grouped::Swiglu => |p, fmt, &s, h| grouped_cpu(Grouped::Swiglu, p, fmt, s, None, h),
                Grouped::SwigluBwd => {
                    |p, fmt, &s, h| grouped_cpu(Grouped::SwigluBwd, p, fmt, s, None, h)
                }
            },
            gpu: match self {
                Grouped::Act => |ctx, p, fmt, &s, d, st| {
                    launch_grouped(ctx, Grouped::Act, p, fmt, s, None, d, st)
                },
                Grouped::Swiglu => |ctx, p, fmt, &s, d, st| {
                    launch_grouped(ctx, Grouped::Swiglu, p, fmt, s, None, d, st)
                },
                Grouped::SwigluBwd => |ctx, p, fmt, &s, d, st| {
                    launch_grouped(ctx, Grouped::SwigluBwd, p, fmt, s, None, d, st)
                },
            },
        }
    }

    /// The padded-column twin of [`Grouped::decl`] on (m, cols, m_cap): the column output in
    /// the padded layout of m_cap rows ([`reference::moe::pad_cols`]) and the padded END
    /// offsets `offs_pad`; m_cap as [`check_wgrad_cap`] says.
    const fn decl_padded(
        self,
        c_name: &'static str,
        bufs: &'static [BufDecl<Padded>],
        nonzero: &'static [(&'static str, Dim<Padded>)],
    ) -> OpDecl<MoeCastParams, Padded> {
        OpDecl {
            c_name,
            bufs,
            nonzero,
            check: Some(|_, &(m, _, m_cap), g| check_wgrad_cap(m, m_cap, g)),
            gpu_run: GpuRun::Checked {
                noop: |&(m, _, _), g| m == 0 && g == 0,
            },
            cpu: match self {
                Grouped::Act => |p, fmt, &(m, c, cap), h| {
                    grouped_cpu(Grouped::Act, p, fmt, (m, c), Some(cap), h)
                },
                Grouped::Swiglu => |p, fmt, &(m, c, cap), h| {
                    grouped_cpu(Grouped::Swiglu, p, fmt, (m, c), Some(cap), h)
                },
                Grouped::SwigluBwd => |p, fmt, &(m, c, cap), h| {
                    grouped_cpu(Grouped::SwigluBwd, p, fmt, (m, c), Some(cap), h)
                },
            },
            gpu: match self {
                Grouped::Act => |ctx, p, fmt, &(m, c, cap), d, st| {
                    launch_grouped(ctx, Grouped::Act, p, fmt, (m, c), Some(cap), d, st)
                },
                Grouped::Swiglu => |ctx, p, fmt, &(m, c, cap), d, st| {
                    launch_grouped(ctx, Grouped::Swiglu, p, fmt, (m, c), Some(cap), d, st)
                },
                Grouped::SwigluBwd => |ctx, p, fmt, &(m, c, cap), d, st| {
                    launch_grouped(ctx, Grouped::SwigluBwd, p, fmt, (m, c), Some(cap), d, st)
                },
            },
        }
    }
}

/// The outputs of a weights dual cast: `out`, `scales` (e*n), `out_t`, `scales_t` (e*k).
const fn weights_outs() -> [BufDecl<Ekn>; 4] {
    [
        BufDecl::output("out", Elem::U8, len_ekn),
        BufDecl::output("scales", Elem::F32, |&(e, _, n), _| {
            checked_mul("e*n", e, n)
        }),
        BufDecl::output("out_t", Elem::U8, len_ekn),
        BufDecl::output("scales_t", Elem::F32, |&(e, k, _), _| {
            checked_mul("e*k", e, k)
        }),
    ]
}

/// The rule and host outputs of a weights dual cast (validated by Context::run).
fn weights_host<'a>(p: &MoeCastParams, fmt: Fp8Format, h: &mut Host<'a>) -> (Rule, Dual<'a>) {
    let rows = Scaled::new(h.dst("out"), h.dst("scales"));
    let cols = Scaled::new(h.dst("out_t"), h.dst("scales_t"));
    (Rule::new(fmt, p.pow2_scales), Dual { rows, cols })
}

/// The device outputs of a weights dual cast (validated by Context::run).
fn weights_out(d: &Dev) -> WeightsOut {
    WeightsOut {
        out: d.ptr("out"),
        scales: d.ptr("scales"),
        out_t: d.ptr("out_t"),
        scales_t: d.ptr("scales_t"),
    }
}

#[doc(hidden)]
pub static MOE_WEIGHTS_DUAL: OpDecl<MoeCastParams, Ekn> = OpDecl {
    c_name: "hipfp8_moe_weights_dual",
    bufs: &{
        let [o, s, ot, st] = weights_outs();
        [BufDecl::hp("x", len_ekn), o, s, ot, st]
    },
    nonzero: &[("k", |s| s.1), ("n", |s| s.2)],
    check: None,
    gpu_run: GpuRun::Checked {
        noop: |&(e, _, _), _| e == 0,
    },
    cpu: |p, fmt, &(e, k, n), h| {
        let (rule, out) = weights_host(p, fmt, h);
        with_hp!(h.hp("x"), |x| {
            reference::moe::weights_dual(rule, p.scales, (e, k, n), x, out)
        });
        Ok(())
    },
    gpu: |ctx, p, fmt, &(e, k, n), d, stream| {
        let o = weights_out(d);
        let x = (d.ptr("x") as *const c_void, std::ptr::null(), d.dtype("x"));
        // SAFETY: validated by Context::run: device memory of this GPU with e*k*n inputs, e*k*n
        // bytes in each output, e*n and e*k scales, k and n > 0; its device is active.
        unsafe { launch_weights_dual(ctx, p, fmt, (e, k, n, 0), x, o, stream) }
    },
};

/// e*k*(n/2): the elements of one half of an (e, k, n) weight.
fn len_half(&(e, k, n): &Ekn, _: usize) -> Result<usize> {
    checked_mul("e*k*(n/2)", checked_mul("e*k", e, k)?, n / 2)
}

/// The weight of which `a` and `b` are the halves along n (each expert's first `half` =
/// k*(n/2) elements from `a`, the others from `b`): the definition of the halves op.
fn stack_halves<T: Copy + Default>(a: &[T], b: &[T], half: usize) -> Result<Vec<T>> {
    let mut w = try_scratch::<T>("stacked weight", a.len() + b.len())?;
    if half > 0 {
        for ((dst, x), y) in w
            .chunks_mut(2 * half)
            .zip(a.chunks(half))
            .zip(b.chunks(half))
        {
            dst[..half].copy_from_slice(x);
            dst[half..].copy_from_slice(y);
        }
    }
    Ok(w)
}

static MOE_WEIGHTS_DUAL_HALVES: OpDecl<MoeCastParams, Ekn> = OpDecl {
    c_name: "moe_weights_dual (two halves)",
    bufs: &{
        let [o, s, ot, st] = weights_outs();
        [
            BufDecl::hp("x0", len_half),
            BufDecl::hp_like("x1", "x0", len_half),
            o,
            s,
            ot,
            st,
        ]
    },
    nonzero: &[("k", |s| s.1), ("n", |s| s.2)],
    check: Some(|_, &(_, _, n), _| {
        if n % 2 != 0 {
            return Err(Error::InvalidShape(format!(
                "a weight in two halves needs an even n (got {n})"
            )));
        }
        Ok(())
    }),
    gpu_run: GpuRun::Checked {
        noop: |&(e, _, _), _| e == 0,
    },
    cpu: |p, fmt, &(e, k, n), h| {
        let (rule, out) = weights_host(p, fmt, h);
        let half = k * (n / 2);
        match (h.hp("x0"), h.hp("x1")) {
            (HpSrc::Bf16(a), HpSrc::Bf16(b)) => {
                let w = stack_halves(a.host_slice(), b.host_slice(), half)?;
                reference::moe::weights_dual(rule, p.scales, (e, k, n), &w, out)
            }
            (HpSrc::F32(a), HpSrc::F32(b)) => {
                let w = stack_halves(a.host_slice(), b.host_slice(), half)?;
                reference::moe::weights_dual(rule, p.scales, (e, k, n), &w, out)
            }
            // Context::run checked one dtype (`hp_like`).
            _ => return Err(Error::NotSupported("mixed input dtypes".into())),
        }
        Ok(())
    },
    gpu: |ctx, p, fmt, &(e, k, n), d, stream| {
        let o = weights_out(d);
        let (x0, x1) = (d.ptr("x0") as *const c_void, d.ptr("x1") as *const c_void);
        // SAFETY: validated by Context::run: device memory of this GPU with e*k*(n/2) inputs of
        // one dtype in each half, e*k*n bytes in each output, e*n and e*k scales, k > 0 and n
        // even and > 0; its device is active.
        unsafe {
            let h = n / 2;
            launch_weights_dual(
                ctx,
                p,
                fmt,
                (e, k, h, h),
                (x0, x1, d.dtype("x0")),
                o,
                stream,
            )
        }
    },
};

#[doc(hidden)]
pub static MOE_ACT_DUAL: OpDecl<MoeCastParams, (usize, usize)> = Grouped::Act.decl(
    "hipfp8_moe_act_dual",
    &one_input_bufs("x", len_mk, len_mk, |&(_, k), g| checked_mul("g*k", g, k)),
    &[("k", |s| s.1)],
);

#[doc(hidden)]
pub static MOE_SWIGLU_QUANT: OpDecl<MoeCastParams, (usize, usize)> = Grouped::Swiglu.decl(
    "hipfp8_moe_swiglu_quant",
    &one_input_bufs(
        "gu",
        len_m2i,
        |&(m, i), _| checked_mul("m*i", m, i),
        |&(_, i), g| checked_mul("g*i", g, i),
    ),
    &[("i", |s| s.1)],
);

/// The buffers of the SwiGLU backward: grad_h (m, i), gu (m, 2i) of grad_h's dtype, offs along
/// m, [`dual_outs`] of (m, 2i).
const fn swiglu_bwd_bufs() -> [BufDecl<(usize, usize)>; 7] {
    let [o, s, oc, sc] = dual_outs(len_m2i, |&(_, i), g| checked_mul("g*2i", g, two_i(i)?));
    [
        BufDecl::hp("grad_h", |&(m, i), _| checked_mul("m*i", m, i)),
        BufDecl::hp_like("gu", "grad_h", len_m2i),
        BufDecl::offsets("offs", |s| s.0),
        o,
        s,
        oc,
        sc,
    ]
}

#[doc(hidden)]
pub static MOE_SWIGLU_BWD_QUANT: OpDecl<MoeCastParams, (usize, usize)> = Grouped::SwigluBwd.decl(
    "hipfp8_moe_swiglu_bwd_quant",
    &swiglu_bwd_bufs(),
    &[("i", |s| s.1)],
);

/// The shape of a padded grouped dual cast: (m, cols, m_cap).
pub(crate) type Padded = (usize, usize, usize);

fn p_mw(&(m, c, _): &Padded, _: usize) -> Result<usize> {
    checked_mul("m*cols", m, c)
}
fn p_m2w(&(m, c, _): &Padded, _: usize) -> Result<usize> {
    checked_mul("m*2i", m, two_i(c)?)
}
fn p_capw(&(_, c, cap): &Padded, _: usize) -> Result<usize> {
    checked_mul("m_cap*cols", cap, c)
}
fn p_cap2w(&(_, c, cap): &Padded, _: usize) -> Result<usize> {
    checked_mul("m_cap*2i", cap, two_i(c)?)
}
fn p_gw(&(_, c, _): &Padded, g: usize) -> Result<usize> {
    checked_mul("g*cols", g, c)
}
fn p_g2w(&(_, c, _): &Padded, g: usize) -> Result<usize> {
    checked_mul("g*2i", g, two_i(c)?)
}

/// The outputs of a padded grouped dual cast: `out`, `scales` (m), `out_col` (m_cap rows),
/// `scales_col`, `offs_pad` (g).
const fn padded_outs(
    mw: LenFn<Padded>,
    capw: LenFn<Padded>,
    gw: LenFn<Padded>,
) -> [BufDecl<Padded>; 5] {
    [
        BufDecl::output("out", Elem::U8, mw),
        BufDecl::output("scales", Elem::F32, |&(m, _, _), _| Ok(m)),
        BufDecl::output("out_col", Elem::U8, capw),
        BufDecl::output("scales_col", Elem::F32, gw),
        BufDecl::output("offs_pad", Elem::I32, |_, g| Ok(g)),
    ]
}

/// The buffers of a one-input padded grouped dual cast: `input`, offs, [`padded_outs`] of
/// (m, cols).
const fn padded_one_input(input: &'static str, len: LenFn<Padded>) -> [BufDecl<Padded>; 7] {
    let [o, s, oc, sc, op] = padded_outs(p_mw, p_capw, p_gw);
    [
        BufDecl::hp(input, len),
        BufDecl::offsets("offs", |s| s.0),
        o,
        s,
        oc,
        sc,
        op,
    ]
}

const fn padded_swiglu_bwd() -> [BufDecl<Padded>; 8] {
    let [o, s, oc, sc, op] = padded_outs(p_m2w, p_cap2w, p_g2w);
    [
        BufDecl::hp("grad_h", p_mw),
        BufDecl::hp_like("gu", "grad_h", p_m2w),
        BufDecl::offsets("offs", |s| s.0),
        o,
        s,
        oc,
        sc,
        op,
    ]
}

static MOE_ACT_DUAL_PADDED: OpDecl<MoeCastParams, Padded> = Grouped::Act.decl_padded(
    "moe_act_dual (padded columns)",
    &padded_one_input("x", p_mw),
    &[("k", |s| s.1)],
);

static MOE_SWIGLU_QUANT_PADDED: OpDecl<MoeCastParams, Padded> = Grouped::Swiglu.decl_padded(
    "moe_swiglu_quant (padded columns)",
    &padded_one_input("gu", p_m2w),
    &[("i", |s| s.1)],
);

static MOE_SWIGLU_BWD_QUANT_PADDED: OpDecl<MoeCastParams, Padded> = Grouped::SwigluBwd.decl_padded(
    "moe_swiglu_bwd_quant (padded columns)",
    &padded_swiglu_bwd(),
    &[("i", |s| s.1)],
);

/// The inputs of a grouped dual cast: x (act_dual), gu (swiglu_quant), or grad_h and gu
/// (swiglu_bwd_quant).
pub(crate) enum DualIn<'a> {
    Act(HpSrc<'a>),
    Swiglu(HpSrc<'a>),
    SwigluBwd(HpSrc<'a>, HpSrc<'a>),
}

impl Context {
    /// The grouped dual cast of `input` on (m, cols): [`Context::moe_act_dual`],
    /// [`Context::moe_swiglu_quant`] or [`Context::moe_swiglu_bwd_quant`], or with
    /// `pad = Some((m_cap, offs_pad))` the same with the column output `o.out_col` in the
    /// padded layout of m_cap rows: group g's rows at `[offs_pad[g-1], offs_pad[g])`, each
    /// group padded to a multiple of 16 rows (the 2D x 2D wgrad GEMM's library path), every
    /// other byte 0x00, `offs_pad` receiving the padded END offsets
    /// ([`reference::moe::pad_cols`]; the experts recipe's wgrad operands with
    /// [`crate::RecipeParams::pad_wgrad`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn moe_dual(
        &self,
        p: &MoeCastParams,
        (m, cols): (usize, usize),
        input: DualIn<'_>,
        offs: Src<'_, i32>,
        o: DualOut<'_>,
        pad: Option<(usize, Dst<'_, i32>)>,
        stream: StreamRef,
    ) -> Result<()> {
        let Some((m_cap, offs_pad)) = pad else {
            return match input {
                DualIn::Act(x) => self.moe_act_dual(p, m, cols, x, offs, o, stream),
                DualIn::Swiglu(gu) => self.moe_swiglu_quant(p, m, cols, gu, offs, o, stream),
                DualIn::SwigluBwd(dh, gu) => {
                    self.moe_swiglu_bwd_quant(p, m, cols, dh, gu, offs, o, stream)
                }
            };
        };
        let [a, b, c, d] = o.views();
        let (offs, op) = (offs.into(), offs_pad.into());
        let s = (m, cols, m_cap);
        match input {
            DualIn::Act(x) => {
                let views = [x.into(), offs, a, b, c, d, op];
                self.run(&MOE_ACT_DUAL_PADDED, p, s, views, stream)
            }
            DualIn::Swiglu(gu) => {
                let views = [gu.into(), offs, a, b, c, d, op];
                self.run(&MOE_SWIGLU_QUANT_PADDED, p, s, views, stream)
            }
            DualIn::SwigluBwd(dh, gu) => {
                let views = [dh.into(), gu.into(), offs, a, b, c, d, op];
                self.run(&MOE_SWIGLU_BWD_QUANT_PADDED, p, s, views, stream)
            }
        }
    }
}

op_methods! {
    /// Expert weights (E,K,N) column-major (`x[e*K*N + n*K + k]`) to both grouped-GEMM
    /// operands from one call: `out` / `scales` exactly as [`Context::colwise_3d`] writes them
    /// (forward B, `scales[e*N + n]` over k) and `out_t` / `scales_t` exactly as
    /// [`Context::rowwise_3d_transpose_rhs`] (dgrad B, `out_t[e*N*K + k*N + n]`,
    /// `scales_t[e*K + k]` over n). k and n must be > 0.
    fn moe_weights_dual(p: &MoeCastParams, e: usize, k: usize, n: usize;
        x: HpSrc<'_>, out: Dst<'_, u8>, scales: Dst<'_, f32>, out_t: Dst<'_, u8>,
        scales_t: Dst<'_, f32>) = MOE_WEIGHTS_DUAL (e, k, n);

    /// [`Context::moe_weights_dual`] of the weight (E,K,N) given as its two halves along n
    /// (`x0`, `x1`: e*k*(n/2) elements each, one dtype; each expert's first n/2 rows of k from
    /// `x0`, the others from `x1`; n even), e.g. the experts' W13 as torchtitan's w1 and w3:
    /// the outputs of the stacked weight, bit for bit, without the stacked copy on a GPU.
    fn moe_weights_dual_halves(p: &MoeCastParams, e: usize, k: usize, n: usize;
        x0: HpSrc<'_>, x1: HpSrc<'_>, out: Dst<'_, u8>, scales: Dst<'_, f32>,
        out_t: Dst<'_, u8>, scales_t: Dst<'_, f32>) = MOE_WEIGHTS_DUAL_HALVES (e, k, n);
}

/// The public methods of the one-input grouped ops: `fn name(cols, input) = DECL;` makes
/// `pub fn name(&self, p, m, cols, input: HpSrc, offs, o: DualOut, stream) -> Result<()>`,
/// which runs `DECL` on (m, cols) (the doc comment goes with it).
macro_rules! grouped_methods {
    ($($(#[$doc:meta])* fn $name:ident($cols:ident, $input:ident) = $decl:ident;)+) => {
        impl Context {$(
            $(#[$doc])*
            pub fn $name(
                &self,
                p: &MoeCastParams,
                m: usize,
                $cols: usize,
                $input: HpSrc<'_>,
                offs: Src<'_, i32>,
                o: DualOut<'_>,
                stream: StreamRef,
            ) -> Result<()> {
                let [a, b, c, d] = o.views();
                let views = [$input.into(), offs.into(), a, b, c, d];
                self.run(&$decl, p, (m, $cols), views, stream)
            }
        )+}
    };
}

grouped_methods! {
    /// Activations or gradients x (M,K) row-major with END offsets along M to both grouped
    /// GEMM operands from one call: `o.out` / `o.scales` exactly as [`Context::rowwise_2d`]
    /// writes them (every row, the 2D x 3D operand) and `o.out_col` / `o.scales_col` exactly
    /// as [`Context::per_group_colwise`] (the 2D x 2D wgrad operand; rows past `offs[G-1]`
    /// are not written there). k must be > 0.
    fn moe_act_dual(k, x) = MOE_ACT_DUAL;

    /// SwiGLU forward fused with the down projection's casts: `gu` (M, 2I) row-major is the
    /// gate/up GEMM output (gate = columns `[0, I)`, up = `[I, 2I)`); `h = silu(gate) * up`
    /// (M, I), computed in the input dtype's arithmetic as torch's `F.silu(g) * u`
    /// (`reference::moe::swiglu_h`), is cast as [`Context::moe_act_dual`] casts x, without
    /// being stored. i must be > 0.
    fn moe_swiglu_quant(i, gu) = MOE_SWIGLU_QUANT;
}

impl Context {
    /// SwiGLU backward fused with the gate/up projection's casts: from `grad_h` (M, I) and the
    /// forward's `gu` (M, 2I), both of one dtype (`NotSupported` otherwise),
    /// `d = [d_gate | d_up]` (M, 2I) as torch's autograd of `F.silu(g) * u` computes it
    /// (`reference::moe::swiglu_bwd`) is cast as [`Context::moe_act_dual`] casts x (K = 2I),
    /// without being stored. i must be > 0.
    pub fn moe_swiglu_bwd_quant(
        &self,
        p: &MoeCastParams,
        m: usize,
        i: usize,
        grad_h: HpSrc<'_>,
        gu: HpSrc<'_>,
        offs: Src<'_, i32>,
        o: DualOut<'_>,
        stream: StreamRef,
    ) -> Result<()> {
        let [a, b, c, d] = o.views();
        let views = [grad_h.into(), gu.into(), offs.into(), a, b, c, d];
        self.run(&MOE_SWIGLU_BWD_QUANT, p, (m, i), views, stream)
    }
}
