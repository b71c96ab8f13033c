//! The scale-and-cast op family on [`Context`]: rowwise 2D, 3D expert weights, per-group
//! (jagged) rowwise/colwise, tensorwise, blockwise and the token-group-padding cast. Each op
//! is one [`OpDecl`] (buffers, shape checks, reference, launcher; `dispatch.rs`) and a
//! one-line method; [`Context::run`] validates every argument first (so nothing is written on
//! error), then runs exactly one backend.

use crate::context::Context;
use crate::dispatch::{
    BufDecl, Dev, Dim, Elem, GpuRun, Host, LenFn, OpDecl, cast_cpu, dtype_name, empty_mk,
    launch_cast, len_m, len_mk, len_one, never_noop, op_methods,
};
use crate::error::{Error, Result};
use crate::format::Fp8Format;
use crate::params::CastParams;
use crate::reference::{self, Grouped, Rule, Scaled};
use crate::runtime::check_status;
use crate::sys;
use crate::validate::{check_m_cap, check_wgrad_cap, checked_mul, require_no_pow2};
use crate::view::{Dst, HpSrc, Src, StreamRef, with_hp};

/// The shape of the 3D expert-weight casts: (e, k, n).
type Ekn = (usize, usize, usize);

fn len_ekn(&(e, k, n): &Ekn, _: usize) -> Result<usize> {
    checked_mul("e*k*n", checked_mul("e*k", e, k)?, n)
}

fn empty_ekn(&(e, k, n): &Ekn, _: usize) -> bool {
    e == 0 || k == 0 || n == 0
}

/// The ops of this family with one input `x`, FP8 `out` and f32 `scales` (the reference
/// and launcher of `decl` say the rest).
const fn cast_bufs<S>(scales: LenFn<S>, x: LenFn<S>) -> [BufDecl<S>; 3] {
    [
        BufDecl::hp("x", x),
        BufDecl::output("out", Elem::U8, x),
        BufDecl::output("scales", Elem::F32, scales),
    ]
}

/// The (m, k) casts whose launchers take (x, out, scales, rows, k, format, pow2, dtype,
/// stream) ([`launch_cast`]).
#[derive(Clone, Copy)]
enum RowKernel {
    Rowwise,
    Block1x128,
    Block128x128,
}

/// k > 0 (the reduced dimension of a rowwise cast).
const K_NONZERO: &[(&str, Dim<(usize, usize)>)] = &[("k", |s| s.1)];

impl RowKernel {
    /// The declaration of the (m, k) op of the kernel `self` with the buffers `bufs`
    /// (`k_nonzero`: the op needs k > 0).
    const fn decl(
        self,
        c_name: &'static str,
        bufs: &'static [BufDecl<(usize, usize)>; 3],
        k_nonzero: bool,
    ) -> OpDecl<CastParams, (usize, usize)> {
        use reference::quant::{blockwise_1x128, blockwise_128x128};
        OpDecl {
            c_name,
            bufs,
            nonzero: if k_nonzero { K_NONZERO } else { &[] },
            check: None,
            gpu_run: GpuRun::Checked { noop: empty_mk },
            cpu: match self {
                RowKernel::Rowwise => cast_cpu!(reference::rowwise_2d, Rule::new, pow2_scales),
                RowKernel::Block1x128 => cast_cpu!(blockwise_1x128, Rule::new, pow2_scales),
                RowKernel::Block128x128 => cast_cpu!(blockwise_128x128, Rule::new, pow2_scales),
            },
            gpu: match self {
                RowKernel::Rowwise => |_, p, fmt, &s, d, st| {
                    let pw = p.pow2_scales;
                    launch_cast!(
                        sys::hipfp8_rowwise_2d_launch,
                        "rowwise_2d",
                        pw,
                        fmt,
                        s,
                        d,
                        st
                    )
                },
                RowKernel::Block1x128 => |_, p, fmt, &s, d, st| {
                    let (op, pw) = ("blockwise_1x128", p.pow2_scales);
                    launch_cast!(sys::hipfp8_blockwise_1x128_launch, op, pw, fmt, s, d, st)
                },
                RowKernel::Block128x128 => |_, p, fmt, &s, d, st| {
                    let (op, pw) = ("blockwise_128x128", p.pow2_scales);
                    launch_cast!(sys::hipfp8_blockwise_128x128_launch, op, pw, fmt, s, d, st)
                },
            },
        }
    }
}

