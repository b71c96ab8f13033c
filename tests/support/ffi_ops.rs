//! The C ABI's ops as data, for the bad-input matrix (tests/ffi_bad_input.rs) and the GPU
//! tests (tests/ffi_gpu.rs): each exported op with a small valid problem, its buffers (with
//! spare room so a pointer can be misaligned on purpose), its descriptor as bytes, and the
//! offsets of its enum, flag and dimension fields.

use std::ffi::{CStr, c_void};
use std::mem::{offset_of, size_of};
use std::ptr::null_mut;

use hipfp8::Scaling;
use hipfp8::decl::{self, OpDecl, OpParams};
use hipfp8::ffi::*;
use hipfp8::route::{CombineShape, DispatchShape};

use hipfp8_status::*;

pub const POISON: u8 = 0xA5;

/// Index inputs other than offsets (src/route.rs).
const INDEX_INPUTS: [&str; 2] = ["perm", "slot_row"];

// ---- the harness ---------------------------------------------------------------------------

/// One buffer argument: 8-aligned backing store with one spare byte so the pointer can be
/// deliberately misaligned.
#[derive(Clone)]
pub struct Buf {
    pub name: &'static str,
    pub elem: usize,
    pub len: usize,
    pub output: bool,
    pub store: Vec<u64>,
    pub null: bool,
    pub misalign: bool,
}

impl Buf {
    pub fn new(name: &'static str, elem: usize, len: usize, output: bool) -> Buf {
        let words = (len * elem + 1).div_ceil(8) + 1;
        let fill = if output {
            u64::from_ne_bytes([POISON; 8])
        } else {
            0
        };
        Buf {
            name,
            elem,
            len,
            output,
            store: vec![fill; words],
            null: false,
            misalign: false,
        }
    }
    pub fn input(name: &'static str, elem: usize, len: usize) -> Buf {
        Buf::new(name, elem, len, false)
    }
    pub fn output(name: &'static str, elem: usize, len: usize) -> Buf {
        Buf::new(name, elem, len, true)
    }
    pub fn ptr(&mut self) -> *mut u8 {
        if self.null {
            return null_mut();
        }
        // SAFETY: the store has at least len*elem + 1 bytes, so base + 1 stays in bounds.
        unsafe {
            self.store
                .as_mut_ptr()
                .cast::<u8>()
                .add(self.misalign as usize)
        }
    }
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: viewing the Vec<u64> store as bytes.
        unsafe {
            std::slice::from_raw_parts(self.store.as_ptr().cast::<u8>(), self.store.len() * 8)
        }
    }
    /// Write int32 values (offsets) at the start of an input.
    pub fn set_i32(&mut self, vals: &[i32]) {
        let p = self.ptr().cast::<i32>();
        for (i, v) in vals.iter().enumerate() {
            // SAFETY: callers write at most `len` int32s into an aligned store.
            unsafe { p.add(i).write(*v) };
        }
    }
    /// Fill an input with deterministic pseudo-random data of its kind (inferred from the
    /// element size and name): bf16/f32 high-precision values with a few specials (NaN, Inf,
    /// subnormal, max) for `x*`, positive scales for `scale_*`, non-NaN FP8 codes for bytes.
    /// Offsets are left alone.
    pub fn fill_random(&mut self, seed: u32) {
        // Index inputs (offsets, the routing's permutation and slot rows) keep their valid
        // values: random ones are bad input, which the bad-input rows test on their own.
        if self.output || self.name.starts_with("offs") || INDEX_INPUTS.contains(&self.name) {
            return;
        }
        let mut s = seed ^ 0x9E37_79B9;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s
        };
        let base = self.ptr();
        for i in 0..self.len {
            let r = next();
            let unit = (r >> 8) as f32 / (1u32 << 24) as f32; // [0, 1)
            let special = match r % 97 {
                0 => Some(f32::NAN),
                1 => Some(f32::INFINITY),
                2 => Some(-1e-40),
                3 => Some(3.0e38),
                _ => None,
            };
            // SAFETY: i < len, and the store holds len elements of `elem` bytes from `base`.
            unsafe {
                match (self.elem, self.name.starts_with("scale")) {
                    (1, _) => {
                        // FP8 codes, never a NaN or Inf code of any format (low 7 bits < 0x7C).
                        let c = (r & 0xFF) as u8;
                        base.add(i)
                            .write(if c & 0x7F >= 0x7C { c & 0xBB } else { c });
                    }
                    (2, _) => {
                        let v = special.unwrap_or((unit - 0.5) * 20.0);
                        base.cast::<u16>()
                            .add(i)
                            .write(half::bf16::from_f32(v).to_bits());
                    }
                    (4, true) => base.cast::<f32>().add(i).write(0.25 + unit * 2.0),
                    (4, false) => base
                        .cast::<f32>()
                        .add(i)
                        .write(special.unwrap_or((unit - 0.5) * 20.0)),
                    _ => unreachable!("element size {}", self.elem),
                }
            }
        }
    }

    pub fn untouched(&self) -> bool {
        self.bytes().iter().all(|&b| b == POISON)
    }
}

