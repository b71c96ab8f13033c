//! The MoE routing ops on [`Context`] (issue 14; docs/OPS.md, "MoE routing"; definitions in
//! `reference/route.rs`): the token dispatch fused with the padding of each expert's group and
//! both casts of the grouped GEMMs (no bf16 permuted or padded copy of the tokens), and the
//! way back: the score-weighted combine (un-permute) and its backward, all as gathers through
//! the routing's permutation (no atomics, no sort). Each op is one [`OpDecl`]
//! (`dispatch.rs`); [`Context::run`] validates every argument first (nothing is written on
//! error), then runs exactly one backend.

use half::bf16;

use crate::context::Context;
use crate::dispatch::{
    BufDecl, Dev, Elem, GpuRun, Host, NoParams, OpDecl, device_bytes, op_methods,
};
use crate::error::{Error, Result};
use crate::format::Fp8Format;
use crate::params::{MoeCastParams, ScaleOutput};
use crate::reference::{self, Dual, Rule, Scaled, route::Route};
use crate::runtime::check_status;
use crate::sys;
use crate::validate::checked_mul;
use crate::view::{Dst, HpSrc, Src, StreamRef, with_hp};

/// The shape of a dispatch: `t` tokens of `k` columns, `topk` routed slots per token
/// (`t*topk` slots), groups padded to multiples of `align` rows, `m_cap` rows in the padded
/// layout (at least `t*topk + groups*(align-1)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DispatchShape {
    pub t: usize,
    pub k: usize,
    pub topk: usize,
    pub align: usize,
    pub m_cap: usize,
}

/// The shape of a combine: `t` tokens of `k` columns, `topk` slots per token, `m_cap` rows of
/// the experts' output in the padded layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CombineShape {
    pub t: usize,
    pub k: usize,
    pub topk: usize,
    pub m_cap: usize,
}

fn slots(t: usize, topk: usize) -> Result<usize> {
    checked_mul("t*topk", t, topk)
}

/// The padded layout must hold any routing, and every row index must fit an int32.
fn check_dispatch(s: &DispatchShape, g: usize) -> Result<()> {
    let m = slots(s.t, s.topk)?;
    let worst = reference::route::padded_rows(m, g, s.align)
        .ok_or_else(|| Error::SizeOverflow("t*topk + G*(align-1) overflows".into()))?;
    if s.m_cap < worst {
        return Err(Error::InvalidShape(format!(
            "m_cap = {} < t*topk + G*(align-1) = {worst}: padded groups may not fit",
            s.m_cap
        )));
    }
    if s.m_cap > i32::MAX as usize {
        return Err(Error::SizeOverflow(format!(
            "m_cap = {} does not fit the int32 row indices",
            s.m_cap
        )));
    }
    Ok(())
}

fn check_combine(s: &CombineShape) -> Result<()> {
    slots(s.t, s.topk)?;
    if s.m_cap > i32::MAX as usize {
        return Err(Error::SizeOverflow(format!(
            "m_cap = {} does not fit the int32 row indices",
            s.m_cap
        )));
    }
    Ok(())
}

/// The buffers of a dispatch after its high-precision input (`x`, or `dout` and `weights`).
const fn dispatch_tail() -> [BufDecl<DispatchShape>; 8] {
    [
        BufDecl::input("perm", Elem::I32, |s, _| slots(s.t, s.topk)),
        BufDecl::offsets("offs", |s| s.t * s.topk),
        BufDecl::output("offs_pad", Elem::I32, |_, g| Ok(g)),
        BufDecl::output("slot_row", Elem::I32, |s, _| slots(s.t, s.topk)),
        BufDecl::output("out", Elem::U8, |s, _| checked_mul("m_cap*k", s.m_cap, s.k)),
        BufDecl::output("scales", Elem::F32, |s, _| Ok(s.m_cap)),
        BufDecl::output("out_col", Elem::U8, |s, _| {
            checked_mul("m_cap*k", s.m_cap, s.k)
        }),
        BufDecl::output("scales_col", Elem::F32, |s, g| checked_mul("g*k", g, s.k)),
    ]
}

fn len_tk(s: &DispatchShape, _: usize) -> Result<usize> {
    checked_mul("t*k", s.t, s.k)
}