#[doc(hidden)]
pub static ROWWISE_2D: OpDecl<CastParams, (usize, usize)> =
    RowKernel::Rowwise.decl("hipfp8_rowwise_2d", &cast_bufs(len_m, len_mk), true);

/// The reduced dimension of each 3D cast must be non-zero: k (colwise_3d), n (the transpose).
const K_OF_EKN: &[(&str, Dim<Ekn>)] = &[("k", |s| s.1)];
const N_OF_EKN: &[(&str, Dim<Ekn>)] = &[("n", |s| s.2)];

/// The declaration of a 3D expert-weight cast with the buffers `bufs`: colwise_3d (scales over
/// k), or rowwise_3d_transpose_rhs when `transpose` (scales over n).
const fn ekn_decl(
    transpose: bool,
    c_name: &'static str,
    bufs: &'static [BufDecl<Ekn>; 3],
) -> OpDecl<CastParams, Ekn> {
    use reference::quant::{colwise_3d, rowwise_3d_transpose_rhs};
    OpDecl {
        c_name,
        bufs,
        nonzero: if transpose { N_OF_EKN } else { K_OF_EKN },
        check: None,
        gpu_run: GpuRun::Checked { noop: empty_ekn },
        cpu: if transpose {
            cast_cpu!(rowwise_3d_transpose_rhs, Rule::new, pow2_scales)
        } else {
            cast_cpu!(colwise_3d, Rule::new, pow2_scales)
        },
        gpu: if transpose {
            launch_transpose_rhs
        } else {
            // Column-major (E,K,N) is E*N contiguous runs of K: the rowwise kernel over E*N rows.
            |_, p, fmt, &(e, k, n), d, st| {
                let (op, pw) = ("colwise_3d", p.pow2_scales);
                launch_cast!(
                    sys::hipfp8_rowwise_2d_launch,
                    op,
                    pw,
                    fmt,
                    (e * n, k),
                    d,
                    st
                )
            }
        },
    }
}

/// The GPU arm of rowwise_3d_transpose_rhs.
fn launch_transpose_rhs(
    ctx: &Context,
    p: &CastParams,
    fmt: Fp8Format,
    &(e, k, n): &Ekn,
    d: &Dev,
    stream: StreamRef,
) -> Result<()> {
    let (x, o, s) = (d.ptr("x"), d.ptr("out"), d.ptr("scales"));
    let (f, pw, dt) = (fmt as i32, p.pow2_scales as i32, d.dtype("x"));
    let (e64, k64, n64) = (e as i64, k as i64, n as i64);
    ctx.with_colwise_workspace(e, k, 0, stream, |ws| {
        // SAFETY: validated by Context::run: device memory of this GPU with e*k*n inputs
        // and output bytes and e*k scales; `ws` is the context's zeroed workspace of the
        // size the launcher asked for; work is only queued on `stream`.
        let st = unsafe {
            sys::hipfp8_rowwise_3d_transpose_rhs_launch(
                x, o, s, e64, k64, n64, f, pw, dt, ws, stream.0,
            )
        };
        check_status("rowwise_3d_transpose_rhs", st)
    })
}

#[doc(hidden)]
pub static COLWISE_3D: OpDecl<CastParams, Ekn> = ekn_decl(
    false,
    "hipfp8_colwise_3d",
    &cast_bufs(|&(e, _, n), _| checked_mul("e*n", e, n), len_ekn),
);

#[doc(hidden)]
pub static ROWWISE_3D_TRANSPOSE_RHS: OpDecl<CastParams, Ekn> = ekn_decl(
    true,
    "hipfp8_rowwise_3d_transpose_rhs",
    &cast_bufs(|&(e, k, _), _| checked_mul("e*k", e, k), len_ekn),
);

