//! The bad-input matrix of the C ABI (issue 3): one test per row. Each row is applied to
//! every exported op it makes sense for, through the `extern "C"` entry points themselves.
//! Every failing call must return its specific status, leave a last-error message naming
//! the function and the culprit, and leave every output buffer (pre-filled with a poison
//! pattern) untouched.
//!
//! Alignment rule checked here (documented in the header): every pointer must be aligned to
//! its element type — bf16 inputs 2 bytes, f32 inputs/scales and int32 offsets 4 bytes; FP8
//! data and E8M0 scales (bytes) have no requirement.

use std::ffi::{CStr, c_void};
use std::mem::{offset_of, size_of};
use std::ptr::{null, null_mut};

use hipfp8::ffi::*;

use hipfp8_status::*;

const POISON: u8 = 0xA5;

// ---- the harness ---------------------------------------------------------------------------

/// One buffer argument: 8-aligned backing store with one spare byte so the pointer can be
/// deliberately misaligned.
#[derive(Clone)]
struct Buf {
    name: &'static str,
    elem: usize,
    len: usize,
    output: bool,
    store: Vec<u64>,
    null: bool,
    misalign: bool,
}

impl Buf {
    fn new(name: &'static str, elem: usize, len: usize, output: bool) -> Buf {
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
    fn input(name: &'static str, elem: usize, len: usize) -> Buf {
        Buf::new(name, elem, len, false)
    }
    fn output(name: &'static str, elem: usize, len: usize) -> Buf {
        Buf::new(name, elem, len, true)
    }
    fn ptr(&mut self) -> *mut u8 {
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
    fn bytes(&self) -> &[u8] {
        // SAFETY: viewing the Vec<u64> store as bytes.
        unsafe {
            std::slice::from_raw_parts(self.store.as_ptr().cast::<u8>(), self.store.len() * 8)
        }
    }
    /// Write int32 values (offsets) at the start of an input.
    fn set_i32(&mut self, vals: &[i32]) {
        let p = self.ptr().cast::<i32>();
        for (i, v) in vals.iter().enumerate() {
            // SAFETY: callers write at most `len` int32s into an aligned store.
            unsafe { p.add(i).write(*v) };
        }
    }
    fn untouched(&self) -> bool {
        self.bytes().iter().all(|&b| b == POISON)
    }
}

type CallFn = fn(*const hipfp8_context, *const c_void, &[*mut u8], &[usize]) -> hipfp8_status;

/// One exported op with a valid problem; rows mutate a copy of it.
#[derive(Clone)]
struct Op {
    name: &'static str,
    desc: Vec<u64>,
    desc_size: usize,
    /// Offsets of the enum-valued descriptor fields (format, dtype, ...) and of `flags`.
    enum_fields: Vec<(&'static str, usize)>,
    flags_field: Option<usize>,
    /// A dimension that is reduced over and so must be > 0.
    reduced: Option<usize>,
    /// Dimension fields whose product sizes the buffers (set huge to overflow).
    product: Vec<usize>,
    /// Grouped ops: the offsets buffer and the extent they index.
    offs: Option<(&'static str, usize)>,
    /// Dimensions tied to another argument (e must equal the number of offsets).
    linked: Vec<usize>,
    bufs: Vec<Buf>,
    call: CallFn,
}

impl Op {
    fn new<D: Copy>(name: &'static str, desc: D, bufs: Vec<Buf>, call: CallFn) -> Op {
        let mut store = vec![0u64; size_of::<D>().div_ceil(8)];
        // SAFETY: the store is 8-aligned and at least size_of::<D>() bytes.
        unsafe { store.as_mut_ptr().cast::<D>().write(desc) };
        Op {
            name,
            desc: store,
            desc_size: size_of::<D>(),
            enum_fields: vec![],
            flags_field: None,
            reduced: None,
            product: vec![],
            offs: None,
            linked: vec![],
            bufs,
            call,
        }
    }
    fn enums(mut self, fields: &[(&'static str, usize)]) -> Op {
        self.enum_fields = fields.to_vec();
        self
    }
    fn flags(mut self, off: usize) -> Op {
        self.flags_field = Some(off);
        self
    }
    fn reduced(mut self, off: usize) -> Op {
        self.reduced = Some(off);
        self
    }
    fn product(mut self, offs: &[usize]) -> Op {
        self.product = offs.to_vec();
        self
    }
    fn grouped(mut self, offs_buf: &'static str, extent: usize, vals: &[i32]) -> Op {
        self.offs = Some((offs_buf, extent));
        self.buf(offs_buf).set_i32(vals);
        self
    }
    fn linked(mut self, off: usize) -> Op {
        self.linked.push(off);
        self
    }
    fn set_desc_u32(&mut self, off: usize, v: u32) {
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
    fn set_desc_usize(&mut self, off: usize, v: usize) {
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
    fn buf(&mut self, name: &str) -> &mut Buf {
        self.bufs
            .iter_mut()
            .find(|b| b.name == name)
            .unwrap_or_else(|| panic!("no buffer {name}"))
    }
    fn invoke_with(&mut self, ctx: *const hipfp8_context, desc: *const c_void) -> hipfp8_status {
        let ptrs: Vec<*mut u8> = self.bufs.iter_mut().map(|b| b.ptr()).collect();
        let lens: Vec<usize> = self.bufs.iter().map(|b| b.len).collect();
        (self.call)(ctx, desc, &ptrs, &lens)
    }
    fn invoke(&mut self, ctx: *const hipfp8_context) -> hipfp8_status {
        let desc = self.desc.as_ptr().cast::<c_void>();
        self.invoke_with(ctx, desc)
    }
    /// Assert a failure: status, message fragments, untouched outputs.
    fn expect_fail(&self, row: &str, got: hipfp8_status, want: hipfp8_status, msg: &[&str]) {
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

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated, valid until the next hipfp8 call on this thread.
    unsafe { CStr::from_ptr(hipfp8_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

struct Ctx(*mut hipfp8_context);

impl Ctx {
    fn cpu() -> Ctx {
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

fn p<T>(ps: &[*mut u8], i: usize) -> *mut T {
    ps[i].cast()
}

// ---- the ops, each with a small valid problem ------------------------------------------------

const BF16: u32 = hipfp8_dtype::HIPFP8_DTYPE_BF16 as u32;
const F32: u32 = hipfp8_dtype::HIPFP8_DTYPE_F32 as u32;
const NS: hipStream_t = null_mut();

macro_rules! off {
    ($t:ty, $($f:ident),+) => { &[$(offset_of!($t, $f)),+] };
}

fn cast_2d(name: &'static str, m: usize, k: usize, dtype: u32, bufs: Vec<Buf>, call: CallFn) -> Op {
    type D = hipfp8_cast_2d_desc;
    let d = D {
        size: size_of::<D>(),
        input_dtype: dtype,
        format: 0,
        flags: 0,
        m,
        k,
    };
    Op::new(name, d, bufs, call)
        .enums(&[
            ("format", offset_of!(D, format)),
            ("dtype", offset_of!(D, input_dtype)),
        ])
        .flags(offset_of!(D, flags))
        .product(off!(D, m, k))
}

fn all_ops() -> Vec<Op> {
    let mut ops = Vec::new();
    let (m, k) = (3usize, 5usize);
    for (dtype, esz) in [(BF16, 2), (F32, 4)] {
        ops.push(
            cast_2d(
                "hipfp8_rowwise_2d",
                m,
                k,
                dtype,
                vec![
                    Buf::input("x", esz, m * k),
                    Buf::output("out", 1, m * k),
                    Buf::output("scales", 4, m),
                ],
                |c, d, ps, ls| {
                    hipfp8_rowwise_2d(
                        c,
                        d.cast(),
                        ps[0].cast(),
                        ls[0],
                        p(ps, 1),
                        ls[1],
                        p(ps, 2),
                        ls[2],
                        NS,
                    )
                },
            )
            .reduced(offset_of!(hipfp8_cast_2d_desc, k)),
        );
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
        let bufs = |ns| {
            vec![
                Buf::input("x", 4, e * k * n),
                Buf::output("out", 1, e * k * n),
                Buf::output("scales", 4, ns),
            ]
        };
        let dec = |o: Op| {
            o.enums(&[
                ("format", offset_of!(D, format)),
                ("dtype", offset_of!(D, input_dtype)),
            ])
            .flags(offset_of!(D, flags))
            .product(off!(D, e, k, n))
        };
        ops.push(
            dec(Op::new(
                "hipfp8_colwise_3d",
                d,
                bufs(e * n),
                |c, d, ps, ls| {
                    hipfp8_colwise_3d(
                        c,
                        d.cast(),
                        ps[0].cast(),
                        ls[0],
                        p(ps, 1),
                        ls[1],
                        p(ps, 2),
                        ls[2],
                        NS,
                    )
                },
            ))
            .reduced(offset_of!(D, k)),
        );
        ops.push(
            dec(Op::new(
                "hipfp8_rowwise_3d_transpose_rhs",
                d,
                bufs(e * k),
                |c, d, ps, ls| {
                    hipfp8_rowwise_3d_transpose_rhs(
                        c,
                        d.cast(),
                        ps[0].cast(),
                        ls[0],
                        p(ps, 1),
                        ls[1],
                        p(ps, 2),
                        ls[2],
                        NS,
                    )
                },
            ))
            .reduced(offset_of!(D, n)),
        );
    }
    {
        // Grouped along m (5 rows, groups [0,1) [1,3) [3,5)).
        let (m, k, g) = (5usize, 3usize, 3usize);
        ops.push(
            cast_2d(
                "hipfp8_per_group_colwise",
                m,
                k,
                BF16,
                vec![
                    Buf::input("x", 2, m * k),
                    Buf::input("offs", 4, g),
                    Buf::output("out", 1, m * k),
                    Buf::output("scales", 4, g * k),
                ],
                |c, d, ps, ls| {
                    hipfp8_per_group_colwise(
                        c,
                        d.cast(),
                        ps[0].cast(),
                        ls[0],
                        p(ps, 1),
                        ls[1],
                        p(ps, 2),
                        ls[2],
                        p(ps, 3),
                        ls[3],
                        NS,
                    )
                },
            )
            .grouped("offs", m, &[1, 3, 5]),
        );
        // Grouped along k (3 rows, 5 columns).
        let (m2, k2) = (3usize, 5usize);
        ops.push(
            cast_2d(
                "hipfp8_per_group_rowwise",
                m2,
                k2,
                F32,
                vec![
                    Buf::input("x", 4, m2 * k2),
                    Buf::input("offs", 4, g),
                    Buf::output("out", 1, m2 * k2),
                    Buf::output("scales", 4, g * m2),
                ],
                |c, d, ps, ls| {
                    hipfp8_per_group_rowwise(
                        c,
                        d.cast(),
                        ps[0].cast(),
                        ls[0],
                        p(ps, 1),
                        ls[1],
                        p(ps, 2),
                        ls[2],
                        p(ps, 3),
                        ls[3],
                        NS,
                    )
                },
            )
            .grouped("offs", k2, &[1, 3, 5]),
        );
        type D = hipfp8_cast_dual_desc;
        let (k1, k2) = (3usize, 2usize);
        let d = D {
            size: size_of::<D>(),
            input_dtype: BF16,
            format: 0,
            flags: 0,
            input_dtype2: F32,
            m,
            k1,
            k2,
        };
        ops.push(
            Op::new(
                "hipfp8_per_group_colwise_dual",
                d,
                vec![
                    Buf::input("x1", 2, m * k1),
                    Buf::input("x2", 4, m * k2),
                    Buf::input("offs", 4, g),
                    Buf::output("out1", 1, m * k1),
                    Buf::output("scales1", 4, g * k1),
                    Buf::output("out2", 1, m * k2),
                    Buf::output("scales2", 4, g * k2),
                ],
                |c, d, ps, ls| {
                    hipfp8_per_group_colwise_dual(
                        c,
                        d.cast(),
                        ps[0].cast(),
                        ls[0],
                        ps[1].cast(),
                        ls[1],
                        p(ps, 2),
                        ls[2],
                        p(ps, 3),
                        ls[3],
                        p(ps, 4),
                        ls[4],
                        p(ps, 5),
                        ls[5],
                        p(ps, 6),
                        ls[6],
                        NS,
                    )
                },
            )
            .enums(&[
                ("format", offset_of!(D, format)),
                ("dtype", offset_of!(D, input_dtype)),
                ("dtype", offset_of!(D, input_dtype2)),
            ])
            .flags(offset_of!(D, flags))
            .product(off!(D, m, k1, k2))
            .grouped("offs", m, &[1, 3, 5]),
        );
        type P = hipfp8_padded_desc;
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
        ops.push(
            Op::new(
                "hipfp8_rowwise_2d_padded",
                d,
                vec![
                    Buf::input("x", 2, m * k),
                    Buf::input("offs", 4, g),
                    Buf::output("out", 1, m_cap * k),
                    Buf::output("scales", 4, m_cap),
                    Buf::output("padded_offs", 4, g),
                ],
                |c, d, ps, ls| {
                    hipfp8_rowwise_2d_padded(
                        c,
                        d.cast(),
                        ps[0].cast(),
                        ls[0],
                        p(ps, 1),
                        ls[1],
                        p(ps, 2),
                        ls[2],
                        p(ps, 3),
                        ls[3],
                        p(ps, 4),
                        ls[4],
                        NS,
                    )
                },
            )
            .enums(&[
                ("format", offset_of!(P, format)),
                ("dtype", offset_of!(P, input_dtype)),
            ])
            .flags(offset_of!(P, flags))
            .reduced(offset_of!(P, k))
            .product(off!(P, m, k))
            .grouped("offs", m, &[1, 3, 5]),
        );
    }
    {
        type D = hipfp8_tensorwise_desc;
        let n = 7usize;
        let d = D {
            size: size_of::<D>(),
            input_dtype: BF16,
            format: 0,
            flags: 0,
            n,
        };
        // (n is a plain count: a huge n is an input too small, not an overflow; no product.)
        ops.push(
            Op::new(
                "hipfp8_tensorwise",
                d,
                vec![
                    Buf::input("x", 2, n),
                    Buf::output("out", 1, n),
                    Buf::output("scale", 4, 1),
                    Buf::output("amax", 4, 1),
                ],
                |c, d, ps, ls| {
                    hipfp8_tensorwise(
                        c,
                        d.cast(),
                        ps[0].cast(),
                        ls[0],
                        p(ps, 1),
                        ls[1],
                        p(ps, 2),
                        ls[2],
                        p(ps, 3),
                        ls[3],
                        NS,
                    )
                },
            )
            .enums(&[
                ("format", offset_of!(D, format)),
                ("dtype", offset_of!(D, input_dtype)),
            ])
            .flags(offset_of!(D, flags)),
        );
    }
    {
        let (m, k) = (3usize, 130usize);
        ops.push(cast_2d(
            "hipfp8_blockwise_1x128",
            m,
            k,
            BF16,
            vec![
                Buf::input("x", 2, m * k),
                Buf::output("out", 1, m * k),
                Buf::output("scales", 4, m * 2),
            ],
            |c, d, ps, ls| {
                hipfp8_blockwise_1x128(
                    c,
                    d.cast(),
                    ps[0].cast(),
                    ls[0],
                    p(ps, 1),
                    ls[1],
                    p(ps, 2),
                    ls[2],
                    NS,
                )
            },
        ));
        let (m, k) = (130usize, 5usize);
        ops.push(cast_2d(
            "hipfp8_blockwise_128x128",
            m,
            k,
            F32,
            vec![
                Buf::input("x", 4, m * k),
                Buf::output("out", 1, m * k),
                Buf::output("scales", 4, 2),
            ],
            |c, d, ps, ls| {
                hipfp8_blockwise_128x128(
                    c,
                    d.cast(),
                    ps[0].cast(),
                    ls[0],
                    p(ps, 1),
                    ls[1],
                    p(ps, 2),
                    ls[2],
                    NS,
                )
            },
        ));
    }
    {
        type D = hipfp8_cast_transpose_desc;
        let (m, k) = (3usize, 5usize);
        for (scaling, ns, nst) in [
            (hipfp8_scaling::HIPFP8_SCALING_TENSORWISE, 1, 1),
            (hipfp8_scaling::HIPFP8_SCALING_ROWWISE, m, k),
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
            ops.push(
                Op::new(
                    "hipfp8_cast_transpose",
                    d,
                    vec![
                        Buf::input("x", 2, m * k),
                        Buf::output("out", 1, m * k),
                        Buf::output("out_t", 1, m * k),
                        Buf::output("scales", 4, ns),
                        Buf::output("scales_t", 4, nst),
                    ],
                    |c, d, ps, ls| {
                        hipfp8_cast_transpose(
                            c,
                            d.cast(),
                            ps[0].cast(),
                            ls[0],
                            p(ps, 1),
                            ls[1],
                            p(ps, 2),
                            ls[2],
                            p(ps, 3),
                            ls[3],
                            p(ps, 4),
                            ls[4],
                            NS,
                        )
                    },
                )
                .enums(&[
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
        ops.push(dec(Op::new(
            "hipfp8_mxfp8_dim0",
            d,
            vec![
                Buf::input("x", 2, m * k),
                Buf::output("out", 1, m * k),
                Buf::output("scales", 1, m * 2),
            ],
            |c, d, ps, ls| {
                hipfp8_mxfp8_dim0(
                    c,
                    d.cast(),
                    ps[0].cast(),
                    ls[0],
                    p(ps, 1),
                    ls[1],
                    p(ps, 2),
                    ls[2],
                    NS,
                )
            },
        )));
        ops.push(dec(Op::new(
            "hipfp8_mxfp8_dim1",
            d,
            vec![
                Buf::input("x", 2, m * k),
                Buf::output("out", 1, m * k),
                Buf::output("scales", 1, k),
            ],
            |c, d, ps, ls| {
                hipfp8_mxfp8_dim1(
                    c,
                    d.cast(),
                    ps[0].cast(),
                    ls[0],
                    p(ps, 1),
                    ls[1],
                    p(ps, 2),
                    ls[2],
                    NS,
                )
            },
        )));
    }
    {
        type D = hipfp8_grouped_gemm_2d3d_desc;
        let (m, k, n, e) = (5usize, 3usize, 2usize, 3usize);
        let d = D {
            size: size_of::<D>(),
            a_format: 0,
            b_format: 1,
            m,
            k,
            n,
            e,
        };
        ops.push(
            Op::new(
                "hipfp8_grouped_gemm_2d3d",
                d,
                vec![
                    Buf::input("a", 1, m * k),
                    Buf::input("b", 1, e * k * n),
                    Buf::input("offs", 4, e),
                    Buf::input("scale_a", 4, m),
                    Buf::input("scale_b", 4, e * n),
                    Buf::output("out", 2, m * n),
                ],
                |c, d, ps, ls| {
                    hipfp8_grouped_gemm_2d3d(
                        c,
                        d.cast(),
                        ps[0],
                        ls[0],
                        ps[1],
                        ls[1],
                        p(ps, 2),
                        ls[2],
                        p(ps, 3),
                        ls[3],
                        p(ps, 4),
                        ls[4],
                        p(ps, 5),
                        ls[5],
                        NS,
                    )
                },
            )
            .enums(&[
                ("format", offset_of!(D, a_format)),
                ("format", offset_of!(D, b_format)),
            ])
            .reduced(offset_of!(D, k))
            .product(off!(D, m, k, n, e))
            .linked(offset_of!(D, e))
            .grouped("offs", m, &[1, 3, 5]),
        );
        type E = hipfp8_grouped_gemm_2d2d_desc;
        let (n, mt, k, g) = (2usize, 5usize, 3usize, 3usize);
        let d = E {
            size: size_of::<E>(),
            a_format: 1,
            b_format: 0,
            n,
            mt,
            k,
        };
        ops.push(
            Op::new(
                "hipfp8_grouped_gemm_2d2d",
                d,
                vec![
                    Buf::input("a", 1, n * mt),
                    Buf::input("b", 1, mt * k),
                    Buf::input("offs", 4, g),
                    Buf::input("scale_a", 4, g * n),
                    Buf::input("scale_b", 4, g * k),
                    Buf::output("out", 2, g * n * k),
                ],
                |c, d, ps, ls| {
                    hipfp8_grouped_gemm_2d2d(
                        c,
                        d.cast(),
                        ps[0],
                        ls[0],
                        ps[1],
                        ls[1],
                        p(ps, 2),
                        ls[2],
                        p(ps, 3),
                        ls[3],
                        p(ps, 4),
                        ls[4],
                        p(ps, 5),
                        ls[5],
                        NS,
                    )
                },
            )
            .enums(&[
                ("format", offset_of!(E, a_format)),
                ("format", offset_of!(E, b_format)),
            ])
            .product(off!(E, n, mt, k))
            .grouped("offs", mt, &[1, 3, 5]),
        );
    }
    ops
}

fn grouped_ops() -> Vec<(Op, &'static str, usize)> {
    let v: Vec<_> = all_ops()
        .into_iter()
        .filter_map(|o| o.offs.map(|(b, e)| (o, b, e)))
        .collect();
    assert!(v.len() >= 6, "every grouped op is in the matrix");
    v
}

/// Every export of the header is exercised by the matrix (a new op without a row fails here).
#[test]
fn matrix_covers_every_op_export() {
    let header =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/hipfp8.h")).unwrap();
    let names: std::collections::BTreeSet<&str> = all_ops().iter().map(|o| o.name).collect();
    for line in header
        .lines()
        .filter(|l| l.starts_with("hipfp8_status hipfp8_"))
    {
        let f = &line["hipfp8_status ".len()..line.find('(').unwrap()];
        if f.starts_with("hipfp8_context_") {
            continue; // context functions: rows of their own below
        }
        assert!(
            names.contains(f),
            "{f} is exported but not in the bad-input matrix"
        );
    }
}

// ---- sanity: every case is valid as built ---------------------------------------------------

#[test]
fn valid_calls_succeed_and_write() {
    let ctx = Ctx::cpu();
    for mut op in all_ops() {
        assert_eq!(
            op.invoke(ctx.0),
            HIPFP8_STATUS_SUCCESS,
            "{}: {}",
            op.name,
            last_error()
        );
        assert_eq!(last_error(), "");
        for b in op.bufs.iter().filter(|b| b.output) {
            assert!(!b.untouched(), "{}: `{}` not written", op.name, b.name);
        }
    }
}

// ---- the rows --------------------------------------------------------------------------------

#[test]
fn null_context() {
    for mut op in all_ops() {
        let st = op.invoke(null());
        op.expect_fail("null context", st, HIPFP8_STATUS_INVALID_HANDLE, &["NULL"]);
    }
}

#[test]
fn destroyed_context() {
    let mut c = null_mut();
    assert_eq!(hipfp8_context_create(1, 0, &mut c), HIPFP8_STATUS_SUCCESS);
    assert_eq!(hipfp8_context_destroy(c), HIPFP8_STATUS_SUCCESS);
    for mut op in all_ops() {
        let st = op.invoke(c);
        op.expect_fail(
            "destroyed context",
            st,
            HIPFP8_STATUS_INVALID_HANDLE,
            &["not a live context"],
        );
    }
    // Destroying twice is detected too, and so is a pointer that never was a context.
    assert_eq!(hipfp8_context_destroy(c), HIPFP8_STATUS_INVALID_HANDLE);
    assert!(last_error().contains("not a live context"));
    let mut not_a_context = 0u64;
    let fake = (&raw mut not_a_context).cast::<hipfp8_context>();
    for mut op in all_ops() {
        let st = op.invoke(fake);
        op.expect_fail(
            "made-up handle",
            st,
            HIPFP8_STATUS_INVALID_HANDLE,
            &["not a live context"],
        );
    }
    assert_eq!(not_a_context, 0);
    // The query functions check the handle the same way.
    let mut fmt = hipfp8_format::HIPFP8_FORMAT_E5M2;
    assert_eq!(
        hipfp8_context_native_format(c, &mut fmt),
        HIPFP8_STATUS_INVALID_HANDLE
    );
    assert_eq!(fmt, hipfp8_format::HIPFP8_FORMAT_E5M2);
}

#[test]
fn null_descriptor() {
    let ctx = Ctx::cpu();
    for mut op in all_ops() {
        let st = op.invoke_with(ctx.0, null());
        op.expect_fail(
            "null descriptor",
            st,
            HIPFP8_STATUS_NULL_POINTER,
            &["`desc`"],
        );
    }
}

#[test]
fn null_pointer() {
    let ctx = Ctx::cpu();
    for op in all_ops() {
        for i in 0..op.bufs.len() {
            let mut o = op.clone();
            o.bufs[i].null = true;
            let name = o.bufs[i].name;
            let st = o.invoke(ctx.0);
            o.expect_fail(
                "null pointer",
                st,
                HIPFP8_STATUS_NULL_POINTER,
                &[&format!("`{name}`")],
            );
        }
    }
}

#[test]
fn wrong_descriptor_size() {
    let ctx = Ctx::cpu();
    for op in all_ops() {
        let real = op.desc_size;
        for bad in [0, 8, real - 8, real + 8, usize::MAX] {
            let mut o = op.clone();
            o.set_desc_usize(0, bad);
            let st = o.invoke(ctx.0);
            o.expect_fail(
                "wrong descriptor size",
                st,
                HIPFP8_STATUS_INVALID_DESCRIPTOR,
                &[&format!("size field {bad}"), &format!("expected {real}")],
            );
        }
    }
}

#[test]
fn unknown_enum_values() {
    let ctx = Ctx::cpu();
    for op in all_ops() {
        assert!(!op.enum_fields.is_empty());
        for &(field, off) in &op.enum_fields {
            for bad in [6u32, 0x8000_0000, u32::MAX] {
                let mut o = op.clone();
                o.set_desc_u32(off, bad);
                let st = o.invoke(ctx.0);
                o.expect_fail(
                    "unknown enum",
                    st,
                    HIPFP8_STATUS_INVALID_ENUM,
                    &[field, &bad.to_string()],
                );
            }
        }
        if let Some(off) = op.flags_field {
            let mut o = op.clone();
            o.set_desc_u32(off, 0x10 | hipfp8_flag::HIPFP8_FLAG_POW2_SCALES as u32);
            let st = o.invoke(ctx.0);
            o.expect_fail(
                "unknown flag bit",
                st,
                HIPFP8_STATUS_INVALID_ENUM,
                &["flags", "0x10"],
            );
        }
    }
    // Enum parameters of the context functions.
    let mut c = null_mut();
    assert_eq!(
        hipfp8_context_create(3, 0, &mut c),
        HIPFP8_STATUS_INVALID_ENUM
    );
    assert!(c.is_null(), "out-parameter written on failure");
    assert!(last_error().contains("backend = 3"));
    assert_eq!(
        hipfp8_context_create_cpu(77, &mut c),
        HIPFP8_STATUS_INVALID_ENUM
    );
    assert!(c.is_null());
    let mut f = hipfp8_format::HIPFP8_FORMAT_E5M2;
    assert_eq!(
        hipfp8_context_resolve_format(ctx.0, 6, &mut f),
        HIPFP8_STATUS_INVALID_ENUM
    );
    assert_eq!(f, hipfp8_format::HIPFP8_FORMAT_E5M2);
}

#[test]
fn zero_dims() {
    let ctx = Ctx::cpu();
    for op in all_ops() {
        if let Some(off) = op.reduced {
            let mut o = op.clone();
            o.set_desc_usize(off, 0);
            let st = o.invoke(ctx.0);
            o.expect_fail(
                "zero reduced dim",
                st,
                HIPFP8_STATUS_INVALID_SHAPE,
                &["must be > 0"],
            );
        }
        // Every other dimension may be 0: the call succeeds (all-zero offsets stay valid).
        for &off in op
            .product
            .iter()
            .filter(|&&off| Some(off) != op.reduced && !op.linked.contains(&off))
        {
            let mut o = op.clone();
            o.set_desc_usize(off, 0);
            if let Some((b, _)) = o.offs {
                o.buf(b).set_i32(&[0, 0, 0]);
            }
            assert_eq!(
                o.invoke(ctx.0),
                HIPFP8_STATUS_SUCCESS,
                "{}: {}",
                o.name,
                last_error()
            );
        }
    }
    // With nothing to write, NULL (count 0) buffers are fine.
    let mut d = hipfp8_cast_2d_desc {
        size: size_of::<hipfp8_cast_2d_desc>(),
        input_dtype: 0,
        format: 0,
        flags: 0,
        m: 0,
        k: 8,
    };
    let st = hipfp8_rowwise_2d(ctx.0, &d, null(), 0, null_mut(), 0, null_mut(), 0, NS);
    assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());
    d.m = 1;
    let st = hipfp8_rowwise_2d(ctx.0, &d, null(), 0, null_mut(), 0, null_mut(), 0, NS);
    assert_eq!(st, HIPFP8_STATUS_NULL_POINTER, "{}", last_error());
}

#[test]
fn huge_dims_overflow() {
    let ctx = Ctx::cpu();
    for op in all_ops() {
        if !op.product.is_empty() {
            let mut o = op.clone();
            for &off in &op.product {
                o.set_desc_usize(off, usize::MAX / 2 + 1);
            }
            let st = o.invoke(ctx.0);
            o.expect_fail("huge dims", st, HIPFP8_STATUS_SIZE_OVERFLOW, &["overflows"]);
        }
        // A count whose byte size exceeds the address space is refused before any view is
        // made from it. (Byte buffers are skipped: isize::MAX one-byte elements still pass
        // that check, and a slice of them would be undefined behaviour in this test.)
        for i in 0..op.bufs.len() {
            if op.bufs[i].elem == 1 {
                continue;
            }
            let mut o = op.clone();
            o.bufs[i].len = usize::MAX / 2;
            let name = o.bufs[i].name;
            let st = o.invoke(ctx.0);
            o.expect_fail(
                "huge count",
                st,
                HIPFP8_STATUS_SIZE_OVERFLOW,
                &[&format!("`{name}`"), "address space"],
            );
        }
    }
}

#[test]
fn misaligned_pointers() {
    let ctx = Ctx::cpu();
    for op in all_ops() {
        for i in 0..op.bufs.len() {
            if op.bufs[i].elem == 1 {
                continue; // bytes: no alignment requirement
            }
            let mut o = op.clone();
            o.bufs[i].misalign = true;
            let name = o.bufs[i].name;
            let st = o.invoke(ctx.0);
            o.expect_fail(
                "misaligned",
                st,
                HIPFP8_STATUS_MISALIGNED,
                &[
                    &format!("`{name}`"),
                    &format!("{}-byte aligned", o.bufs[i].elem),
                ],
            );
        }
        // The descriptor itself must be aligned too.
        let mut o = op.clone();
        let mut shifted = vec![0u8; o.desc_size + 8];
        // SAFETY: copying the descriptor bytes into a larger byte buffer at offset 1.
        unsafe {
            std::ptr::copy_nonoverlapping(
                o.desc.as_ptr().cast::<u8>(),
                shifted.as_mut_ptr().add(1),
                o.desc_size,
            )
        };
        // SAFETY: offset 1 is inside `shifted`.
        let d = unsafe { shifted.as_ptr().add(1) }.cast::<c_void>();
        let st = o.invoke_with(ctx.0, d);
        o.expect_fail("misaligned desc", st, HIPFP8_STATUS_MISALIGNED, &["`desc`"]);
    }
}

#[test]
fn buffers_smaller_than_needed() {
    let ctx = Ctx::cpu();
    for op in all_ops() {
        for i in 0..op.bufs.len() {
            if Some(op.bufs[i].name) == op.offs.map(|o| o.0) {
                continue; // the offsets' count is the group count, not a capacity
            }
            let mut o = op.clone();
            o.bufs[i].len -= 1;
            let (name, needed, output) = (o.bufs[i].name, op.bufs[i].len, o.bufs[i].output);
            let want = if output {
                HIPFP8_STATUS_OUTPUT_TOO_SMALL
            } else {
                HIPFP8_STATUS_INPUT_TOO_SMALL
            };
            let st = o.invoke(ctx.0);
            o.expect_fail(
                "too small",
                st,
                want,
                &[
                    &format!("`{name}`"),
                    &format!("needs {needed}"),
                    &format!("got {}", needed - 1),
                ],
            );
        }
    }
}

#[test]
fn non_monotonic_offsets() {
    let ctx = Ctx::cpu();
    for (mut op, offs, extent) in grouped_ops() {
        op.buf(offs).set_i32(&[2, 1, extent as i32]);
        let st = op.invoke(ctx.0);
        op.expect_fail(
            "non-monotonic offsets",
            st,
            HIPFP8_STATUS_INVALID_OFFSETS,
            &["non-decreasing", "offs[1] = 1"],
        );
    }
}

#[test]
fn offsets_past_extent() {
    let ctx = Ctx::cpu();
    for (mut op, offs, extent) in grouped_ops() {
        op.buf(offs).set_i32(&[1, 2, extent as i32 + 1]);
        let st = op.invoke(ctx.0);
        let past = format!("offs[2] = {} is past the extent {extent}", extent + 1);
        op.expect_fail(
            "offsets past extent",
            st,
            HIPFP8_STATUS_INVALID_OFFSETS,
            &[&past],
        );
    }
}

#[test]
fn negative_offsets() {
    let ctx = Ctx::cpu();
    for (mut op, offs, extent) in grouped_ops() {
        op.buf(offs).set_i32(&[-1, 2, extent as i32]);
        let st = op.invoke(ctx.0);
        op.expect_fail(
            "negative offsets",
            st,
            HIPFP8_STATUS_INVALID_OFFSETS,
            &["offs[0] = -1 is negative"],
        );
    }
}

#[test]
fn group_count_mismatch() {
    // 2D x 3D GEMM: one group per expert, so the offsets' count must equal e.
    let ctx = Ctx::cpu();
    let mut op = all_ops()
        .into_iter()
        .find(|o| o.name == "hipfp8_grouped_gemm_2d3d")
        .unwrap();
    op.set_desc_usize(offset_of!(hipfp8_grouped_gemm_2d3d_desc, e), 2);
    let st = op.invoke(ctx.0);
    op.expect_fail(
        "group count mismatch",
        st,
        HIPFP8_STATUS_GROUP_COUNT_MISMATCH,
        &["expected 2, got 3"],
    );
}

#[test]
fn unsupported_format() {
    // MXFP8 has no FNUZ elements: explicitly, or through AUTO on an FNUZ-native context.
    let ctx = Ctx::cpu();
    let mut fnuz = null_mut();
    let st = hipfp8_context_create_cpu(hipfp8_format::HIPFP8_FORMAT_E4M3FNUZ as u32, &mut fnuz);
    assert_eq!(st, HIPFP8_STATUS_SUCCESS);
    let fnuz = Ctx(fnuz);
    for op in all_ops()
        .into_iter()
        .filter(|o| o.name.starts_with("hipfp8_mxfp8"))
    {
        let mut o = op.clone();
        o.set_desc_u32(
            offset_of!(hipfp8_mxfp8_desc, format),
            hipfp8_format::HIPFP8_FORMAT_E5M2FNUZ as u32,
        );
        let st = o.invoke(ctx.0);
        o.expect_fail(
            "FNUZ for MX",
            st,
            HIPFP8_STATUS_UNSUPPORTED_FORMAT,
            &["e5m2fnuz"],
        );
        let mut o = op.clone();
        let st = o.invoke(fnuz.0);
        o.expect_fail(
            "AUTO = FNUZ for MX",
            st,
            HIPFP8_STATUS_UNSUPPORTED_FORMAT,
            &["e4m3fnuz"],
        );
    }
}

#[test]
fn wrong_location_on_gpu() {
    // Host memory handed to a GPU context is refused before any kernel could fault on it.
    let Some(_gpu) = hipfp8::device::gpu_for_tests("wrong_location_on_gpu") else {
        return;
    };
    let mut c = null_mut();
    let st = hipfp8_context_create(hipfp8_backend::HIPFP8_BACKEND_GPU as u32, 0, &mut c);
    assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());
    let ctx = Ctx(c);
    for mut op in all_ops() {
        let first = op.bufs[0].name;
        let st = op.invoke(ctx.0);
        op.expect_fail(
            "host memory on a GPU context",
            st,
            HIPFP8_STATUS_WRONG_LOCATION,
            &[&format!("`{first}`")],
        );
    }
}

// ---- context functions ----------------------------------------------------------------------

#[test]
fn context_functions_null_and_small_outputs() {
    assert_eq!(
        hipfp8_context_create(1, 0, null_mut()),
        HIPFP8_STATUS_NULL_POINTER
    );
    assert!(last_error().contains("`out`"));
    let ctx = Ctx::cpu();
    assert_eq!(
        hipfp8_context_backend(ctx.0, null_mut()),
        HIPFP8_STATUS_NULL_POINTER
    );
    assert_eq!(
        hipfp8_context_native_format(ctx.0, null_mut()),
        HIPFP8_STATUS_NULL_POINTER
    );
    assert_eq!(
        hipfp8_context_device_name(ctx.0, null_mut(), 0, null_mut()),
        HIPFP8_STATUS_NULL_POINTER
    );

    let mut len = 0usize;
    assert_eq!(
        hipfp8_context_arch(ctx.0, null_mut(), 0, &mut len),
        HIPFP8_STATUS_SUCCESS
    );
    assert_eq!(len, 3); // "cpu"
    let mut buf = [POISON as std::ffi::c_char; 8];
    let mut len2 = 99usize;
    assert_eq!(
        hipfp8_context_arch(ctx.0, buf.as_mut_ptr(), 3, &mut len2),
        HIPFP8_STATUS_OUTPUT_TOO_SMALL
    );
    assert!(last_error().contains("needs 4"));
    assert!(
        buf.iter().all(|&c| c as u8 == POISON) && len2 == 99,
        "written on failure"
    );
    assert_eq!(
        hipfp8_context_arch(ctx.0, buf.as_mut_ptr(), 4, &mut len2),
        HIPFP8_STATUS_SUCCESS
    );
    // SAFETY: the call wrote a NUL-terminated string into buf.
    assert_eq!(
        unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap(),
        "cpu"
    );

    // Misaligned out-parameter.
    let mut words = [0u32; 2];
    let bad = (words.as_mut_ptr() as usize + 1) as *mut hipfp8_format;
    assert_eq!(
        hipfp8_context_native_format(ctx.0, bad),
        HIPFP8_STATUS_MISALIGNED
    );
    assert_eq!(words, [0, 0]);
}

#[test]
fn gpu_unavailable_is_a_status() {
    // No such device on any machine: a specific status, nothing written.
    let mut c = null_mut();
    assert_eq!(
        hipfp8_context_create(hipfp8_backend::HIPFP8_BACKEND_GPU as u32, -1, &mut c),
        HIPFP8_STATUS_BACKEND_UNAVAILABLE
    );
    assert!(c.is_null());
    assert!(last_error().starts_with("hipfp8_context_create: backend unavailable"));
}