pub type CallFn = fn(*const hipfp8_context, *const c_void, &[*mut u8], &[usize]) -> hipfp8_status;

/// One exported op with a valid problem; rows mutate a copy of it.
#[derive(Clone)]
pub struct Op {
    pub name: &'static str,
    pub desc: Vec<u64>,
    pub desc_size: usize,
    /// Offsets of the enum-valued descriptor fields (format, dtype, ...) and of `flags`.
    pub enum_fields: Vec<(&'static str, usize)>,
    pub flags_field: Option<usize>,
    /// Whether the op takes HIPFP8_FLAG_DEQUANT_SCALES (the fused MoE casts); every other op
    /// with a `flags` field refuses it.
    pub dequant_scales: bool,
    /// Dimensions that are reduced over and so must be > 0.
    pub reduced: Vec<usize>,
    /// Dimension fields whose product sizes the buffers (set huge to overflow).
    pub product: Vec<usize>,
    /// Grouped ops: the offsets buffer and the extent they index.
    pub offs: Option<(&'static str, usize)>,
    /// Dimensions tied to another argument (e must equal the number of offsets).
    pub linked: Vec<usize>,
    pub bufs: Vec<Buf>,
    pub call: CallFn,
}

impl Op {
    pub fn new<D: Copy>(name: &'static str, desc: D, bufs: Vec<Buf>, call: CallFn) -> Op {
        let mut store = vec![0u64; size_of::<D>().div_ceil(8)];
        // SAFETY: the store is 8-aligned and at least size_of::<D>() bytes.
        unsafe { store.as_mut_ptr().cast::<D>().write(desc) };
        Op {
            name,
            desc: store,
            desc_size: size_of::<D>(),
            enum_fields: vec![],
            flags_field: None,
            dequant_scales: false,
            reduced: vec![],
            product: vec![],
            offs: None,
            linked: vec![],
            bufs,
            call,
        }
    }
    pub fn enums(mut self, fields: &[(&'static str, usize)]) -> Op {
        self.enum_fields = fields.to_vec();
        self
    }
    pub fn flags(mut self, off: usize) -> Op {
        self.flags_field = Some(off);
        self
    }
    /// The op takes HIPFP8_FLAG_DEQUANT_SCALES.
    pub fn dequant_scales(mut self) -> Op {
        self.dequant_scales = true;
        self
    }
    pub fn reduced(mut self, off: usize) -> Op {
        self.reduced.push(off);
        self
    }
    pub fn product(mut self, offs: &[usize]) -> Op {
        self.product = offs.to_vec();
        self
    }
    pub fn grouped(mut self, offs_buf: &'static str, extent: usize, vals: &[i32]) -> Op {
        self.offs = Some((offs_buf, extent));
        self.buf(offs_buf).set_i32(vals);
        self
    }
    pub fn linked(mut self, off: usize) -> Op {
        self.linked.push(off);
        self
    }
    pub fn set_desc_u32(&mut self, off: usize, v: u32) {
        // SAFETY: `off` comes from offset_of! on this descriptor type (a u32 field).
        unsafe {
            self.desc
                .as_mut_ptr()
                .cast::<u8>()
                .add(off)
                .cast::<u32>()
                .write(v)
        }
    }
    pub fn set_desc_usize(&mut self, off: usize, v: usize) {
        // SAFETY: `off` comes from offset_of! on this descriptor type (a usize field).
        unsafe {
            self.desc
                .as_mut_ptr()
                .cast::<u8>()
                .add(off)
                .cast::<usize>()
                .write(v)
        }
    }
    pub fn buf(&mut self, name: &str) -> &mut Buf {
        self.bufs
            .iter_mut()
            .find(|b| b.name == name)
            .unwrap_or_else(|| panic!("no buffer {name}"))
    }
    pub fn invoke_with(
        &mut self,
        ctx: *const hipfp8_context,
        desc: *const c_void,
    ) -> hipfp8_status {
        let ptrs: Vec<*mut u8> = self.bufs.iter_mut().map(|b| b.ptr()).collect();
        let lens: Vec<usize> = self.bufs.iter().map(|b| b.len).collect();
        (self.call)(ctx, desc, &ptrs, &lens)
    }
    /// Call with other buffer pointers (e.g. device copies of `bufs`), same counts.
    pub fn invoke_ptrs(&self, ctx: *const hipfp8_context, ptrs: &[*mut u8]) -> hipfp8_status {
        let lens: Vec<usize> = self.bufs.iter().map(|b| b.len).collect();
        (self.call)(ctx, self.desc.as_ptr().cast::<c_void>(), ptrs, &lens)
    }
    pub fn invoke(&mut self, ctx: *const hipfp8_context) -> hipfp8_status {
        let desc = self.desc.as_ptr().cast::<c_void>();
        self.invoke_with(ctx, desc)
    }
    /// Assert a failure: status, message fragments, untouched outputs.
    pub fn expect_fail(&self, row: &str, got: hipfp8_status, want: hipfp8_status, msg: &[&str]) {
        let m = last_error();
        assert_eq!(
            got, want,
            "[{row}] {}: expected {want:?}, got {got:?} ({m})",
            self.name
        );
        assert!(
            m.starts_with(self.name),
            "[{row}] {}: last error should name the function: {m:?}",
            self.name
        );
        for f in msg {
            assert!(
                m.contains(f),
                "[{row}] {}: last error {m:?} should mention {f:?}",
                self.name
            );
        }
        for b in self.bufs.iter().filter(|b| b.output) {
            assert!(
                b.untouched(),
                "[{row}] {}: output `{}` was written on failure",
                self.name,
                b.name
            );
        }
    }
}

pub fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated, valid until the next hipfp8 call on this thread.
    unsafe { CStr::from_ptr(hipfp8_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

pub struct Ctx(pub *mut hipfp8_context);

impl Ctx {
    pub fn cpu() -> Ctx {
        let mut c = null_mut();
        let st = hipfp8_context_create(hipfp8_backend::HIPFP8_BACKEND_CPU as u32, 0, &mut c);
        assert_eq!(st, HIPFP8_STATUS_SUCCESS);
        Ctx(c)
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        hipfp8_context_destroy(self.0);
    }
}

pub fn p<T>(ps: &[*mut u8], i: usize) -> *mut T {
    ps[i].cast()
}

// ---- the ops, each with a small valid problem ------------------------------------------------

pub const BF16: u32 = hipfp8_dtype::HIPFP8_DTYPE_BF16 as u32;
pub const F32: u32 = hipfp8_dtype::HIPFP8_DTYPE_F32 as u32;
pub const NS: hipStream_t = null_mut();

thread_local! {
    /// The stream the table's ops pass (default NULL); the GPU soak test sets one per call.
    pub static STREAM: std::cell::Cell<hipStream_t> = const { std::cell::Cell::new(null_mut()) };
}

/// The stream of this thread's table calls (see [`STREAM`]).
pub fn stream() -> hipStream_t {
    STREAM.with(|s| s.get())
}

macro_rules! off {
    ($t:ty, $($f:ident),+) => { &[$(offset_of!($t, $f)),+] };
}

/// The [`CallFn`] of a C export whose buffer arguments are the table's buffers `$i` (pointer,
/// count) in order, then `$extra` arguments, then the stream.
macro_rules! c_call {
    ($f:ident, $($i:literal),+ $(; $($extra:expr),+)?) => {
        {
            let call: CallFn = |c, d, ps, ls| {
                $f(c, d.cast(), $(ps[$i].cast(), ls[$i],)+ $($($extra,)+)? stream())
            };
            call
        }
    };
}

impl Op {
    /// An op from its declaration (hipfp8::decl): the C name and every buffer (name, element
    /// size, length, role) come from `decl` for `shape`; `hp` gives the element size of each
    /// high-precision input in turn; `offs` the END offsets of a grouped op (their count is
    /// the group count).
    pub fn from_decl<P: OpParams, S, D: Copy>(
        decl: &'static OpDecl<P, S>,
        shape: S,
        hp: &[usize],
        offs: &[i32],
        desc: D,
        call: CallFn,
    ) -> Op {
        let infos = decl
            .buffers(&shape, offs.len())
            .unwrap_or_else(|e| panic!("{}: {e}", decl.c_name));
        let mut hp = hp.iter();
        let bufs = infos
            .iter()
            .map(|b| {
                let elem = b
                    .elem
                    .size()
                    .unwrap_or_else(|| *hp.next().expect("hp sizes"));
                Buf::new(b.name, elem, b.len, b.output)
            })
            .collect();
        let op = Op::new(decl.c_name, desc, bufs, call);
        match (
            decl.offsets_extent(&shape),
            infos.iter().find(|b| b.offsets),
        ) {
            (Some(extent), Some(b)) => op.grouped(b.name, extent, offs),
            _ => op,
        }
    }
}

/// A [`hipfp8_cast_2d_desc`] op: x of `dtype` (`esz` bytes) is (m, k).
pub fn cast_2d<P: OpParams>(
    decl: &'static OpDecl<P, (usize, usize)>,
    (m, k): (usize, usize),
    (dtype, esz): (u32, usize),
    offs: &[i32],
    call: CallFn,
) -> Op {
    type D = hipfp8_cast_2d_desc;
    let d = D {
        size: size_of::<D>(),
        input_dtype: dtype,
        format: 0,
        flags: 0,
        m,
        k,
    };
    Op::from_decl(decl, (m, k), &[esz], offs, d, call)
        .enums(&[
            ("format", offset_of!(D, format)),
            ("dtype", offset_of!(D, input_dtype)),
        ])
        .flags(offset_of!(D, flags))
        .product(off!(D, m, k))
}

/// The format, dtype and flags fields of a cast descriptor type.
macro_rules! cast_fields {
    ($op:expr, $t:ty) => {
        $op.enums(&[
            ("format", offset_of!($t, format)),
            ("dtype", offset_of!($t, input_dtype)),
        ])
        .flags(offset_of!($t, flags))
    };
}

const GROUPS: [i32; 3] = [1, 3, 5];

pub fn all_ops() -> Vec<Op> {
    let mut ops = Vec::new();
    let k2d = offset_of!(hipfp8_cast_2d_desc, k);
    for hp in [(BF16, 2), (F32, 4)] {
        let call = c_call!(hipfp8_rowwise_2d, 0, 1, 2);
        ops.push(cast_2d(&decl::ROWWISE_2D, (3, 5), hp, &[], call).reduced(k2d));
    }
    {
        type D = hipfp8_cast_3d_desc;
        let (e, k, n) = (2usize, 3usize, 4usize);
        let d = D {
            size: size_of::<D>(),
            input_dtype: F32,
            format: 0,
            flags: 0,
            e,
            k,
            n,
        };
        let call = c_call!(hipfp8_colwise_3d, 0, 1, 2);
        let op = Op::from_decl(&decl::COLWISE_3D, (e, k, n), &[4], &[], d, call);
        ops.push(
            cast_fields!(op, D)
                .product(off!(D, e, k, n))
                .reduced(offset_of!(D, k)),
        );
        let call = c_call!(hipfp8_rowwise_3d_transpose_rhs, 0, 1, 2);
        let op = Op::from_decl(
            &decl::ROWWISE_3D_TRANSPOSE_RHS,
            (e, k, n),
            &[4],
            &[],
            d,
            call,
        );
        ops.push(
            cast_fields!(op, D)
                .product(off!(D, e, k, n))
                .reduced(offset_of!(D, n)),
        );
    }
    {
        // Grouped along m (5 rows, groups [0,1) [1,3) [3,5)).
        let call = c_call!(hipfp8_per_group_colwise, 0, 1, 2, 3);
        ops.push(cast_2d(
            &decl::PER_GROUP_COLWISE,
            (5, 3),
            (BF16, 2),
            &GROUPS,
            call,
        ));
        // Grouped along k (3 rows, 5 columns).
        let call = c_call!(hipfp8_per_group_rowwise, 0, 1, 2, 3);
        ops.push(cast_2d(
            &decl::PER_GROUP_ROWWISE,
            (3, 5),
            (F32, 4),
            &GROUPS,
            call,
        ));
        type D = hipfp8_cast_dual_desc;
        let (m, k1, k2) = (5usize, 3usize, 2usize);
        // Mixed input dtypes (allowed on the CPU; the GPU kernel takes one dtype for both
        // and says NOT_SUPPORTED) and the same dtype.
        for (dtype2, esz2) in [(F32, 4), (BF16, 2)] {
            let d = D {
                size: size_of::<D>(),
                input_dtype: BF16,
                format: 0,
                flags: 0,
                input_dtype2: dtype2,
                m,
                k1,
                k2,
            };
            let call = c_call!(hipfp8_per_group_colwise_dual, 0, 1, 2, 3, 4, 5, 6);
            let dual = &decl::PER_GROUP_COLWISE_DUAL;
            let op = Op::from_decl(dual, (m, k1, k2), &[2, esz2], &GROUPS, d, call);
            ops.push(
                cast_fields!(op, D)
                    .enums(&[
                        ("format", offset_of!(D, format)),
                        ("dtype", offset_of!(D, input_dtype)),
                        ("dtype", offset_of!(D, input_dtype2)),
                    ])
                    .product(off!(D, m, k1, k2)),
            );
        }
        type P = hipfp8_padded_desc;
        let (k, g) = (3usize, GROUPS.len());
        let m_cap = m + 15 * g;
        let d = P {
            size: size_of::<P>(),
            input_dtype: BF16,
            format: 0,
            flags: 1,
            m,
            k,
            m_cap,
        };
        let call = c_call!(hipfp8_rowwise_2d_padded, 0, 1, 2, 3, 4);
        let op = Op::from_decl(
            &decl::ROWWISE_2D_PADDED,
            (m, k, m_cap),
            &[2],
            &GROUPS,
            d,
            call,
        );
        ops.push(
            cast_fields!(op, P)
                .reduced(offset_of!(P, k))
                .product(off!(P, m, k)),
        );
        type DP = hipfp8_cast_dual_padded_desc;
        let (k1, k2) = (3usize, 2usize);
        let m_cap = (m + 15 * g).next_multiple_of(16);
        let d = DP {
            size: size_of::<DP>(),
            input_dtype: BF16,
            format: 0,
            flags: 0,
            input_dtype2: BF16,
            m,
            k1,
            k2,
            m_cap,
        };
        let call = c_call!(hipfp8_per_group_colwise_dual_padded, 0, 1, 2, 3, 4, 5, 6, 7);
        let op = Op::from_decl(
            &decl::PER_GROUP_COLWISE_DUAL_PADDED,
            (m, k1, k2, m_cap),
            &[2, 2],
            &GROUPS,
            d,
            call,
        );
        ops.push(
            cast_fields!(op, DP)
                .enums(&[
                    ("format", offset_of!(DP, format)),
                    ("dtype", offset_of!(DP, input_dtype)),
                    ("dtype", offset_of!(DP, input_dtype2)),
                ])
                .product(off!(DP, m, k1, k2)),
        );
    }
    {
        // (n is a plain count: a huge n is an input too small, not an overflow; no product.)
        type D = hipfp8_tensorwise_desc;
        let n = 7usize;
        for (dtype, esz) in [(BF16, 2), (F32, 4)] {
            let d = D {
                size: size_of::<D>(),
                input_dtype: dtype,
                format: 0,
                flags: 0,
                n,
            };
            let op = if dtype == BF16 {
                let call = c_call!(hipfp8_tensorwise, 0, 1, 2, 3);
                Op::from_decl(&decl::TENSORWISE, n, &[esz], &[], d, call)
            } else {
                let call = c_call!(hipfp8_tensorwise_scaled, 0, 1, 2, 3);
                Op::from_decl(&decl::TENSORWISE_SCALED, n, &[esz], &[], d, call)
            };
            ops.push(cast_fields!(op, D));
        }
        let call = c_call!(hipfp8_cast_transpose_scaled, 0, 1, 2, 3, 4);
        let op = cast_2d(&decl::CAST_TRANSPOSE_SCALED, (3, 5), (BF16, 2), &[], call);
        ops.push(op.reduced(k2d));
    }
    {
        let call = c_call!(hipfp8_blockwise_1x128, 0, 1, 2);
        ops.push(cast_2d(
            &decl::BLOCKWISE_1X128,
            (3, 130),
            (BF16, 2),
            &[],
            call,
        ));
        let call = c_call!(hipfp8_blockwise_128x128, 0, 1, 2);
        ops.push(cast_2d(
            &decl::BLOCKWISE_128X128,
            (130, 5),
            (F32, 4),
            &[],
            call,
        ));
    }
    {
        type D = hipfp8_cast_transpose_desc;
        let (m, k) = (3usize, 5usize);
        for (scaling, sc) in [
            (
                hipfp8_scaling::HIPFP8_SCALING_TENSORWISE,
                Scaling::Tensorwise,
            ),
            (hipfp8_scaling::HIPFP8_SCALING_ROWWISE, Scaling::Rowwise),
        ] {
            let d = D {
                size: size_of::<D>(),
                input_dtype: BF16,
                format: 0,
                flags: 0,
                scaling: scaling as u32,
                m,
                k,
            };
            let call = c_call!(hipfp8_cast_transpose, 0, 1, 2, 3, 4);
            let op = Op::from_decl(&decl::CAST_TRANSPOSE, (m, k, sc), &[2], &[], d, call);
            ops.push(
                op.enums(&[
                    ("format", offset_of!(D, format)),
                    ("dtype", offset_of!(D, input_dtype)),
                    ("scaling", offset_of!(D, scaling)),
                ])
                .flags(offset_of!(D, flags))
                .reduced(offset_of!(D, k))
                .product(off!(D, m, k)),
            );
        }
    }
    {
        type D = hipfp8_mxfp8_desc;
        let (m, k) = (3usize, 40usize);
        let d = D {
            size: size_of::<D>(),
            input_dtype: BF16,
            format: 0,
            rounding: 1,
            m,
            k,
        };
        let dec = |o: Op| {
            o.enums(&[
                ("format", offset_of!(D, format)),
                ("dtype", offset_of!(D, input_dtype)),
                ("rounding", offset_of!(D, rounding)),
            ])
            .product(off!(D, m, k))
        };
        let call = c_call!(hipfp8_mxfp8_dim0, 0, 1, 2);
        ops.push(dec(Op::from_decl(
            &decl::MXFP8_DIM0,
            (m, k),
            &[2],
            &[],
            d,
            call,
        )));
        let call = c_call!(hipfp8_mxfp8_dim1, 0, 1, 2);
        ops.push(dec(Op::from_decl(
            &decl::MXFP8_DIM1,
            (m, k),
            &[2],
            &[],
            d,
            call,
        )));
    }
    {
        type D = hipfp8_grouped_gemm_2d3d_desc;
        let (m, k, n, e) = (5usize, 3usize, 2usize, 3usize);
        let d = D {
            size: size_of::<D>(),
            a_format: 0,
            b_format: 1,
            backend: 0,
            m,
            k,
            n,
            e,
        };
        let call = c_call!(hipfp8_grouped_gemm_2d3d, 0, 1, 2, 3, 4, 5; null_mut(), 0);
        let op = Op::from_decl(
            &decl::GROUPED_GEMM_2D3D,
            (m, k, n, e),
            &[],
            &GROUPS,
            d,
            call,
        );
        ops.push(
            op.enums(&[
                ("format", offset_of!(D, a_format)),
                ("format", offset_of!(D, b_format)),
                ("backend", offset_of!(D, backend)),
            ])
            .reduced(offset_of!(D, k))
            .product(off!(D, m, k, n, e))
            .linked(offset_of!(D, e)),
        );
        type B = hipfp8_grouped_gemm_blockwise_2d3d_desc;
        // k and n past one 128-block: two scale blocks along each.
        let (m, k, n, e) = (5usize, 130usize, 129usize, 3usize);
        let d = B {
            size: size_of::<B>(),
            a_format: 0,
            b_format: 1,
            backend: 0,
            m,
            k,
            n,
            e,
        };
        let call = c_call!(hipfp8_grouped_gemm_blockwise_2d3d, 0, 1, 2, 3, 4, 5; null_mut(), 0);
        let op = Op::from_decl(
            &decl::GROUPED_GEMM_BLOCKWISE_2D3D,
            (m, k, n, e),
            &[],
            &GROUPS,
            d,
            call,
        );
        ops.push(
            op.enums(&[
                ("format", offset_of!(B, a_format)),
                ("format", offset_of!(B, b_format)),
                ("backend", offset_of!(B, backend)),
            ])
            .reduced(offset_of!(B, k))
            .product(off!(B, m, k, n, e))
            .linked(offset_of!(B, e)),
        );
        type E = hipfp8_grouped_gemm_2d2d_desc;
        let (n, mt, k) = (2usize, 5usize, 3usize);
        let d = E {
            size: size_of::<E>(),
            a_format: 1,
            b_format: 0,
            backend: 0,
            n,
            mt,
            k,
        };
        let call = c_call!(hipfp8_grouped_gemm_2d2d, 0, 1, 2, 3, 4, 5; null_mut(), 0);
        let op = Op::from_decl(&decl::GROUPED_GEMM_2D2D, (n, mt, k), &[], &GROUPS, d, call);
        ops.push(
            op.enums(&[
                ("format", offset_of!(E, a_format)),
                ("format", offset_of!(E, b_format)),
                ("backend", offset_of!(E, backend)),
            ])
            .product(off!(E, n, mt, k)),
        );
        type W = hipfp8_grouped_gemm_blockwise_2d2d_desc;
        // mt past one 128-token block: two block rows of scales.
        let (n, mt, k) = (2usize, 130usize, 3usize);
        let d = W {
            size: size_of::<W>(),
            a_format: 1,
            b_format: 0,
            backend: 0,
            n,
            mt,
            k,
        };
        let call = c_call!(hipfp8_grouped_gemm_blockwise_2d2d, 0, 1, 2, 3, 4, 5; null_mut(), 0);
        let op = Op::from_decl(
            &decl::GROUPED_GEMM_BLOCKWISE_2D2D,
            (n, mt, k),
            &[],
            &GROUPS,
            d,
            call,
        );
        ops.push(
            op.enums(&[
                ("format", offset_of!(W, a_format)),
                ("format", offset_of!(W, b_format)),
                ("backend", offset_of!(W, backend)),
            ])
            .product(off!(W, n, mt, k)),
        );
    }
    moe_ops(&mut ops);
    route_ops(&mut ops);
    ops
}

/// The fused MoE casts (src/moe.rs): the weights' dual cast, the activations' grouped dual
/// cast, SwiGLU forward and backward (grouped along m, one dtype for all inputs).
fn moe_ops(ops: &mut Vec<Op>) {
    {
        type D = hipfp8_cast_3d_desc;
        let (e, k, n) = (2usize, 3usize, 4usize);
        let d = D {
            size: size_of::<D>(),
            input_dtype: BF16,
            format: 0,
            flags: 0,
            e,
            k,
            n,
        };
        let call = c_call!(hipfp8_moe_weights_dual, 0, 1, 2, 3, 4);
        let op = Op::from_decl(&decl::MOE_WEIGHTS_DUAL, (e, k, n), &[2], &[], d, call);
        ops.push(
            cast_fields!(op, D)
                .dequant_scales()
                .product(off!(D, e, k, n))
                .reduced(offset_of!(D, k))
                .reduced(offset_of!(D, n)),
        );
    }
    let call = c_call!(hipfp8_moe_act_dual, 0, 1, 2, 3, 4, 5);
    let op = cast_2d(&decl::MOE_ACT_DUAL, (5, 3), (F32, 4), &GROUPS, call);
    ops.push(
        op.dequant_scales()
            .reduced(offset_of!(hipfp8_cast_2d_desc, k)),
    );
    type D = hipfp8_moe_swiglu_desc;
    let (m, i) = (5usize, 3usize);
    for (dtype, esz) in [(BF16, 2), (F32, 4)] {
        let d = D {
            size: size_of::<D>(),
            input_dtype: dtype,
            format: 0,
            flags: 0,
            m,
            i,
        };
        let op = if dtype == BF16 {
            let call = c_call!(hipfp8_moe_swiglu_quant, 0, 1, 2, 3, 4, 5);
            Op::from_decl(&decl::MOE_SWIGLU_QUANT, (m, i), &[esz], &GROUPS, d, call)
        } else {
            let call = c_call!(hipfp8_moe_swiglu_bwd_quant, 0, 1, 2, 3, 4, 5, 6);
            let bwd = &decl::MOE_SWIGLU_BWD_QUANT;
            Op::from_decl(bwd, (m, i), &[esz, esz], &GROUPS, d, call)
        };
        ops.push(
            cast_fields!(op, D)
                .dequant_scales()
                .reduced(offset_of!(D, i))
                .product(off!(D, m, i)),
        );
    }
    // The MoE recipe's dequant scales (src/recipe.rs): no enum, flag or reduced field.
    type R = hipfp8_scale_reciprocal_desc;
    let d = R {
        size: size_of::<R>(),
        n: 7,
    };
    let call = c_call!(hipfp8_scale_reciprocal, 0, 1);
    ops.push(Op::from_decl(
        &decl::SCALE_RECIPROCAL,
        7usize,
        &[],
        &[],
        d,
        call,
    ));
}

/// The MoE routing exports (src/ffi/route.rs): dispatches over 3 tokens x top-2 (a valid
/// permutation; the slot at position 5 is past the last group) and combines over a padded
/// layout of 9 rows (slot rows valid, one -1).
fn route_ops(ops: &mut Vec<Op>) {
    type D = hipfp8_moe_dispatch_desc;
    let (t, k, topk, align) = (3usize, 4usize, 2usize, 2usize);
    let m_cap = t * topk + GROUPS.len() * (align - 1) + 1;
    let s = DispatchShape {
        t,
        k,
        topk,
        align,
        m_cap,
    };
    for weighted in [false, true] {
        let d = D {
            size: size_of::<D>(),
            input_dtype: F32,
            format: 0,
            flags: 0,
            t,
            k,
            topk,
            align,
            m_cap,
        };
        let op = if weighted {
            let call = c_call!(hipfp8_moe_combine_bwd_dual, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9);
            Op::from_decl(&decl::MOE_COMBINE_BWD_DUAL, s, &[4], &GROUPS, d, call)
        } else {
            let call = c_call!(hipfp8_moe_dispatch_dual, 0, 1, 2, 3, 4, 5, 6, 7, 8);
            Op::from_decl(&decl::MOE_DISPATCH_DUAL, s, &[4], &GROUPS, d, call)
        };
        let mut op = cast_fields!(op, D)
            .dequant_scales()
            .reduced(offset_of!(D, k))
            .reduced(offset_of!(D, topk))
            .reduced(offset_of!(D, align))
            .product(off!(D, t, k));
        op.buf("perm").set_i32(&[5, 0, 3, 1, 4, 2]);
        ops.push(op);
    }
    type C = hipfp8_moe_combine_desc;
    let c = CombineShape {
        t,
        k,
        topk,
        m_cap: 9,
    };
    for (dtype, esz) in [(BF16, 2), (F32, 4)] {
        let d = C {
            size: size_of::<C>(),
            input_dtype: dtype,
            t,
            k,
            topk,
            m_cap: 9,
        };
        let rows = [0, 8, -1, 2, 3, 4];
        let call = c_call!(hipfp8_moe_combine, 0, 1, 2, 3);
        let mut op = Op::from_decl(&decl::MOE_COMBINE, c, &[esz], &[], d, call)
            .enums(&[("dtype", offset_of!(C, input_dtype))])
            .product(off!(C, t, k));
        op.buf("slot_row").set_i32(&rows);
        ops.push(op);
        let call = c_call!(hipfp8_moe_combine_bwd_scores, 0, 1, 2, 3);
        let mut op = Op::from_decl(&decl::MOE_COMBINE_BWD_SCORES, c, &[esz, esz], &[], d, call)
            .enums(&[("dtype", offset_of!(C, input_dtype))])
            .product(off!(C, t, k));
        op.buf("slot_row").set_i32(&rows);
        ops.push(op);
    }
}

pub fn grouped_ops() -> Vec<(Op, &'static str, usize)> {
    let v: Vec<_> = all_ops()
        .into_iter()
        .filter_map(|o| o.offs.map(|(b, e)| (o, b, e)))
        .collect();
    assert!(v.len() >= 6, "every grouped op is in the matrix");
    v
}