/// Queue per_group_colwise (`COLWISE`) or per_group_rowwise over (m, k) with `d.groups()`
/// groups, with the workspace its launcher asks for.
fn launch_grouped<const COLWISE: bool>(
    ctx: &Context,
    p: &CastParams,
    fmt: Fp8Format,
    &(m, k): &(usize, usize),
    d: &Dev,
    stream: StreamRef,
) -> Result<()> {
    let (x, offs, o, s) = (d.ptr("x"), d.ptr("offs"), d.ptr("out"), d.ptr("scales"));
    let groups = d.groups();
    let (m, k64, g) = (m as i64, k as i64, groups as i64);
    let (f, pw, dt, st) = (fmt as i32, p.pow2_scales as i32, d.dtype("x"), stream.0);
    let launch = |ws| {
        // SAFETY: validated by Context::run: device memory of this GPU with m*k inputs and
        // output bytes, the G scales per column (colwise) or row (rowwise) and G offsets
        // (clamped by the kernel, never read on the host); `ws` is the zeroed workspace
        // (colwise) or null or the zeroed scratch (rowwise) of the size the launcher asked
        // for; work is only queued on `stream`.
        let code = unsafe {
            if COLWISE {
                sys::hipfp8_per_group_colwise_launch(x, offs, o, s, m, k64, g, f, pw, 0, dt, ws, st)
            } else {
                sys::hipfp8_per_group_rowwise_launch(x, offs, o, s, m, k64, g, f, pw, dt, ws, st)
            }
        };
        check_status(
            if COLWISE {
                "per_group_colwise"
            } else {
                "per_group_rowwise"
            },
            code,
        )
    };
    if COLWISE {
        ctx.with_colwise_workspace(groups, k, 0, stream, launch)
    } else {
        ctx.with_zeroed_or_null(ctx.grouped_scratch_size(groups)?, stream, launch)
    }
}

/// The declaration of per_group_colwise (`colwise`: offsets along m, `scales[g*k]`) or
/// per_group_rowwise (offsets along k, `scales[g*m]`) with the buffers `bufs`.
const fn grouped_decl(
    colwise: bool,
    c_name: &'static str,
    bufs: &'static [BufDecl<(usize, usize)>; 4],
) -> OpDecl<CastParams, (usize, usize)> {
    use reference::quant::{per_group_colwise, per_group_rowwise};
    OpDecl {
        c_name,
        bufs,
        nonzero: &[],
        check: None,
        gpu_run: GpuRun::Checked {
            noop: if colwise {
                |&(_, k), g| g == 0 || k == 0
            } else {
                |&(m, _), g| g == 0 || m == 0
            },
        },
        cpu: if colwise {
            cast_cpu!(per_group_colwise, Rule::new, pow2_scales, offs)
        } else {
            cast_cpu!(per_group_rowwise, Rule::new, pow2_scales, offs)
        },
        gpu: if colwise {
            launch_grouped::<true>
        } else {
            launch_grouped::<false>
        },
    }
}

/// The buffers of a per-group cast: x, offsets along `extent`, `out` and `scales`.
const fn grouped_bufs(
    extent: Dim<(usize, usize)>,
    scales: LenFn<(usize, usize)>,
) -> [BufDecl<(usize, usize)>; 4] {
    [
        BufDecl::hp("x", len_mk),
        BufDecl::offsets("offs", extent),
        BufDecl::output("out", Elem::U8, len_mk),
        BufDecl::output("scales", Elem::F32, scales),
    ]
}

#[doc(hidden)]
pub static PER_GROUP_COLWISE: OpDecl<CastParams, (usize, usize)> = grouped_decl(
    true,
    "hipfp8_per_group_colwise",
    &grouped_bufs(|s| s.0, |&(_, k), g| checked_mul("g*k", g, k)),
);

#[doc(hidden)]
pub static PER_GROUP_ROWWISE: OpDecl<CastParams, (usize, usize)> = grouped_decl(
    false,
    "hipfp8_per_group_rowwise",
    &grouped_bufs(|s| s.1, |&(m, _), g| checked_mul("g*m", g, m)),
);

/// The CPU arm of per_group_colwise_dual (`m_cap` None) and of its padded form into `m_cap`
/// rows.
fn dual_cpu(
    p: &CastParams,
    fmt: Fp8Format,
    (m, k1, k2): (usize, usize, usize),
    m_cap: Option<usize>,
    h: &mut Host<'_>,
) -> Result<()> {
    let offs = h.src("offs");
    let out1 = Scaled::new(h.dst("out1"), h.dst("scales1"));
    let out2 = Scaled::new(h.dst("out2"), h.dst("scales2"));
    let rule = Rule::new(fmt, p.pow2_scales);
    let padded = m_cap.map(|m_cap| (m_cap, h.dst("padded_offs")));
    let shape = (m, k1, k2);
    with_hp!(h.hp("x1"), |a| with_hp!(h.hp("x2"), |b| {
        reference::quant::per_group_colwise_dual(rule, shape, a, b, offs, out1, out2, padded)
    }))
}

