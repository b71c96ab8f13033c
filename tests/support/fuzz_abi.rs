//! The fuzz targets of the C ABI (CPU backend), as plain functions of the input bytes so that
//! the same code runs under cargo-fuzz (fuzz/fuzz_targets/*.rs, nightly) and as a stable
//! replay of the committed corpus plus random inputs (tests/fuzz_replay.rs, in CI).
//!
//! `ops`: one exported op (from the bad-input matrix's table, tests/support/ffi_ops.rs) with
//! its dimensions, enum fields, flags, descriptor size, offsets, NULLs, misalignment and
//! aliasing taken from the input. Every buffer lives in its own guarded mapping: PROT_NONE
//! pages right after its last declared element and before its first, so a read or write past
//! a declared capacity is a crash. The write-set model: the library is first asked how many
//! elements each buffer needs (a call with that buffer's count 0 answers
//! `*_TOO_SMALL: needs N elements`), then called with exactly that plus a little slack (not
//! the offsets, whose count is the group count):
//! - every status is a known one and the last-error message names the function (or is ""
//!   after success);
//! - inputs are never modified;
//! - on failure no output byte changes;
//! - on success no output byte past its needed count (the slack) changes.
//!
//! `handles`: a sequence of context creations, destructions and queries on live, destroyed,
//! small-integer and arbitrary handle values, against a model of the live set.
#![allow(dead_code)]

use std::ffi::{CStr, c_void};
use std::ptr::null_mut;

use hipfp8::ffi::*;

use super::ffi_ops::{Op, POISON, all_ops};
use hipfp8_status::*;

// ---- input bytes ---------------------------------------------------------------------------

/// A cursor over the fuzz input; reads past the end give zeros (so every input is valid).
pub struct Bytes<'a> {
    d: &'a [u8],
    i: usize,
}

