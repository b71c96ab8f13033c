//! FP8 grouped GEMMs on [`Context`]: the three GEMMs of an MoE projection's training step
//! (torchao `_Float8GroupedMM`). f32 accumulation, bf16 (round-to-nearest-even) output,
//! DEQUANT scales (reciprocals of the cast ops' forward scales, as
//! `torch._scaled_grouped_mm` takes them). A and B formats are given separately.

use half::bf16;

pub mod gpu;
pub mod params;
pub mod rule;

use crate::context::Context;
use crate::dispatch::{BufDecl, Dev, Elem, GpuRun, Host, OpDecl, OpParams, op_methods};
use crate::error::{Error, Result};
use crate::format::Fp8Format;
use crate::grouped_gemm::gpu::{GroupedArgs, GroupedOp};
use crate::reference;
use crate::reference::grouped_gemm::Operands;
use crate::validate::checked_mul;
use crate::view::{Dst, Src, StreamRef};

pub use crate::grouped_gemm::params::{GemmBackend, GemmImpl, GemmParams, GemmWorkspace};

impl OpParams for GemmParams {
    /// The formats of A and B.
    type Resolved = (Fp8Format, Fp8Format);
    fn resolve_on(&self, ctx: &Context) -> Result<(Fp8Format, Fp8Format)> {
        Ok((ctx.resolve(self.a_format), ctx.resolve(self.b_format)))
    }
}

/// The GPU arm of both GEMMs: the validated pointers as the implementations take them.
fn gpu_run(
    ctx: &Context,
    p: &GemmParams,
    (fa, fb): (Fp8Format, Fp8Format),
    op: GroupedOp,
    d: &Dev,
    stream: StreamRef,
) -> Result<()> {
    let args = GroupedArgs {
        a: d.ptr("a"),
        b: d.ptr("b"),
        offs: d.ptr("offs"),
        groups: d.groups(),
        sa: d.ptr("scale_a"),
        sb: d.ptr("scale_b"),
        out: d.ptr("out"),
        fa,
        fb,
    };
    gpu::run(ctx, p, op, &args, stream).map(|_| ())
}

/// The shape of the 2D x 3D GEMM: (m, k, n, e).
type Mkne = (usize, usize, usize, usize);

/// 2D x 3D: one group per expert.
fn one_group_per_expert(_: &GemmParams, &(_, _, _, e): &Mkne, g: usize) -> Result<()> {
    if g != e {
        return Err(Error::GroupCountMismatch {
            expected: e,
            got: g,
        });
    }
    Ok(())
}

fn operands<'a>(h: &mut Host<'a>) -> Operands<'a> {
    let (a, b, offs) = (h.src("a"), h.src("b"), h.src("offs"));
    (a, b, offs, h.src("scale_a"), h.src("scale_b"), h.dst("out"))
}

/// The declaration of a 2D x 3D GEMM (scalar or blockwise scales): `a` (M,K), `b` (E,K,N),
/// END offsets along M and `out` (M,N), its checks and GPU arm, around its own scale
/// buffers, reference and [`GroupedOp`] variant.
/// `$cpu` is a `fn(fa, fb, k, n, Operands) -> Result<()>`.
macro_rules! gemm_2d3d_decl {
    ($c_name:literal, $scale_a:expr, $scale_b:expr, $cpu:expr, $op:ident) => {
        OpDecl {
            c_name: $c_name,
            bufs: &[
                BufDecl::input("a", Elem::U8, |&(m, k, _, _), _| checked_mul("m*k", m, k)),
                BufDecl::input("b", Elem::U8, |&(_, k, n, e), _| {
                    checked_mul("e*k*n", checked_mul("e*n", e, n)?, k)
                }),
                BufDecl::offsets("offs", |s| s.0),
                $scale_a,
                $scale_b,
                BufDecl::output("out", Elem::Bf16, |&(m, _, n, _), _| {
                    checked_mul("m*n", m, n)
                }),
            ],
            nonzero: &[("k", |s| s.1)],
            check: Some(one_group_per_expert),
            gpu_run: GpuRun::Own,
            cpu: |_, (fa, fb), &(_, k, n, _), h| ($cpu)(fa, fb, k, n, operands(h)),
            gpu: |ctx, p, f, &(m, k, n, _), d, stream| {
                gpu_run(ctx, p, f, GroupedOp::$op { m, n, k }, d, stream)
            },
        }
    };
}