/// The GPU arm of per_group_colwise_dual (`m_cap` None) and of its padded form into `m_cap`
/// rows: one input dtype for both tensors, the colwise workspace, the launcher.
fn launch_dual(
    ctx: &Context,
    p: &CastParams,
    fmt: Fp8Format,
    (m, k1, k2): (usize, usize, usize),
    m_cap: Option<usize>,
    d: &Dev,
    stream: StreamRef,
) -> Result<()> {
    let op = match m_cap {
        None => "per_group_colwise_dual",
        Some(_) => "per_group_colwise_dual_padded",
    };
    let (d1, d2) = (d.dtype("x1"), d.dtype("x2"));
    if d1 != d2 {
        return Err(Error::NotSupported(format!(
            "{op} on the GPU takes one input dtype for both tensors (got {} and {})",
            dtype_name(d1),
            dtype_name(d2)
        )));
    }
    let groups = d.groups();
    let (x1, x2, offs) = (d.ptr("x1"), d.ptr("x2"), d.ptr("offs"));
    let (o1, s1, o2, s2) = (
        d.ptr("out1"),
        d.ptr("scales1"),
        d.ptr("out2"),
        d.ptr("scales2"),
    );
    let (m, g, f, pw) = (m as i64, groups as i64, fmt as i32, p.pow2_scales as i32);
    ctx.with_colwise_workspace(groups, k1, k2, stream, |ws| {
        let (k1, k2, st) = (k1 as i64, k2 as i64, stream.0);
        // SAFETY: validated by Context::run: device memory of this GPU with m*k1 and m*k2
        // inputs, m*k1 and m*k2 (padded: m_cap*k1 and m_cap*k2) output bytes, G*k1 and G*k2
        // scales, G offsets in (and padded: out, m_cap >= m + 15*G so every padded row fits);
        // offsets are clamped by the kernel; `ws` is the zeroed colwise workspace of the size
        // the launcher asked for; the launcher only queues work on `stream`.
        let code = unsafe {
            match m_cap {
                None => sys::hipfp8_per_group_colwise_dual_launch(
                    x1, x2, offs, o1, s1, o2, s2, m, k1, k2, g, f, pw, d1, ws, st,
                ),
                Some(m_cap) => {
                    let (po, mc) = (d.ptr("padded_offs"), m_cap as i64);
                    sys::hipfp8_per_group_colwise_dual_padded_launch(
                        x1, x2, offs, o1, s1, o2, s2, po, m, k1, k2, mc, g, f, pw, 0, d1, ws, st,
                    )
                }
            }
        };
        check_status(op, code)
    })
}

#[doc(hidden)]
pub static PER_GROUP_COLWISE_DUAL: OpDecl<CastParams, (usize, usize, usize)> = OpDecl {
    c_name: "hipfp8_per_group_colwise_dual",
    bufs: &[
        BufDecl::hp("x1", |&(m, k1, _), _| checked_mul("m*k1", m, k1)),
        BufDecl::hp("x2", |&(m, _, k2), _| checked_mul("m*k2", m, k2)),
        BufDecl::offsets("offs", |s| s.0),
        BufDecl::output("out1", Elem::U8, |&(m, k1, _), _| {
            checked_mul("m*k1", m, k1)
        }),
        BufDecl::output("scales1", Elem::F32, |&(_, k1, _), g| {
            checked_mul("g*k1", g, k1)
        }),
        BufDecl::output("out2", Elem::U8, |&(m, _, k2), _| {
            checked_mul("m*k2", m, k2)
        }),
        BufDecl::output("scales2", Elem::F32, |&(_, _, k2), g| {
            checked_mul("g*k2", g, k2)
        }),
    ],
    nonzero: &[],
    check: None,
    gpu_run: GpuRun::Checked {
        noop: |&(_, k1, k2), g| g == 0 || (k1 == 0 && k2 == 0),
    },
    cpu: |p, fmt, &s, h| dual_cpu(p, fmt, s, None, h),
    gpu: |ctx, p, fmt, &s, d, stream| launch_dual(ctx, p, fmt, s, None, d, stream),
};