/// The dispatches (`weighted`: the combine's backward, input `dout` scaled per slot).
const fn dispatch_decl(
    c_name: &'static str,
    bufs: &'static [BufDecl<DispatchShape>],
    weighted: bool,
) -> OpDecl<MoeCastParams, DispatchShape> {
    OpDecl {
        c_name,
        bufs,
        nonzero: &[("k", |s| s.k), ("topk", |s| s.topk), ("align", |s| s.align)],
        check: Some(|_, s, g| check_dispatch(s, g)),
        gpu_run: GpuRun::Checked {
            noop: |s, g| s.m_cap == 0 && g == 0,
        },
        cpu: if weighted {
            |p, fmt, s, h| dispatch_cpu(p, fmt, s, h, true)
        } else {
            |p, fmt, s, h| dispatch_cpu(p, fmt, s, h, false)
        },
        gpu: if weighted {
            |ctx, p, fmt, s, d, st| dispatch_gpu(ctx, p, fmt, s, d, st, true)
        } else {
            |ctx, p, fmt, s, d, st| dispatch_gpu(ctx, p, fmt, s, d, st, false)
        },
    }
}

fn dispatch_cpu(
    p: &MoeCastParams,
    fmt: Fp8Format,
    s: &DispatchShape,
    h: &mut Host<'_>,
    weighted: bool,
) -> Result<()> {
    let route = Route {
        perm: h.src("perm"),
        offs: h.src("offs"),
        topk: s.topk,
        align: s.align,
        m_cap: s.m_cap,
    };
    let (input, weights) = if weighted {
        ("dout", Some(h.src::<f32>("weights")))
    } else {
        ("x", None)
    };
    let (offs_pad, slot_row) = (h.dst("offs_pad"), h.dst("slot_row"));
    let out = Dual {
        rows: Scaled::new(h.dst("out"), h.dst("scales")),
        cols: Scaled::new(h.dst("out_col"), h.dst("scales_col")),
    };
    let rule = Rule::new(fmt, p.pow2_scales);
    with_hp!(h.hp(input), |x| {
        reference::route::dispatch_dual(
            rule, p.scales, s.k, x, weights, route, offs_pad, slot_row, out,
        )
    })
}

impl Context {
    /// Device bytes of zeroed workspace the dispatches need for `groups` groups.
    pub fn moe_route_workspace_size(&self, groups: usize) -> Result<usize> {
        // SAFETY: arithmetic on the argument; writes the out-pointer only.
        device_bytes("moe route workspace size", |b| unsafe {
            sys::hipfp8_moe_route_workspace_bytes(groups as i64, b)
        })
    }
}

fn dispatch_gpu(
    ctx: &Context,
    p: &MoeCastParams,
    fmt: Fp8Format,
    s: &DispatchShape,
    d: &Dev,
    stream: StreamRef,
    weighted: bool,
) -> Result<()> {
    let g = d.groups();
    let (x, w) = if weighted {
        (d.ptr("dout"), d.ptr("weights"))
    } else {
        (d.ptr("x"), std::ptr::null_mut())
    };
    let dtype = d.dtype(if weighted { "dout" } else { "x" });
    ctx.with_zeroed_or_null(ctx.moe_route_workspace_size(g)?, stream, |ws| {
        // SAFETY: validated by Context::run: device memory of this GPU with t*k inputs,
        // t*topk weights (or null), perm and slot_row entries, G offsets in and out, m_cap*k
        // bytes per FP8 output, m_cap and G*k scales, m_cap >= t*topk + G*(align-1) so every
        // padded row fits; offsets and permutation entries are clamped by the kernels; `ws`
        // is the stream's zeroed workspace of the size the launcher asked for; work is only
        // queued on `stream`.
        let st = unsafe {
            sys::hipfp8_moe_dispatch_dual_launch(
                x,
                w,
                d.ptr("perm"),
                d.ptr("offs"),
                d.ptr("offs_pad"),
                d.ptr("slot_row"),
                d.ptr("out"),
                d.ptr("scales"),
                d.ptr("out_col"),
                d.ptr("scales_col"),
                s.t as i64,
                s.k as i64,
                s.topk as i64,
                g as i64,
                s.align as i64,
                s.m_cap as i64,
                fmt as i32,
                p.pow2_scales as i32,
                (p.scales == ScaleOutput::Dequant) as i32,
                dtype,
                ws,
                stream.0,
            )
        };
        check_status(
            if weighted {
                "moe_combine_bwd_dual"
            } else {
                "moe_dispatch_dual"
            },
            st,
        )
    })
}

static DISPATCH_BUFS: [BufDecl<DispatchShape>; 9] = {
    let [a, b, c, d, e, f, g, h] = dispatch_tail();
    [BufDecl::hp("x", len_tk), a, b, c, d, e, f, g, h]
};

