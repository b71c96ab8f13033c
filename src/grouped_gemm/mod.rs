//! FP8 grouped GEMMs on [`Context`]: the three GEMMs of an MoE projection's training step
//! (torchao `_Float8GroupedMM`). f32 accumulation, bf16 (round-to-nearest-even) output,
//! DEQUANT scales (reciprocals of the cast ops' forward scales, as
//! `torch._scaled_grouped_mm` takes them). A and B formats are given separately.

use half::bf16;

pub mod gpu;
pub mod params;
pub mod rule;

use crate::context::{BackendKind, Context};
use crate::error::{Error, Result};
use crate::grouped_gemm::gpu::{GroupedArgs, GroupedOp};

use crate::reference;
use crate::validate::{checked_mul, require_nonzero};
use crate::view::{Dst, Src, StreamRef};

pub use crate::grouped_gemm::params::{GemmBackend, GemmImpl, GemmParams, GemmWorkspace};

impl Context {
    /// 2D x 3D grouped GEMM (forward and dgrad): `a` (M,K) FP8 row-major, `b` (E,K,N) FP8
    /// column-major (`b[e*N*K + n*K + k]`), END offsets `offs[E]` along M. For row i of
    /// group e: `out[i*N + j] = bf16(sum_k a[i,k] b[e,k,j] * scale_a[i] * scale_b[e*N + j])`.
    /// Rows past `offs[E-1]` are untouched.
    pub fn grouped_gemm_2d3d(
        &self,
        p: &GemmParams,
        m: usize,
        k: usize,
        n: usize,
        e: usize,
        a: Src<'_, u8>,
        b: Src<'_, u8>,
        offs: Src<'_, i32>,
        scale_a: Src<'_, f32>,
        scale_b: Src<'_, f32>,
        mut out: Dst<'_, bf16>,
        stream: StreamRef,
    ) -> Result<()> {
        let mk = checked_mul("m*k", m, k)?;
        let en = checked_mul("e*n", e, n)?;
        let ekn = checked_mul("e*k*n", en, k)?;
        let mn = checked_mul("m*n", m, n)?;
        require_nonzero("k", k)?;
        self.check_src("a", &a, mk)?;
        self.check_src("b", &b, ekn)?;
        self.check_src("scale_a", &scale_a, m)?;
        self.check_src("scale_b", &scale_b, en)?;
        self.check_dst("out", &mut out, mn)?;
        if offs.len() != e {
            return Err(Error::GroupCountMismatch {
                expected: e,
                got: offs.len(),
            });
        }
        self.check_offsets(&offs, m)?;
        let (fa, fb) = (self.resolve(p.a_format), self.resolve(p.b_format));
        match self.backend() {
            BackendKind::Cpu => {
                let (a, b, offs) = (a.host_slice(), b.host_slice(), offs.host_slice());
                let (sa, sb, o) = (
                    scale_a.host_slice(),
                    scale_b.host_slice(),
                    out.host_slice_mut(),
                );
                reference::grouped_gemm::grouped_gemm_2d3d(fa, fb, k, n, a, b, offs, sa, sb, o)
            }
            BackendKind::Gpu => {
                let args = GroupedArgs {
                    a: a.as_ptr(),
                    b: b.as_ptr(),
                    offs: offs.as_ptr(),
                    groups: e,
                    sa: scale_a.as_ptr(),
                    sb: scale_b.as_ptr(),
                    out: out.as_mut_ptr(),
                    fa,
                    fb,
                };
                let op = GroupedOp::TwoD3D { m, n, k };
                gpu::run(self, p, op, &args, stream).map(|_| ())
            }
        }
    }

    /// 2D x 2D grouped GEMM with jagged K (wgrad): `a` (N,Mt) FP8 row-major, `b` (Mt,K) FP8
    /// column-major (`b[k*Mt + m]`), END offsets `offs[G]` along Mt. For group g:
    /// `out[g*N*K + i*K + j] = bf16(sum_{m in g} a[i,m] b[m,j] * scale_a[g*N + i] *
    /// scale_b[g*K + j])`; an empty group's block is zeros.
    pub fn grouped_gemm_2d2d(
        &self,
        p: &GemmParams,
        n: usize,
        mt: usize,
        k: usize,
        a: Src<'_, u8>,
        b: Src<'_, u8>,
        offs: Src<'_, i32>,
        scale_a: Src<'_, f32>,
        scale_b: Src<'_, f32>,
        mut out: Dst<'_, bf16>,
        stream: StreamRef,
    ) -> Result<()> {
        let g = offs.len();
        let na = checked_mul("n*mt", n, mt)?;
        let nb = checked_mul("mt*k", mt, k)?;
        let gn = checked_mul("g*n", g, n)?;
        let gk = checked_mul("g*k", g, k)?;
        let gnk = checked_mul("g*n*k", gn, k)?;
        self.check_src("a", &a, na)?;
        self.check_src("b", &b, nb)?;
        self.check_src("scale_a", &scale_a, gn)?;
        self.check_src("scale_b", &scale_b, gk)?;
        self.check_dst("out", &mut out, gnk)?;
        self.check_offsets(&offs, mt)?;
        let (fa, fb) = (self.resolve(p.a_format), self.resolve(p.b_format));
        match self.backend() {
            BackendKind::Cpu => {
                let (a, b, offs) = (a.host_slice(), b.host_slice(), offs.host_slice());
                let (sa, sb, o) = (
                    scale_a.host_slice(),
                    scale_b.host_slice(),
                    out.host_slice_mut(),
                );
                reference::grouped_gemm::grouped_gemm_2d2d(fa, fb, n, mt, k, a, b, offs, sa, sb, o)
            }
            BackendKind::Gpu => {
                let args = GroupedArgs {
                    a: a.as_ptr(),
                    b: b.as_ptr(),
                    offs: offs.as_ptr(),
                    groups: g,
                    sa: scale_a.as_ptr(),
                    sb: scale_b.as_ptr(),
                    out: out.as_mut_ptr(),
                    fa,
                    fb,
                };
                let op = GroupedOp::TwoD2D { n, mt, k };
                gpu::run(self, p, op, &args, stream).map(|_| ())
            }
        }
    }
}