fn len_n(&n: &usize, _: usize) -> Result<usize> {
    Ok(n)
}

/// The buffers of tensorwise (`scale` an output) and of tensorwise_scaled (`scaled`: `scale`
/// the caller's input, before `out`).
const fn tensorwise_bufs(scaled: bool) -> [BufDecl<usize>; 4] {
    let x = BufDecl::hp("x", len_n);
    let out = BufDecl::output("out", Elem::U8, len_n);
    let amax = BufDecl::output("amax", Elem::F32, len_one);
    if scaled {
        [x, BufDecl::input("scale", Elem::F32, len_one), out, amax]
    } else {
        [x, out, BufDecl::output("scale", Elem::F32, len_one), amax]
    }
}

/// Queue tensorwise, or tensorwise_scaled (`scaled`: the caller's `scale` is read, not
/// derived and written), over `n` elements.
fn launch_tensorwise(
    scaled: bool,
    p: &CastParams,
    fmt: Fp8Format,
    n: usize,
    d: &Dev,
    stream: StreamRef,
) -> Result<()> {
    let (x, sc, o, a) = (d.ptr("x"), d.ptr("scale"), d.ptr("out"), d.ptr("amax"));
    let (n, f, dt, st) = (n as i64, fmt as i32, d.dtype("x"), stream.0);
    // SAFETY: validated by Context::run: device memory of this GPU with n inputs, n output
    // bytes, one scale (read when `scaled`, else written) and one amax; the launchers only
    // queue work on `stream`.
    let code = unsafe {
        if scaled {
            sys::hipfp8_tensorwise_scaled_launch(x, sc, o, a, n, f, dt, st)
        } else {
            sys::hipfp8_tensorwise_launch(x, o, sc, a, n, f, p.pow2_scales as i32, dt, st)
        }
    };
    check_status(
        if scaled {
            "tensorwise_scaled"
        } else {
            "tensorwise"
        },
        code,
    )
}

#[doc(hidden)]
pub static TENSORWISE: OpDecl<CastParams, usize> = OpDecl {
    c_name: "hipfp8_tensorwise",
    bufs: &tensorwise_bufs(false),
    nonzero: &[],
    check: None,
    // n == 0 still launches: the amax and scale of an empty tensor are written.
    gpu_run: GpuRun::Checked { noop: never_noop },
    cpu: |p, fmt, &n, h| {
        let (o, s, a) = (h.dst("out"), h.dst("scale"), h.dst("amax"));
        let rule = Rule::new(fmt, p.pow2_scales);
        (s[0], a[0]) = with_hp!(h.hp("x"), |x| reference::quant::tensorwise(
            rule,
            &x[..n],
            o
        ));
        Ok(())
    },
    gpu: |_, p, fmt, &n, d, stream| launch_tensorwise(false, p, fmt, n, d, stream),
};

#[doc(hidden)]
pub static TENSORWISE_SCALED: OpDecl<CastParams, usize> = OpDecl {
    c_name: "hipfp8_tensorwise_scaled",
    bufs: &tensorwise_bufs(true),
    nonzero: &[],
    check: Some(|p, _, _| require_no_pow2(p)),
    // n == 0 still launches: the amax of an empty tensor (0) is written.
    gpu_run: GpuRun::Checked { noop: never_noop },
    cpu: |_, fmt, &n, h| {
        let sc = h.src::<f32>("scale")[0];
        let (o, a) = (h.dst("out"), h.dst::<f32>("amax"));
        a[0] = with_hp!(h.hp("x"), |x| reference::quant::tensorwise_scaled(
            fmt,
            sc,
            &x[..n],
            o
        ));
        Ok(())
    },
    gpu: |_, p, fmt, &n, d, stream| launch_tensorwise(true, p, fmt, n, d, stream),
};

#[doc(hidden)]
pub static BLOCKWISE_1X128: OpDecl<CastParams, (usize, usize)> = RowKernel::Block1x128.decl(
    "hipfp8_blockwise_1x128",
    &cast_bufs(
        |&(m, k), _| checked_mul("m*ceil(k/128)", m, k.div_ceil(128)),
        len_mk,
    ),
    false,
);