static COMBINE_BWD_DUAL_BUFS: [BufDecl<DispatchShape>; 10] = {
    let [a, b, c, d, e, f, g, h] = dispatch_tail();
    let w = BufDecl::input("weights", Elem::F32, |s: &DispatchShape, _| {
        slots(s.t, s.topk)
    });
    [BufDecl::hp("dout", len_tk), w, a, b, c, d, e, f, g, h]
};

#[doc(hidden)]
pub static MOE_DISPATCH_DUAL: OpDecl<MoeCastParams, DispatchShape> =
    dispatch_decl("hipfp8_moe_dispatch_dual", &DISPATCH_BUFS, false);

#[doc(hidden)]
pub static MOE_COMBINE_BWD_DUAL: OpDecl<MoeCastParams, DispatchShape> =
    dispatch_decl("hipfp8_moe_combine_bwd_dual", &COMBINE_BWD_DUAL_BUFS, true);

fn len_ctk(s: &CombineShape, _: usize) -> Result<usize> {
    checked_mul("t*k", s.t, s.k)
}

fn len_cy(s: &CombineShape, _: usize) -> Result<usize> {
    checked_mul("m_cap*k", s.m_cap, s.k)
}

fn len_cslots(s: &CombineShape, _: usize) -> Result<usize> {
    slots(s.t, s.topk)
}

#[doc(hidden)]
pub static MOE_COMBINE: OpDecl<NoParams, CombineShape> = OpDecl {
    c_name: "hipfp8_moe_combine",
    bufs: &[
        BufDecl::hp("y", len_cy),
        BufDecl::input("slot_row", Elem::I32, len_cslots),
        BufDecl::input("weights", Elem::F32, len_cslots),
        BufDecl::output("out", Elem::Bf16, len_ctk),
    ],
    nonzero: &[],
    check: Some(|_, s, _| check_combine(s)),
    gpu_run: GpuRun::Checked {
        noop: |s, _| s.t == 0 || s.k == 0,
    },
    cpu: |_, _, s, h| {
        let (rows, w, out) = (h.src("slot_row"), h.src("weights"), h.dst("out"));
        let shape = (s.t, s.k, s.topk, s.m_cap);
        with_hp!(h.hp("y"), |y| reference::route::combine(
            shape, y, rows, w, out
        ))
    },
    gpu: |_, _, _, s, d, stream| {
        // SAFETY: validated by Context::run: device memory of this GPU with m_cap*k inputs,
        // t*topk slot rows and weights, t*k outputs; slot rows outside [0, m_cap) are skipped
        // by the kernel; the launcher only queues work on `stream`.
        let st = unsafe {
            sys::hipfp8_moe_combine_launch(
                d.ptr("y"),
                d.ptr("slot_row"),
                d.ptr("weights"),
                d.ptr("out"),
                s.t as i64,
                s.k as i64,
                s.topk as i64,
                s.m_cap as i64,
                d.dtype("y"),
                stream.0,
            )
        };
        check_status("moe_combine", st)
    },
};

#[doc(hidden)]
pub static MOE_COMBINE_BWD_SCORES: OpDecl<NoParams, CombineShape> = OpDecl {
    c_name: "hipfp8_moe_combine_bwd_scores",
    bufs: &[
        BufDecl::hp("dout", len_ctk),
        BufDecl::hp_like("y", "dout", len_cy),
        BufDecl::input("slot_row", Elem::I32, len_cslots),
        BufDecl::output("dweights", Elem::F32, len_cslots),
    ],
    nonzero: &[],
    check: Some(|_, s, _| check_combine(s)),
    gpu_run: GpuRun::Checked {
        noop: |s, _| s.t == 0 || s.topk == 0,
    },
    cpu: |_, _, s, h| {
        let (rows, dw) = (h.src("slot_row"), h.dst("dweights"));
        let shape = (s.t, s.k, s.topk, s.m_cap);
        match (h.hp("dout"), h.hp("y")) {
            (HpSrc::Bf16(a), HpSrc::Bf16(b)) => reference::route::combine_bwd_scores(
                shape,
                a.host_slice(),
                b.host_slice(),
                rows,
                dw,
            ),
            (HpSrc::F32(a), HpSrc::F32(b)) => reference::route::combine_bwd_scores(
                shape,
                a.host_slice(),
                b.host_slice(),
                rows,
                dw,
            ),
            // Context::run checked one dtype (`hp_like`).
            _ => Err(Error::NotSupported("mixed input dtypes".into())),
        }
    },
    gpu: |_, _, _, s, d, stream| {
        // SAFETY: validated by Context::run: device memory of this GPU with t*k and m_cap*k
        // inputs of one dtype, t*topk slot rows and outputs; slot rows outside [0, m_cap)
        // give 0; the launcher only queues work on `stream`.
        let st = unsafe {
            sys::hipfp8_moe_combine_bwd_scores_launch(
                d.ptr("dout"),
                d.ptr("y"),
                d.ptr("slot_row"),
                d.ptr("dweights"),
                s.t as i64,
                s.k as i64,
                s.topk as i64,
                s.m_cap as i64,
                d.dtype("dout"),
                stream.0,
            )
        };
        check_status("moe_combine_bwd_scores", st)
    },
};

