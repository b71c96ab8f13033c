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
        let fill = if output { u64::from_ne_bytes([POISON; 8]) } else { 0 };
        Buf { name, elem, len, output, store: vec![fill; words], null: false, misalign: false }
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
        unsafe { self.store.as_mut_ptr().cast::<u8>().add(self.misalign as usize) }
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: viewing the Vec<u64> store as bytes.
        unsafe { std::slice::from_raw_parts(self.store.as_ptr().cast::<u8>(), self.store.len() * 8) }
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
    bufs: Vec<Buf>,
    call: CallFn,
}

impl Op {
    fn new<D: Copy>(name: &'static str, desc: D, bufs: Vec<Buf>, call: CallFn) -> Op {
        let mut store = vec![0u64; size_of::<D>().div_ceil(8)];
        // SAFETY: the store is 8-aligned and at least size_of::<D>() bytes.
        unsafe { store.as_mut_ptr().cast::<D>().write(desc) };
        Op { name, desc: store, desc_size: size_of::<D>(), enum_fields: vec![], flags_field: None, bufs, call }
    }
    fn enums(mut self, fields: &[(&'static str, usize)]) -> Op {
        self.enum_fields = fields.to_vec();
        self
    }
    fn flags(mut self, off: usize) -> Op {
        self.flags_field = Some(off);
        self
    }
    fn set_desc_u32(&mut self, off: usize, v: u32) {
        // SAFETY: `off` comes from offset_of! on this descriptor type (a u32 field).
        unsafe { self.desc.as_mut_ptr().cast::<u8>().add(off).cast::<u32>().write(v) }
    }
    fn set_desc_usize(&mut self, off: usize, v: usize) {
        // SAFETY: `off` comes from offset_of! on this descriptor type (a usize field).
        unsafe { self.desc.as_mut_ptr().cast::<u8>().add(off).cast::<usize>().write(v) }
    }
    fn buf(&mut self, name: &str) -> &mut Buf {
        self.bufs.iter_mut().find(|b| b.name == name).unwrap_or_else(|| panic!("no buffer {name}"))
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
        assert_eq!(got, want, "[{row}] {}: expected {want:?}, got {got:?} ({m})", self.name);
        assert!(
            m.starts_with(self.name),
            "[{row}] {}: last error should name the function: {m:?}",
            self.name
        );
        for f in msg {
            assert!(m.contains(f), "[{row}] {}: last error {m:?} should mention {f:?}", self.name);
        }
        for b in self.bufs.iter().filter(|b| b.output) {
            assert!(b.untouched(), "[{row}] {}: output `{}` was written on failure", self.name, b.name);
        }
    }
}

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated, valid until the next hipfp8 call on this thread.
    unsafe { CStr::from_ptr(hipfp8_last_error_message()) }.to_string_lossy().into_owned()
}

struct Ctx(*mut hipfp8_context);

impl Ctx {
    fn cpu() -> Ctx {
        let mut c = null_mut();
        assert_eq!(hipfp8_context_create(hipfp8_backend::HIPFP8_BACKEND_CPU as u32, 0, &mut c), HIPFP8_STATUS_SUCCESS);
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

fn cast_2d(m: usize, k: usize, dtype: u32) -> hipfp8_cast_2d_desc {
    hipfp8_cast_2d_desc { size: size_of::<hipfp8_cast_2d_desc>(), input_dtype: dtype, format: 0, flags: 0, m, k }
}

fn cast_2d_enums(op: Op) -> Op {
    op.enums(&[
        ("format", offset_of!(hipfp8_cast_2d_desc, format)),
        ("dtype", offset_of!(hipfp8_cast_2d_desc, input_dtype)),
    ])
    .flags(offset_of!(hipfp8_cast_2d_desc, flags))
}

/// Dimension fields of a descriptor, for the shape rows.
struct Dims {
    /// A dimension that is reduced over and so must be > 0.
    reduced: Option<usize>,
    /// Fields whose product sizes the buffers (set huge to overflow).
    product: Vec<usize>,
}

fn all_ops() -> Vec<(Op, Dims)> {
    let (m, k) = (3usize, 5usize);
    let mut ops = Vec::new();

    ops.push((
        cast_2d_enums(Op::new(
            "hipfp8_rowwise_2d",
            cast_2d(m, k, BF16),
            vec![Buf::input("x", 2, m * k), Buf::output("out", 1, m * k), Buf::output("scales", 4, m)],
            |c, d, ps, ls| {
                hipfp8_rowwise_2d(c, d.cast(), ps[0].cast(), ls[0], p(ps, 1), ls[1], p(ps, 2), ls[2], null_mut())
            },
        )),
        Dims { reduced: Some(offset_of!(hipfp8_cast_2d_desc, k)), product: vec![offset_of!(hipfp8_cast_2d_desc, m), offset_of!(hipfp8_cast_2d_desc, k)] },
    ));
    ops.push((
        cast_2d_enums(Op::new(
            "hipfp8_rowwise_2d",
            cast_2d(m, k, F32),
            vec![Buf::input("x", 4, m * k), Buf::output("out", 1, m * k), Buf::output("scales", 4, m)],
            |c, d, ps, ls| {
                hipfp8_rowwise_2d(c, d.cast(), ps[0].cast(), ls[0], p(ps, 1), ls[1], p(ps, 2), ls[2], null_mut())
            },
        )),
        Dims { reduced: Some(offset_of!(hipfp8_cast_2d_desc, k)), product: vec![offset_of!(hipfp8_cast_2d_desc, m), offset_of!(hipfp8_cast_2d_desc, k)] },
    ));
    ops
}

/// Grouped ops: (op, name of the offsets buffer, extent the offsets index).
fn grouped_ops() -> Vec<(Op, &'static str, usize)> {
    Vec::new()
}

// ---- sanity: every case is valid as built ---------------------------------------------------

#[test]
fn valid_calls_succeed_and_write() {
    let ctx = Ctx::cpu();
    for (mut op, _) in all_ops() {
        assert_eq!(op.invoke(ctx.0), HIPFP8_STATUS_SUCCESS, "{}: {}", op.name, last_error());
        assert_eq!(last_error(), "");
        for b in op.bufs.iter().filter(|b| b.output) {
            assert!(!b.untouched(), "{}: `{}` not written", op.name, b.name);
        }
    }
    for (mut op, _, _) in grouped_ops() {
        assert_eq!(op.invoke(ctx.0), HIPFP8_STATUS_SUCCESS, "{}: {}", op.name, last_error());
    }
}

// ---- the rows --------------------------------------------------------------------------------

#[test]
fn null_context() {
    for (mut op, _) in all_ops() {
        let st = op.invoke(null());
        op.expect_fail("null context", st, HIPFP8_STATUS_INVALID_HANDLE, &["NULL"]);
    }
}

#[test]
fn destroyed_context() {
    let mut c = null_mut();
    assert_eq!(hipfp8_context_create(1, 0, &mut c), HIPFP8_STATUS_SUCCESS);
    assert_eq!(hipfp8_context_destroy(c), HIPFP8_STATUS_SUCCESS);
    for (mut op, _) in all_ops() {
        let st = op.invoke(c);
        op.expect_fail("destroyed context", st, HIPFP8_STATUS_INVALID_HANDLE, &["not a live context"]);
    }
    // Destroying twice is detected too, and so is a pointer that never was a context.
    assert_eq!(hipfp8_context_destroy(c), HIPFP8_STATUS_INVALID_HANDLE);
    assert!(last_error().contains("not a live context"));
    let mut not_a_context = 0u64;
    let fake = (&raw mut not_a_context).cast::<hipfp8_context>();
    for (mut op, _) in all_ops() {
        let st = op.invoke(fake);
        op.expect_fail("made-up handle", st, HIPFP8_STATUS_INVALID_HANDLE, &["not a live context"]);
    }
    assert_eq!(not_a_context, 0);
    // The query functions check the handle the same way.
    let mut fmt = hipfp8_format::HIPFP8_FORMAT_E5M2;
    assert_eq!(hipfp8_context_native_format(c, &mut fmt), HIPFP8_STATUS_INVALID_HANDLE);
    assert_eq!(fmt, hipfp8_format::HIPFP8_FORMAT_E5M2);
}

#[test]
fn null_descriptor() {
    let ctx = Ctx::cpu();
    for (mut op, _) in all_ops() {
        let st = op.invoke_with(ctx.0, null());
        op.expect_fail("null descriptor", st, HIPFP8_STATUS_NULL_POINTER, &["`desc`"]);
    }
}

#[test]
fn null_pointer() {
    let ctx = Ctx::cpu();
    for (op, _) in all_ops() {
        for i in 0..op.bufs.len() {
            let mut o = op.clone();
            o.bufs[i].null = true;
            let name = o.bufs[i].name;
            let st = o.invoke(ctx.0);
            o.expect_fail("null pointer", st, HIPFP8_STATUS_NULL_POINTER, &[&format!("`{name}`")]);
        }
    }
}

#[test]
fn wrong_descriptor_size() {
    let ctx = Ctx::cpu();
    for (op, _) in all_ops() {
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
    for (op, _) in all_ops() {
        for &(field, off) in &op.enum_fields {
            for bad in [6u32, 0x8000_0000, u32::MAX] {
                let mut o = op.clone();
                o.set_desc_u32(off, bad);
                let st = o.invoke(ctx.0);
                o.expect_fail("unknown enum", st, HIPFP8_STATUS_INVALID_ENUM, &[field, &bad.to_string()]);
            }
        }
        if let Some(off) = op.flags_field {
            let mut o = op.clone();
            o.set_desc_u32(off, 0x10 | hipfp8_flag::HIPFP8_FLAG_POW2_SCALES as u32);
            let st = o.invoke(ctx.0);
            o.expect_fail("unknown flag bit", st, HIPFP8_STATUS_INVALID_ENUM, &["flags", "0x10"]);
        }
    }
    // Enum parameters of the context functions.
    let mut c = null_mut();
    assert_eq!(hipfp8_context_create(3, 0, &mut c), HIPFP8_STATUS_INVALID_ENUM);
    assert!(c.is_null(), "out-parameter written on failure");
    assert!(last_error().contains("backend = 3"));
    assert_eq!(hipfp8_context_create_cpu(77, &mut c), HIPFP8_STATUS_INVALID_ENUM);
    assert!(c.is_null());
    let mut f = hipfp8_format::HIPFP8_FORMAT_E5M2;
    assert_eq!(hipfp8_context_resolve_format(ctx.0, 6, &mut f), HIPFP8_STATUS_INVALID_ENUM);
    assert_eq!(f, hipfp8_format::HIPFP8_FORMAT_E5M2);
}

#[test]
fn zero_dims() {
    let ctx = Ctx::cpu();
    for (op, dims) in all_ops() {
        if let Some(off) = dims.reduced {
            let mut o = op.clone();
            o.set_desc_usize(off, 0);
            let st = o.invoke(ctx.0);
            o.expect_fail("zero reduced dim", st, HIPFP8_STATUS_INVALID_SHAPE, &["must be > 0"]);
        }
        // Every other dimension may be 0: then nothing is written and the call succeeds,
        // even with NULL buffers.
        for &off in dims.product.iter().filter(|&&off| Some(off) != dims.reduced) {
            let mut o = op.clone();
            o.set_desc_usize(off, 0);
            for b in o.bufs.iter_mut().filter(|b| b.output) {
                b.null = true;
            }
            assert_eq!(o.invoke(ctx.0), HIPFP8_STATUS_SUCCESS, "{}: {}", o.name, last_error());
        }
    }
}

#[test]
fn huge_dims_overflow() {
    let ctx = Ctx::cpu();
    for (op, dims) in all_ops() {
        let mut o = op.clone();
        for &off in &dims.product {
            o.set_desc_usize(off, usize::MAX / 2 + 1);
        }
        let st = o.invoke(ctx.0);
        o.expect_fail("huge dims", st, HIPFP8_STATUS_SIZE_OVERFLOW, &["overflows"]);
        // A buffer count whose byte size exceeds the address space is refused before any
        // slice is made from it.
        for i in 0..op.bufs.len() {
            let mut o = op.clone();
            if o.bufs[i].elem == 1 {
                // A byte count of isize::MAX still passes this check; the op then rejects it
                // as too large for the shape only if it is short, so skip bytes here.
                continue;
            }
            o.bufs[i].len = usize::MAX / 2;
            let name = o.bufs[i].name;
            let st = o.invoke(ctx.0);
            o.expect_fail("huge count", st, HIPFP8_STATUS_SIZE_OVERFLOW, &[&format!("`{name}`"), "address space"]);
        }
    }
}

#[test]
fn misaligned_pointers() {
    let ctx = Ctx::cpu();
    for (op, _) in all_ops() {
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
                &[&format!("`{name}`"), &format!("{}-byte aligned", o.bufs[i].elem)],
            );
        }
        // The descriptor itself must be aligned too.
        let mut o = op.clone();
        let mut shifted = vec![0u8; o.desc_size + 8];
        // SAFETY: copying the descriptor bytes into a larger byte buffer at offset 1.
        unsafe { std::ptr::copy_nonoverlapping(o.desc.as_ptr().cast::<u8>(), shifted.as_mut_ptr().add(1), o.desc_size) };
        // SAFETY: offset 1 is inside `shifted`.
        let d = unsafe { shifted.as_ptr().add(1) }.cast::<c_void>();
        let st = o.invoke_with(ctx.0, d);
        o.expect_fail("misaligned desc", st, HIPFP8_STATUS_MISALIGNED, &["`desc`"]);
    }
}

#[test]
fn buffers_smaller_than_needed() {
    let ctx = Ctx::cpu();
    for (op, _) in all_ops() {
        for i in 0..op.bufs.len() {
            let mut o = op.clone();
            o.bufs[i].len -= 1;
            let (name, needed, output) = (o.bufs[i].name, op.bufs[i].len, o.bufs[i].output);
            let want = if output { HIPFP8_STATUS_OUTPUT_TOO_SMALL } else { HIPFP8_STATUS_INPUT_TOO_SMALL };
            let st = o.invoke(ctx.0);
            o.expect_fail(
                "too small",
                st,
                want,
                &[&format!("`{name}`"), &format!("needs {needed}"), &format!("got {}", needed - 1)],
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
        op.expect_fail("non-monotonic offsets", st, HIPFP8_STATUS_INVALID_OFFSETS, &["non-decreasing", "offs[1] = 1"]);
    }
}

#[test]
fn offsets_past_extent() {
    let ctx = Ctx::cpu();
    for (mut op, offs, extent) in grouped_ops() {
        op.buf(offs).set_i32(&[1, 2, extent as i32 + 1]);
        let st = op.invoke(ctx.0);
        op.expect_fail("offsets past extent", st, HIPFP8_STATUS_INVALID_OFFSETS, &["past the extent", &format!("{}", extent + 1)]);
    }
}

#[test]
fn negative_offsets() {
    let ctx = Ctx::cpu();
    for (mut op, offs, extent) in grouped_ops() {
        op.buf(offs).set_i32(&[-1, 2, extent as i32]);
        let st = op.invoke(ctx.0);
        op.expect_fail("negative offsets", st, HIPFP8_STATUS_INVALID_OFFSETS, &["negative", "offs[0] = -1"]);
    }
}

// ---- context functions ----------------------------------------------------------------------

#[test]
fn context_functions_null_and_small_outputs() {
    assert_eq!(hipfp8_context_create(1, 0, null_mut()), HIPFP8_STATUS_NULL_POINTER);
    assert!(last_error().contains("`out`"));
    let ctx = Ctx::cpu();
    assert_eq!(hipfp8_context_backend(ctx.0, null_mut()), HIPFP8_STATUS_NULL_POINTER);
    assert_eq!(hipfp8_context_native_format(ctx.0, null_mut()), HIPFP8_STATUS_NULL_POINTER);
    assert_eq!(hipfp8_context_device_name(ctx.0, null_mut(), 0, null_mut()), HIPFP8_STATUS_NULL_POINTER);

    let mut len = 0usize;
    assert_eq!(hipfp8_context_arch(ctx.0, null_mut(), 0, &mut len), HIPFP8_STATUS_SUCCESS);
    assert_eq!(len, 3); // "cpu"
    let mut buf = [POISON as std::ffi::c_char; 8];
    let mut len2 = 99usize;
    assert_eq!(hipfp8_context_arch(ctx.0, buf.as_mut_ptr(), 3, &mut len2), HIPFP8_STATUS_OUTPUT_TOO_SMALL);
    assert!(last_error().contains("needs 4"));
    assert!(buf.iter().all(|&c| c as u8 == POISON) && len2 == 99, "written on failure");
    assert_eq!(hipfp8_context_arch(ctx.0, buf.as_mut_ptr(), 4, &mut len2), HIPFP8_STATUS_SUCCESS);
    // SAFETY: the call wrote a NUL-terminated string into buf.
    assert_eq!(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap(), "cpu");

    // Misaligned out-parameter.
    let mut words = [0u32; 2];
    let bad = (words.as_mut_ptr() as usize + 1) as *mut hipfp8_format;
    assert_eq!(hipfp8_context_native_format(ctx.0, bad), HIPFP8_STATUS_MISALIGNED);
    assert_eq!(words, [0, 0]);
}

#[test]
fn gpu_unavailable_is_a_status() {
    // No such device on any machine: a specific status, nothing written.
    let mut c = null_mut();
    assert_eq!(hipfp8_context_create(hipfp8_backend::HIPFP8_BACKEND_GPU as u32, -1, &mut c), HIPFP8_STATUS_BACKEND_UNAVAILABLE);
    assert!(c.is_null());
    assert!(last_error().starts_with("hipfp8_context_create: backend unavailable"));
}