#[doc(hidden)]
pub static BLOCKWISE_128X128: OpDecl<CastParams, (usize, usize)> = RowKernel::Block128x128.decl(
    "hipfp8_blockwise_128x128",
    &cast_bufs(
        |&(m, k), _| checked_mul("ceil(m/128)*ceil(k/128)", m.div_ceil(128), k.div_ceil(128)),
        len_mk,
    ),
    false,
);

/// The shape of the padding cast: (m, k, m_cap).
type Padded = (usize, usize, usize);

#[doc(hidden)]
pub static ROWWISE_2D_PADDED: OpDecl<CastParams, Padded> = OpDecl {
    c_name: "hipfp8_rowwise_2d_padded",
    bufs: &[
        BufDecl::hp("x", |&(m, k, _), _| checked_mul("m*k", m, k)),
        BufDecl::offsets("offs", |s| s.0),
        BufDecl::output("out", Elem::U8, |&(_, k, m_cap), _| {
            checked_mul("m_cap*k", m_cap, k)
        }),
        BufDecl::output("scales", Elem::F32, |s, _| Ok(s.2)),
        BufDecl::output("padded_offs", Elem::I32, |_, g| Ok(g)),
    ],
    nonzero: &[("k", |s| s.1)],
    check: Some(|_, &(m, _, m_cap), g| check_m_cap(m, m_cap, g)),
    gpu_run: GpuRun::Checked {
        noop: |_, g| g == 0,
    },
    cpu: |p, fmt, &(m, k, _), h| {
        let offs = h.src("offs");
        let (out, po) = (
            Scaled::new(h.dst("out"), h.dst("scales")),
            h.dst("padded_offs"),
        );
        let rule = Rule::new(fmt, p.pow2_scales);
        with_hp!(h.hp("x"), |x| {
            reference::quant::rowwise_2d_padded(rule, Grouped { m, k, x, offs }, out, po)
        })
    },
    gpu: |ctx, p, fmt, &(m, k, _), d, stream| {
        let g = d.groups();
        ctx.with_zeroed_or_null(ctx.grouped_scratch_size(g)?, stream, |ws| {
            // SAFETY: validated by Context::run: device memory of this GPU with m*k inputs,
            // m_cap*k output bytes, m_cap scales and G offsets in and out, m_cap >= m + 15*G so
            // every padded row fits; offsets are clamped by the kernel; `ws` is null or the
            // zeroed scratch of the size the launcher asked for; the launcher only queues work
            // on `stream`.
            let st = unsafe {
                sys::hipfp8_rowwise_2d_padded_launch(
                    d.ptr("x"),
                    d.ptr("offs"),
                    d.ptr("out"),
                    d.ptr("scales"),
                    d.ptr("padded_offs"),
                    m as i64,
                    k as i64,
                    g as i64,
                    fmt as i32,
                    p.pow2_scales as i32,
                    d.dtype("x"),
                    ws,
                    stream.0,
                )
            };
            check_status("rowwise_2d_padded", st)
        })
    },
};

/// The shape of the padded dual colwise cast: (m, k1, k2, m_cap).
type DualPadded = (usize, usize, usize, usize);

#[doc(hidden)]
pub static PER_GROUP_COLWISE_DUAL_PADDED: OpDecl<CastParams, DualPadded> = OpDecl {
    c_name: "hipfp8_per_group_colwise_dual_padded",
    bufs: &[
        BufDecl::hp("x1", |&(m, k1, _, _), _| checked_mul("m*k1", m, k1)),
        BufDecl::hp("x2", |&(m, _, k2, _), _| checked_mul("m*k2", m, k2)),
        BufDecl::offsets("offs", |s| s.0),
        BufDecl::output("out1", Elem::U8, |&(_, k1, _, m_cap), _| {
            checked_mul("m_cap*k1", m_cap, k1)
        }),
        BufDecl::output("scales1", Elem::F32, |&(_, k1, _, _), g| {
            checked_mul("g*k1", g, k1)
        }),
        BufDecl::output("out2", Elem::U8, |&(_, _, k2, m_cap), _| {
            checked_mul("m_cap*k2", m_cap, k2)
        }),
        BufDecl::output("scales2", Elem::F32, |&(_, _, k2, _), g| {
            checked_mul("g*k2", g, k2)
        }),
        BufDecl::output("padded_offs", Elem::I32, |_, g| Ok(g)),
    ],
    nonzero: &[],
    check: Some(|_, &(m, _, _, m_cap), g| check_wgrad_cap(m, m_cap, g)),
    gpu_run: GpuRun::Checked {
        noop: |_, g| g == 0,
    },
    cpu: |p, fmt, &(m, k1, k2, m_cap), h| dual_cpu(p, fmt, (m, k1, k2), Some(m_cap), h),
    gpu: |ctx, p, fmt, &(m, k1, k2, m_cap), d, stream| {
        launch_dual(ctx, p, fmt, (m, k1, k2), Some(m_cap), d, stream)
    },
};