op_methods! {
    /// Token dispatch fused with the padding of each expert group and both grouped-GEMM casts:
    /// x (t, k) row-major, `perm[t*topk]` the routed slots (`slot = token*topk + j`) in expert
    /// order (a permutation), `offs[G]` END offsets over it. Expert g's tokens go, in `perm`
    /// order, to the padded rows starting at `offs_pad[g-1]` (0 for g = 0), each group padded
    /// with zero rows to a multiple of `align` rows; `offs_pad[g]` receives the padded END
    /// offsets and `slot_row[slot]` the padded row of each slot (-1 for a slot at a position
    /// past `offs[G-1]`). `out`/`scales` and `out_col`/`scales_col` are exactly what
    /// [`Context::moe_act_dual`] writes for the padded matrix on `offs_pad`, the rows from
    /// `offs_pad[G-1]` to `m_cap` zero bytes in both layouts; the scales forward or dequant
    /// as `p.scales` says. Needs k, topk, align > 0 and
    /// `m_cap >= t*topk + G*(align-1)`; a `perm` that is not a permutation is
    /// `InvalidOffsets` on the CPU (the kernels write zero rows for entries out of range).
    fn moe_dispatch_dual(p: &MoeCastParams, s: DispatchShape;
        x: HpSrc<'_>, perm: Src<'_, i32>, offs: Src<'_, i32>, offs_pad: Dst<'_, i32>,
        slot_row: Dst<'_, i32>, out: Dst<'_, u8>, scales: Dst<'_, f32>, out_col: Dst<'_, u8>,
        scales_col: Dst<'_, f32>) = MOE_DISPATCH_DUAL s;

    /// The combine's backward into the experts' output gradient, in the dispatch's padded
    /// layout and cast as [`Context::moe_dispatch_dual`] casts: the row of slot s is
    /// `T(weights[s] * dout[s / topk])` (one f32 multiply rounded to dout's dtype T), with the
    /// same `perm`, `offs`, `align` and `m_cap` as the forward's dispatch (so `offs_pad` and
    /// `slot_row` come out equal to the forward's).
    fn moe_combine_bwd_dual(p: &MoeCastParams, s: DispatchShape;
        dout: HpSrc<'_>, weights: Src<'_, f32>, perm: Src<'_, i32>, offs: Src<'_, i32>,
        offs_pad: Dst<'_, i32>, slot_row: Dst<'_, i32>, out: Dst<'_, u8>, scales: Dst<'_, f32>,
        out_col: Dst<'_, u8>, scales_col: Dst<'_, f32>) = MOE_COMBINE_BWD_DUAL s;

    /// The score-weighted combine (un-permute) of the experts' output y (m_cap, k) in the
    /// padded layout: `out[t] = bf16(sum_j weights[t*topk+j] * y[slot_row[t*topk+j]])`, f32
    /// products added in j order and rounded once; slots with row -1 add nothing. A slot row
    /// neither -1 nor in [0, m_cap) is `InvalidOffsets` on the CPU (skipped by the kernel).
    fn moe_combine(p: &NoParams, s: CombineShape;
        y: HpSrc<'_>, slot_row: Src<'_, i32>, weights: Src<'_, f32>, out: Dst<'_, bf16>)
        = MOE_COMBINE s;

    /// The combine's gradient of the weights: `dweights[s] = dot(dout[s / topk], y[slot_row[s]])`
    /// in f32 (products rounded, then added in the order `reference::route::dot_lanes`
    /// defines), 0 for a slot with row -1; dout (t, k) and y of one dtype.
    fn moe_combine_bwd_scores(p: &NoParams, s: CombineShape;
        dout: HpSrc<'_>, y: HpSrc<'_>, slot_row: Src<'_, i32>, dweights: Dst<'_, f32>)
        = MOE_COMBINE_BWD_SCORES s;
}