#[doc(hidden)]
pub static GROUPED_GEMM_2D3D: OpDecl<GemmParams, Mkne> = gemm_2d3d_decl!(
    "hipfp8_grouped_gemm_2d3d",
    BufDecl::input("scale_a", Elem::F32, |s, _| Ok(s.0)),
    BufDecl::input("scale_b", Elem::F32, |&(_, _, n, e), _| {
        checked_mul("e*n", e, n)
    }),
    |fa, fb, k, n, ops: Operands| reference::grouped_gemm::grouped_gemm_2d3d((fa, fb), k, n, ops),
    TwoD3D
);

#[doc(hidden)]
pub static GROUPED_GEMM_2D2D: OpDecl<GemmParams, (usize, usize, usize)> = OpDecl {
    c_name: "hipfp8_grouped_gemm_2d2d",
    bufs: &[
        BufDecl::input("a", Elem::U8, |&(n, mt, _), _| checked_mul("n*mt", n, mt)),
        BufDecl::input("b", Elem::U8, |&(_, mt, k), _| checked_mul("mt*k", mt, k)),
        BufDecl::offsets("offs", |s| s.1),
        BufDecl::input("scale_a", Elem::F32, |s, g| checked_mul("g*n", g, s.0)),
        BufDecl::input("scale_b", Elem::F32, |s, g| checked_mul("g*k", g, s.2)),
        BufDecl::output("out", Elem::Bf16, |&(n, _, k), g| {
            checked_mul("g*n*k", checked_mul("g*n", g, n)?, k)
        }),
    ],
    nonzero: &[],
    check: None,
    gpu_run: GpuRun::Own,
    cpu: |_, f, &s, h| reference::grouped_gemm::grouped_gemm_2d2d(f, s, operands(h)),
    gpu: |ctx, p, f, &(n, mt, k), d, stream| {
        gpu_run(ctx, p, f, GroupedOp::TwoD2D { n, mt, k }, d, stream)
    },
};

/// Scale blocks along k (and n) of the blockwise-scaled GEMM: `ceil(v / 128)`.
fn blocks(v: usize) -> usize {
    v.div_ceil(reference::grouped_gemm_blockwise::BLOCK)
}

#[doc(hidden)]
pub static GROUPED_GEMM_BLOCKWISE_2D3D: OpDecl<GemmParams, Mkne> = gemm_2d3d_decl!(
    "hipfp8_grouped_gemm_blockwise_2d3d",
    BufDecl::input("scale_a", Elem::F32, |&(m, k, _, _), _| {
        checked_mul("m*ceil(k/128)", m, blocks(k))
    }),
    BufDecl::input("scale_b", Elem::F32, |&(_, k, n, e), _| {
        let nb = checked_mul("e*ceil(n/128)", e, blocks(n))?;
        checked_mul("e*ceil(n/128)*ceil(k/128)", nb, blocks(k))
    }),
    |fa, fb, k, n, ops: Operands| {
        reference::grouped_gemm_blockwise::grouped_gemm_blockwise_2d3d((fa, fb), (k, n), ops);
        Ok(())
    },
    Blockwise2D3D
);

#[doc(hidden)]
pub static GROUPED_GEMM_BLOCKWISE_2D2D: OpDecl<GemmParams, (usize, usize, usize)> = OpDecl {
    c_name: "hipfp8_grouped_gemm_blockwise_2d2d",
    bufs: &[
        BufDecl::input("a", Elem::U8, |&(n, mt, _), _| checked_mul("n*mt", n, mt)),
        BufDecl::input("b", Elem::U8, |&(_, mt, k), _| checked_mul("mt*k", mt, k)),
        BufDecl::offsets("offs", |s| s.1),
        BufDecl::input("scale_a", Elem::F32, |&(n, mt, _), _| {
            checked_mul("ceil(mt/128)*n", n, blocks(mt))
        }),
        BufDecl::input("scale_b", Elem::F32, |&(_, mt, k), _| {
            checked_mul("ceil(mt/128)*k", k, blocks(mt))
        }),
        BufDecl::output("out", Elem::Bf16, |&(n, _, k), g| {
            checked_mul("g*n*k", checked_mul("g*n", g, n)?, k)
        }),
    ],
    nonzero: &[],
    check: None,
    gpu_run: GpuRun::Own,
    cpu: |_, f, &s, h| {
        reference::grouped_gemm_blockwise::grouped_gemm_blockwise_2d2d(f, s, operands(h));
        Ok(())
    },
    gpu: |ctx, p, f, &(n, mt, k), d, stream| {
        gpu_run(ctx, p, f, GroupedOp::Blockwise2D2D { n, mt, k }, d, stream)
    },
};

impl Context {}