impl Context {}

op_methods! {
    /// Rowwise (axiswise, last dim) scale-and-cast of an (m, k) row-major matrix:
    /// `out[i*k + j] = encode(x[i*k + j] * scales[i])`, `scales[i] = scale(amax(row i))`.
    /// Used for the forward A operand and the dgrad grad_out. Writes m*k bytes and m scales.
    fn rowwise_2d(p: &CastParams, m: usize, k: usize;
        x: HpSrc<'_>, out: Dst<'_, u8>, scales: Dst<'_, f32>) = ROWWISE_2D (m, k);

    /// Colwise scale-and-cast of 3D expert weights (E,K,N) stored column-major
    /// (`x[e*K*N + n*K + k]`): `scales[e*N + n]` over k; output in the same layout.
    /// Forward B operand of the MoE grouped GEMM.
    fn colwise_3d(p: &CastParams, e: usize, k: usize, n: usize;
        x: HpSrc<'_>, out: Dst<'_, u8>, scales: Dst<'_, f32>) = COLWISE_3D (e, k, n);

    /// Transpose-rowwise cast of 3D expert weights (E,K,N) column-major: output (E,N,K)
    /// column-major (`out[e*N*K + k*N + n]`), `scales[e*K + k]` over n. Dgrad B operand.
    fn rowwise_3d_transpose_rhs(p: &CastParams, e: usize, k: usize, n: usize;
        x: HpSrc<'_>, out: Dst<'_, u8>, scales: Dst<'_, f32>) = ROWWISE_3D_TRANSPOSE_RHS (e, k, n);

    /// Per-group colwise cast of an (M,K) row-major matrix with END offsets along M:
    /// output column-major (`out[k*M + m]`), `scales[g*K + k]` over the group's rows of
    /// column k. Empty groups get `amax_to_scale(0)`; rows past `offs[G-1]` are not written.
    fn per_group_colwise(p: &CastParams, m: usize, k: usize;
        x: HpSrc<'_>, offs: Src<'_, i32>, out: Dst<'_, u8>, scales: Dst<'_, f32>)
        = PER_GROUP_COLWISE (m, k);

    /// Two [`Context::per_group_colwise`] casts sharing M and the offsets, in one launch
    /// (wgrad: grad_out (M,K1) and the activations (M,K2) together).
    fn per_group_colwise_dual(p: &CastParams, m: usize, k1: usize, k2: usize;
        x1: HpSrc<'_>, x2: HpSrc<'_>, offs: Src<'_, i32>, out1: Dst<'_, u8>, scales1: Dst<'_, f32>,
        out2: Dst<'_, u8>, scales2: Dst<'_, f32>) = PER_GROUP_COLWISE_DUAL (m, k1, k2);

    /// Per-group rowwise cast of an (M,K) row-major matrix with END offsets along K:
    /// output row-major, `scales[g*M + m]` over row m within the group's columns.
    /// Columns past `offs[G-1]` are not written.
    fn per_group_rowwise(p: &CastParams, m: usize, k: usize;
        x: HpSrc<'_>, offs: Src<'_, i32>, out: Dst<'_, u8>, scales: Dst<'_, f32>)
        = PER_GROUP_ROWWISE (m, k);

    /// Tensorwise cast of `n` elements: `amax[0]` over all of them, `scale[0]` from it,
    /// `out[i] = encode(x[i] * scale)`. On the GPU: two phases, no host sync.
    fn tensorwise(p: &CastParams, n: usize;
        x: HpSrc<'_>, out: Dst<'_, u8>, scale: Dst<'_, f32>, amax: Dst<'_, f32>) = TENSORWISE n;

    /// Tensorwise cast with a scale the caller already has (delayed scaling: a scale from the
    /// amax history of earlier steps): `out[i] = encode(x[i] * scale[0])`, and `amax[0] =
    /// max |x|` for the history. One read of x, one kernel on the GPU; the scale is read on the
    /// device (no host sync). Any scale is accepted and used as is (NaN, Inf, 0 and values that
    /// overflow the format follow the encode rule); `p.pow2_scales` must be false, since no
    /// scale is derived here.
    fn tensorwise_scaled(p: &CastParams, n: usize;
        x: HpSrc<'_>, scale: Src<'_, f32>, out: Dst<'_, u8>, amax: Dst<'_, f32>)
        = TENSORWISE_SCALED n;

    /// Blockwise 1x128 cast (DeepSeek-V3 activations): scales (M, ceil(K/128)) row-major;
    /// a row's last block reduces over the columns that exist.
    fn blockwise_1x128(p: &CastParams, m: usize, k: usize;
        x: HpSrc<'_>, out: Dst<'_, u8>, scales: Dst<'_, f32>) = BLOCKWISE_1X128 (m, k);

    /// Blockwise 128x128 cast (DeepSeek-V3 weights): scales (ceil(M/128), ceil(K/128))
    /// row-major; edge tiles reduce over what exists.
    fn blockwise_128x128(p: &CastParams, m: usize, k: usize;
        x: HpSrc<'_>, out: Dst<'_, u8>, scales: Dst<'_, f32>) = BLOCKWISE_128X128 (m, k);

    /// Rowwise cast that pads every token group (END offsets along M) to a multiple of 16
    /// rows, in one pass: group g's rows land at `[padded_offs[g-1], ...)` in `out`
    /// (m_cap, K) and `scales[m_cap]`; padding rows are zeros with scale `amax_to_scale(0)`;
    /// `padded_offs[g]` receives the padded END offsets. Needs `m_cap >= m + 15*G` (the
    /// worst case, so a GPU caller can size buffers without reading offsets). Rows past the
    /// padded end are untouched.
    fn rowwise_2d_padded(p: &CastParams, m: usize, k: usize, m_cap: usize;
        x: HpSrc<'_>, offs: Src<'_, i32>, out: Dst<'_, u8>, scales: Dst<'_, f32>,
        padded_offs: Dst<'_, i32>) = ROWWISE_2D_PADDED (m, k, m_cap);

    /// [`Context::per_group_colwise_dual`] into a padded layout (wgrad operands for the 2D x
    /// 2D grouped GEMM's library path): group g's rows go to the 16-row aligned padded rows
    /// `[padded_offs[g-1], padded_offs[g-1] + rows_g)` (`padded_offs[-1] = 0`, each group
    /// padded to a multiple of 16 rows, empty groups to 0) of column-major (K1, m_cap) `out1`
    /// (`out1[k*m_cap + p]`) and (K2, m_cap) `out2`; every other output byte (the padding
    /// rows of a group and the rows from `padded_offs[G-1]` to m_cap) is zero. Scales are
    /// those of `per_group_colwise_dual` (`scales1[g*K1 + k]`, `scales2[g*K2 + k]`: zero rows
    /// change no amax); `padded_offs[g]` receives the padded END offsets. Needs
    /// `m_cap >= m + 15*G` (the worst case) and `m_cap % 16 == 0` (the GEMM's library rule
    /// on its token extent): pass `m_cap = round_up(m + 15*G, 16)`. Then
    /// `grouped_gemm_2d2d(n = K1, mt = m_cap, k = K2, a = out1, b = out2, offs = padded_offs)`
    /// runs every non-empty group on CUTLASS (CK also needs groups of more than 256 rows).
    fn per_group_colwise_dual_padded(p: &CastParams, m: usize, k1: usize, k2: usize, m_cap: usize;
        x1: HpSrc<'_>, x2: HpSrc<'_>, offs: Src<'_, i32>, out1: Dst<'_, u8>, scales1: Dst<'_, f32>,
        out2: Dst<'_, u8>, scales2: Dst<'_, f32>, padded_offs: Dst<'_, i32>)
        = PER_GROUP_COLWISE_DUAL_PADDED (m, k1, k2, m_cap);
}