impl<'a> Bytes<'a> {
    pub fn new(d: &'a [u8]) -> Self {
        Bytes { d, i: 0 }
    }
    pub fn u8(&mut self) -> u8 {
        let v = self.d.get(self.i).copied().unwrap_or(0);
        self.i += 1;
        v
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    pub fn u64(&mut self) -> u64 {
        self.u32() as u64 | (self.u32() as u64) << 32
    }
    pub fn left(&self) -> bool {
        self.i < self.d.len()
    }
}

// ---- guarded buffers -----------------------------------------------------------------------

#[cfg(target_os = "linux")]
mod sys {
    use std::ffi::c_void;
    unsafe extern "C" {
        pub fn mmap(
            a: *mut c_void,
            len: usize,
            prot: i32,
            flags: i32,
            fd: i32,
            off: i64,
        ) -> *mut c_void;
        pub fn munmap(a: *mut c_void, len: usize) -> i32;
        pub fn mprotect(a: *mut c_void, len: usize, prot: i32) -> i32;
    }
    pub const PROT_NONE: i32 = 0;
    pub const PROT_RW: i32 = 3;
    pub const MAP_PRIVATE_ANON: i32 = 0x02 | 0x20;
}

const PAGE: usize = 4096;

/// `bytes` bytes whose end touches a PROT_NONE page (and a PROT_NONE page before the first
/// accessible page): any access outside [ptr, ptr + bytes) rounded to the page faults after
/// the end, and before the start within a page of it.
pub struct Guarded {
    map: *mut u8,
    map_len: usize,
    pub ptr: *mut u8,
    pub bytes: usize,
}

impl Guarded {
    /// `skew` bytes of slack between the data and the guard page (to misalign the pointer).
    pub fn new(bytes: usize, skew: usize, fill: &[u8]) -> Guarded {
        let body = (bytes + skew).div_ceil(PAGE).max(1) * PAGE;
        let map_len = body + 2 * PAGE;
        // SAFETY: an anonymous private mapping; the result is checked.
        let map = unsafe {
            sys::mmap(
                null_mut(),
                map_len,
                sys::PROT_RW,
                sys::MAP_PRIVATE_ANON,
                -1,
                0,
            )
        };
        assert!(map as isize != -1, "mmap failed");
        let map = map.cast::<u8>();
        // SAFETY: both guard pages lie inside the mapping.
        unsafe {
            assert_eq!(sys::mprotect(map.cast::<c_void>(), PAGE, sys::PROT_NONE), 0);
            assert_eq!(
                sys::mprotect(map.add(PAGE + body).cast::<c_void>(), PAGE, sys::PROT_NONE),
                0
            );
        }
        // SAFETY: PAGE + body - bytes - skew >= PAGE: inside the accessible body.
        let ptr = unsafe { map.add(PAGE + body - bytes - skew) };
        for i in 0..bytes {
            // SAFETY: i < bytes, inside the body.
            unsafe {
                ptr.add(i).write(if fill.is_empty() {
                    0
                } else {
                    fill[i % fill.len()]
                })
            };
        }
        Guarded {
            map,
            map_len,
            ptr,
            bytes,
        }
    }
    pub fn contents(&self) -> Vec<u8> {
        // SAFETY: `bytes` accessible bytes from ptr.
        unsafe { std::slice::from_raw_parts(self.ptr, self.bytes) }.to_vec()
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new.
        unsafe { sys::munmap(self.map.cast::<c_void>(), self.map_len) };
    }
}

// ---- the ops target ------------------------------------------------------------------------

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated, valid until the next call on this thread.
    unsafe { CStr::from_ptr(hipfp8_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

fn known(st: hipfp8_status) -> bool {
    (st as u32 as usize) < hipfp8_status::ALL.len()
}

/// "... too small: needs N elements, got 0" -> N.
fn needed_from(msg: &str) -> Option<usize> {
    let i = msg.find("needs ")? + "needs ".len();
    msg[i..].split(' ').next()?.parse().ok()
}

/// The CPU context the targets share (one per process, never destroyed).
fn cpu_ctx() -> *mut hipfp8_context {
    static CTX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let h = *CTX.get_or_init(|| {
        let mut c = null_mut();
        assert_eq!(hipfp8_context_create(1, 0, &mut c), HIPFP8_STATUS_SUCCESS);
        c.addr()
    });
    std::ptr::without_provenance_mut(h)
}

/// A dimension from one byte: mostly small, sometimes 0, rarely huge (overflow paths).
fn dim(b: u8, orig: usize) -> usize {
    match b {
        0..=9 => 0,
        10..=19 => orig,
        20..=23 => usize::MAX / 3,
        24..=25 => 1 << 33,
        _ => (b as usize - 26) % 16 + 1,
    }
}

/// Call `op` with `lens` as counts and buffers from `bufs` (pointers `ptrs`).
fn call(op: &Op, desc: &[u64], ptrs: &[*mut u8], lens: &[usize]) -> hipfp8_status {
    (op.call)(cpu_ctx(), desc.as_ptr().cast::<c_void>(), ptrs, lens)
}

/// Real calls made by [`ops`] and how many succeeded (for the replay's summary).
pub static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
pub static SUCCESSES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One fuzz input for the ops target (see the module docs). Panics on a broken contract.
pub fn ops(data: &[u8]) {
    let mut b = Bytes::new(data);
    let mut table = all_ops();
    let idx = b.u8() as usize % table.len();
    let mut op = table.swap_remove(idx);
    // descriptor: dimensions, enums, flags, size
    for &off in &op.product.clone() {
        // SAFETY (of the read): `off` is a usize field of the descriptor (ffi_ops).
        let orig = unsafe {
            op.desc
                .as_ptr()
                .cast::<u8>()
                .add(off)
                .cast::<usize>()
                .read()
        };
        op.set_desc_usize(off, dim(b.u8(), orig));
    }
    for (name, off) in op.enum_fields.clone() {
        let v = b.u8();
        // A dtype changes the element size behind a count, which the guarded buffers are
        // sized for: only the table's value or an invalid one.
        if v >= 200 {
            op.set_desc_u32(off, b.u32() | if name == "dtype" { 2 } else { 0 });
        } else if v >= 100 && name != "dtype" {
            op.set_desc_u32(off, v as u32 % 7);
        }
    }
    if let Some(off) = op.flags_field {
        let v = b.u8();
        op.set_desc_u32(off, if v >= 240 { b.u32() } else { (v & 1) as u32 });
    }
    if b.u8() == 255 {
        op.set_desc_usize(0, b.u8() as usize);
    }
    // offsets: the table's valid ones, or values from the input
    let n = op.bufs.len();
    let mut fills: Vec<Vec<u8>> = op.bufs.iter().map(|x| x.bytes().to_vec()).collect();
    if let Some((name, _)) = op.offs {
        let i = op.bufs.iter().position(|x| x.name == name).unwrap();
        let g = match b.u8() {
            0..=199 => op.bufs[i].len,
            v => (v as usize - 200) % 9,
        };
        if b.u8() >= 128 || g != op.bufs[i].len {
            let mut vals: Vec<i32> = (0..g).map(|_| (b.u8() as i8) as i32 / 2 + 20).collect();
            if b.u8() < 200 {
                vals.sort_unstable();
            }
            fills[i] = vals.iter().flat_map(|v| v.to_ne_bytes()).collect();
        } else {
            fills[i] = op.bufs[i].bytes()[..g * 4].to_vec();
        }
        op.bufs[i].len = g;
    }
    for (i, f) in fills.iter_mut().enumerate() {
        if !op.bufs[i].output && i < n && Some(op.bufs[i].name) != op.offs.map(|o| o.0) {
            // inputs: bytes from the input repeated (NaN, Inf, anything)
            let seed = b.u8();
            for (j, x) in f.iter_mut().enumerate() {
                *x = (j as u8).wrapping_mul(31).wrapping_add(seed)
                    ^ data.get(j % data.len().max(1)).copied().unwrap_or(0);
            }
        }
    }
    // per buffer: NULL, misaligned, slack, aliased onto another buffer
    let flags: Vec<u8> = (0..n).map(|_| b.u8()).collect();
    let big = 1 << 13;
    // 1. learn each buffer's needed count: that buffer with count 0, the others big
    let mut needed = vec![0usize; n];
    let mut valid = true;
    {
        let probe: Vec<Guarded> = (0..n)
            .map(|i| {
                let e = op.bufs[i].elem;
                Guarded::new(
                    big * e,
                    0,
                    if op.bufs[i].output {
                        &[POISON]
                    } else {
                        &fills[i]
                    },
                )
            })
            .collect();
        for i in 0..n {
            let mut lens: Vec<usize> = (0..n).map(|_| big).collect();
            if Some(op.bufs[i].name) == op.offs.map(|o| o.0) {
                needed[i] = op.bufs[i].len;
                continue;
            }
            lens[i] = 0;
            for (j, l) in lens.iter_mut().enumerate() {
                if Some(op.bufs[j].name) == op.offs.map(|o| o.0) {
                    *l = op.bufs[j].len;
                }
            }
            let ptrs: Vec<*mut u8> = probe.iter().map(|g| g.ptr).collect();
            let st = call(&op, &op.desc, &ptrs, &lens);
            assert!(known(st), "{}: unknown status {}", op.name, st as u32);
            let msg = last_error();
            match st {
                HIPFP8_STATUS_SUCCESS => needed[i] = 0,
                HIPFP8_STATUS_OUTPUT_TOO_SMALL | HIPFP8_STATUS_INPUT_TOO_SMALL
                    if msg.contains(&format!("`{}`", op.bufs[i].name)) =>
                {
                    needed[i] = needed_from(&msg).unwrap_or_else(|| panic!("{msg}"));
                    if needed[i] > big {
                        valid = false;
                    }
                }
                _ => {
                    valid = false;
                    needed[i] = op.bufs[i].len;
                }
            }
        }
    }
    // 2. the real call: each buffer exactly `needed + slack`, against its guard page
    let mut lens = vec![0usize; n];
    let mut slack = vec![0usize; n];
    let mut gs = Vec::with_capacity(n);
    for i in 0..n {
        let f = flags[i];
        // Slack is spare capacity, except for the offsets: their count is the group count
        // (part of the problem the counts above were learnt for), so they get none.
        slack[i] = if Some(op.bufs[i].name) == op.offs.map(|o| o.0) {
            0
        } else if valid {
            (f as usize >> 4) % 3
        } else {
            (f as usize >> 4) % 5
        };
        lens[i] = needed[i].min(big) + slack[i];
        let e = op.bufs[i].elem;
        let skew = if f & 3 == 1 && e > 1 { 1 } else { 0 };
        let fill: &[u8] = if op.bufs[i].output {
            &[POISON]
        } else {
            &fills[i]
        };
        gs.push(Guarded::new(lens[i] * e, skew, fill));
    }
    let before: Vec<Vec<u8>> = gs.iter().map(|g| g.contents()).collect();
    let mut ptrs: Vec<*mut u8> = gs.iter().map(|g| g.ptr).collect();
    for i in 0..n {
        match flags[i] & 3 {
            2 if flags[i] & 4 != 0 => ptrs[i] = null_mut(),
            3 if flags[i] & 8 != 0 && n > 1 => {
                // alias onto another buffer, only if it is at least as long (so a library
                // that missed the overlap would still stay inside mapped memory)
                let j = (i + 1 + (flags[i] as usize >> 6)) % n;
                if j != i && lens[j] * op.bufs[j].elem >= lens[i] * op.bufs[i].elem {
                    ptrs[i] = ptrs[j];
                }
            }
            _ => {}
        }
    }
    let st = call(&op, &op.desc, &ptrs, &lens);
    let msg = last_error();
    assert!(known(st), "{}: unknown status {}", op.name, st as u32);
    CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if st == HIPFP8_STATUS_SUCCESS {
        SUCCESSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    let aliased = (0..n).any(|i| {
        (0..n).any(|j| {
            i != j
                && ptrs[i] == ptrs[j]
                && !ptrs[i].is_null()
                && lens[i] > 0
                && lens[j] > 0
                && (op.bufs[i].output || op.bufs[j].output)
        })
    });
    if aliased {
        assert_ne!(
            st, HIPFP8_STATUS_SUCCESS,
            "{}: aliased output accepted",
            op.name
        );
    }
    if st == HIPFP8_STATUS_SUCCESS {
        assert_eq!(msg, "", "{}: message after success", op.name);
    } else {
        assert!(msg.starts_with(op.name), "{}: {st:?}: `{msg}`", op.name);
    }
    for i in 0..n {
        let now = gs[i].contents();
        if !op.bufs[i].output || st != HIPFP8_STATUS_SUCCESS {
            // aliased buffers share bytes: only judge buffers nobody aliased
            if !aliased {
                assert!(
                    now == before[i],
                    "{}: `{}` changed ({st:?}, {msg})",
                    op.name,
                    op.bufs[i].name
                );
            }
        } else {
            let e = op.bufs[i].elem;
            let from = needed[i].min(lens[i]) * e;
            assert!(
                now[from..] == before[i][from..],
                "{}: `{}` written past its {} needed elements",
                op.name,
                op.bufs[i].name,
                needed[i]
            );
        }
    }
}

// ---- the handles target --------------------------------------------------------------------

/// One fuzz input for the handles target: up to 64 steps against a model of the live set.
pub fn handles(data: &[u8]) {
    let mut b = Bytes::new(data);
    let mut live: Vec<*mut hipfp8_context> = Vec::new();
    let mut dead: Vec<*mut hipfp8_context> = Vec::new();
    let mut steps = 0;
    while b.left() && steps < 64 {
        steps += 1;
        let pick = |b: &mut Bytes, live: &[*mut hipfp8_context], dead: &[*mut hipfp8_context]| {
            match b.u8() % 6 {
                0 | 1 if !live.is_empty() => (live[b.u8() as usize % live.len()], true),
                2 if !dead.is_empty() => (dead[b.u8() as usize % dead.len()], false),
                3 => (std::ptr::without_provenance_mut(b.u8() as usize), false),
                4 if !live.is_empty() => {
                    let h = live[b.u8() as usize % live.len()].addr();
                    let v = match b.u8() % 3 {
                        0 => h.wrapping_add(1 + b.u8() as usize),
                        1 => h.wrapping_sub(1 + b.u8() as usize),
                        _ => h ^ (1 << (b.u8() % 64)),
                    };
                    (std::ptr::without_provenance_mut(v), false)
                }
                _ => (std::ptr::without_provenance_mut(b.u64() as usize), false),
            }
        };
        match b.u8() % 4 {
            0 => {
                let mut c = null_mut();
                let st = if b.u8() & 1 == 0 {
                    hipfp8_context_create(1, b.u32() as i32, &mut c)
                } else {
                    hipfp8_context_create_cpu(b.u8() as u32 % 8, &mut c)
                };
                if st == HIPFP8_STATUS_SUCCESS {
                    assert!(!live.contains(&c) && !dead.contains(&c), "handle reused");
                    live.push(c);
                } else {
                    assert_eq!(st, HIPFP8_STATUS_INVALID_ENUM);
                    assert!(c.is_null(), "out written on failure");
                }
            }
            1 => {
                let (h, is_live) = pick(&mut b, &live, &dead);
                let is_live = is_live || live.contains(&h);
                let st = hipfp8_context_destroy(h);
                if is_live {
                    assert_eq!(st, HIPFP8_STATUS_SUCCESS);
                    live.retain(|&x| x != h);
                    dead.push(h);
                } else if h.is_null() {
                    assert_eq!(st, HIPFP8_STATUS_SUCCESS);
                } else {
                    assert_eq!(st, HIPFP8_STATUS_INVALID_HANDLE, "{h:p}");
                }
            }
            _ => {
                let (h, is_live) = pick(&mut b, &live, &dead);
                let is_live = is_live || live.contains(&h);
                let mut out = hipfp8_backend::HIPFP8_BACKEND_GPU;
                let st = hipfp8_context_backend(h, &mut out);
                if is_live {
                    assert_eq!(st, HIPFP8_STATUS_SUCCESS);
                    assert_eq!(out, hipfp8_backend::HIPFP8_BACKEND_CPU);
                } else {
                    assert_eq!(st, HIPFP8_STATUS_INVALID_HANDLE, "{h:p}");
                    assert_eq!(
                        out,
                        hipfp8_backend::HIPFP8_BACKEND_GPU,
                        "written on failure"
                    );
                }
            }
        }
    }
    for h in live {
        assert_eq!(hipfp8_context_destroy(h), HIPFP8_STATUS_SUCCESS);
    }
}