op_methods! {
    /// 2D x 3D grouped GEMM (forward and dgrad): `a` (M,K) FP8 row-major, `b` (E,K,N) FP8
    /// column-major (`b[e*N*K + n*K + k]`), END offsets `offs[E]` along M. For row i of
    /// group e: `out[i*N + j] = bf16(sum_k a[i,k] b[e,k,j] * scale_a[i] * scale_b[e*N + j])`.
    /// Rows past `offs[E-1]` are untouched.
    fn grouped_gemm_2d3d(p: &GemmParams, m: usize, k: usize, n: usize, e: usize;
        a: Src<'_, u8>, b: Src<'_, u8>, offs: Src<'_, i32>, scale_a: Src<'_, f32>, scale_b: Src<'_,
        f32>, out: Dst<'_, bf16>) = GROUPED_GEMM_2D3D (m, k, n, e);

    /// 2D x 2D grouped GEMM with jagged K (wgrad): `a` (N,Mt) FP8 row-major, `b` (Mt,K) FP8
    /// column-major (`b[k*Mt + m]`), END offsets `offs[G]` along Mt. For group g:
    /// `out[g*N*K + i*K + j] = bf16(sum_{m in g} a[i,m] b[m,j] * scale_a[g*N + i] *
    /// scale_b[g*K + j])`; an empty group's block is zeros. Groups may start anywhere: on a
    /// library the groups off a 16-token boundary are staged first (docs/OPS.md "Any group
    /// start"); a caller workspace (`p.workspace`) must hold
    /// [`Context::grouped_gemm_op_workspace_size`] bytes (refused otherwise).
    fn grouped_gemm_2d2d(p: &GemmParams, n: usize, mt: usize, k: usize;
        a: Src<'_, u8>, b: Src<'_, u8>, offs: Src<'_, i32>, scale_a: Src<'_, f32>, scale_b: Src<'_,
        f32>, out: Dst<'_, bf16>) = GROUPED_GEMM_2D2D (n, mt, k);

    /// Blockwise-scaled 2D x 3D grouped GEMM (DeepSeek-V3 recipe; forward and dgrad): `a`,
    /// `b`, `offs` as for [`Context::grouped_gemm_2d3d`]; `scale_a` (M, ceil(K/128))
    /// row-major, the DEQUANT scales of a's 1 x 128 blocks (1 / what `blockwise_1x128`
    /// writes); `scale_b` (E, ceil(N/128), ceil(K/128)) row-major, per expert the DEQUANT
    /// scales of its (N, K) weight's 128 x 128 blocks (1 / what `blockwise_128x128` writes).
    /// For row i of group e: `out[i*N + j] = bf16(sum over K blocks kb ascending of
    /// f32(sum_{k in kb} a[i,k] b[e,j,k]) * scale_a[i,kb] * scale_b[e,j/128,kb])`, f32
    /// throughout, the scales applied per K block (docs/OPS.md). Rows past `offs[E-1]` are
    /// untouched.
    fn grouped_gemm_blockwise_2d3d(p: &GemmParams, m: usize, k: usize, n: usize, e: usize;
        a: Src<'_, u8>, b: Src<'_, u8>, offs: Src<'_, i32>, scale_a: Src<'_, f32>, scale_b: Src<'_,
        f32>, out: Dst<'_, bf16>) = GROUPED_GEMM_BLOCKWISE_2D3D (m, k, n, e);

    /// Blockwise-scaled 2D x 2D grouped GEMM with jagged K (DeepSeek-V3 recipe; wgrad): `a`,
    /// `b`, `offs` as for [`Context::grouped_gemm_2d2d`]; `scale_a` (ceil(Mt/128), N) and
    /// `scale_b` (ceil(Mt/128), K) row-major (block-major), the DEQUANT scales of the 128-token
    /// blocks of each row of a and of b's (K, Mt) storage (1 / the transpose of what
    /// `blockwise_1x128` writes for them), blocks at absolute token positions. For group g over
    /// tokens [lo, hi): `out[g*N*K + i*K + j] = bf16(sum over the token blocks q meeting
    /// [lo, hi) ascending of f32(sum_{t in [lo, hi) in block q} a[i,t] b[t,j]) * scale_a[q,i]
    /// * scale_b[q,j])`; an empty group's block is zeros (docs/OPS.md).
    fn grouped_gemm_blockwise_2d2d(p: &GemmParams, n: usize, mt: usize, k: usize;
        a: Src<'_, u8>, b: Src<'_, u8>, offs: Src<'_, i32>, scale_a: Src<'_, f32>, scale_b: Src<'_,
        f32>, out: Dst<'_, bf16>) = GROUPED_GEMM_BLOCKWISE_2D2D (n, mt, k);
}
