//! The host path of one C call (bench/NOTES.md, "Session 9: host path of one call"): what a
//! warm call of hipfp8_rowwise_2d, hipfp8_cast_transpose and hipfp8_grouped_gemm_2d3d costs
//! besides its kernel, counted so that a regression fails here.
//!
//! - Heap allocations (CPU backend, every build): a counting global allocator counts this
//!   thread's allocations during warm calls. The validation path (handle lookup, descriptor,
//!   views, sizes, overlap checks, the op's declaration, the status and last-error message)
//!   must allocate nothing; so must the CPU references of these tiny problems (they run on
//!   the calling thread).
//! - Runtime-shim calls (GPU backend; skipped with a printed reason elsewhere): the pointer
//!   check of all buffers in one shim call and one device activation per op call, nothing per
//!   buffer and no second check of the same pointers in the op body
//!   (`hipfp8::runtime::shim_calls_on_this_thread`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::{CStr, c_void};
use std::mem::size_of;
use std::ptr::null_mut;

use hipfp8::bf16;
use hipfp8::ffi::*;
use hipfp8_status::*;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a const-initialised thread-local
// without a destructor, which an allocator may touch.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.get()
}

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated, valid until the next hipfp8 call on this thread.
    unsafe { CStr::from_ptr(hipfp8_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

struct CCtx(*mut hipfp8_context);

impl CCtx {
    fn new(backend: hipfp8_backend) -> Option<CCtx> {
        let mut c = null_mut();
        let st = hipfp8_context_create(backend as u32, 0, &mut c);
        (st == HIPFP8_STATUS_SUCCESS).then_some(CCtx(c))
    }
}

impl Drop for CCtx {
    fn drop(&mut self) {
        hipfp8_context_destroy(self.0);
    }
}

const BF16: u32 = hipfp8_dtype::HIPFP8_DTYPE_BF16 as u32;
const E4M3: u32 = hipfp8_format::HIPFP8_FORMAT_E4M3FN as u32;
const POW2: u32 = hipfp8_flag::HIPFP8_FLAG_POW2_SCALES as u32;

/// The three calls of a small MoE-layer step, on buffers a caller allocated (host memory for
/// the CPU backend, device memory for a GPU one): `call(i)` runs call i (0 rowwise_2d, 1
/// cast_transpose, 2 grouped_gemm_2d3d) and returns its status.
struct Calls {
    ctx: *const hipfp8_context,
    p: [*mut c_void; 11],
    stream: hipStream_t,
}

const M: usize = 8;
const K: usize = 32;
const N: usize = 16;
const E: usize = 2;

/// Element counts of the buffers of [`Calls`]: x (bf16 m*k), q (m*k), s (m), qt (k*m),
/// st (1), st_t (1), b (e*k*n fp8), offs (e), sa (m), sb (e*n), out (m*n bf16).
const LENS: [usize; 11] = [M * K, M * K, M, K * M, 1, 1, E * K * N, E, M, E * N, M * N];
const SIZES: [usize; 11] = [2, 1, 4, 1, 4, 4, 1, 4, 4, 4, 2];

impl Calls {
    fn call(&self, i: usize) -> hipfp8_status {
        let p = &self.p;
        match i {
            0 => {
                let d = hipfp8_cast_2d_desc {
                    size: size_of::<hipfp8_cast_2d_desc>(),
                    input_dtype: BF16,
                    format: E4M3,
                    flags: POW2,
                    m: M,
                    k: K,
                };
                hipfp8_rowwise_2d(
                    self.ctx,
                    &d,
                    p[0],
                    LENS[0],
                    p[1].cast(),
                    LENS[1],
                    p[2].cast(),
                    LENS[2],
                    self.stream,
                )
            }
            1 => {
                let d = hipfp8_cast_transpose_desc {
                    size: size_of::<hipfp8_cast_transpose_desc>(),
                    input_dtype: BF16,
                    format: E4M3,
                    flags: 0,
                    scaling: hipfp8_scaling::HIPFP8_SCALING_TENSORWISE as u32,
                    m: M,
                    k: K,
                };
                hipfp8_cast_transpose(
                    self.ctx,
                    &d,
                    p[0],
                    LENS[0],
                    p[1].cast(),
                    LENS[1],
                    p[3].cast(),
                    LENS[3],
                    p[4].cast(),
                    LENS[4],
                    p[5].cast(),
                    LENS[5],
                    self.stream,
                )
            }
            _ => {
                let d = hipfp8_grouped_gemm_2d3d_desc {
                    size: size_of::<hipfp8_grouped_gemm_2d3d_desc>(),
                    a_format: E4M3,
                    b_format: E4M3,
                    backend: hipfp8_gemm_backend::HIPFP8_GEMM_BACKEND_AUTO as u32,
                    m: M,
                    k: K,
                    n: N,
                    e: E,
                };
                hipfp8_grouped_gemm_2d3d(
                    self.ctx,
                    &d,
                    p[1].cast(),
                    LENS[1],
                    p[6].cast(),
                    LENS[6],
                    p[7].cast(),
                    LENS[7],
                    p[8].cast(),
                    LENS[8],
                    p[9].cast(),
                    LENS[9],
                    p[10].cast(),
                    LENS[10],
                    null_mut(),
                    0,
                    self.stream,
                )
            }
        }
    }
}

/// The host buffers of [`Calls`] with valid contents (offsets [M/2, M], unit scales).
fn host_buffers() -> Vec<Vec<u8>> {
    let mut bufs: Vec<Vec<u8>> = LENS
        .iter()
        .zip(SIZES)
        .map(|(&n, s)| vec![0u8; n * s])
        .collect();
    for (i, v) in bufs[0].chunks_mut(2).enumerate() {
        v.copy_from_slice(&bf16::from_f32(i as f32 * 0.25 - 3.0).to_le_bytes());
    }
    for (i, b) in bufs[6].iter_mut().enumerate() {
        *b = (i % 0x70) as u8;
    }
    let offs = [(M / 2) as i32, M as i32];
    for (v, o) in bufs[7].chunks_mut(4).zip(offs) {
        v.copy_from_slice(&o.to_le_bytes());
    }
    for i in [8, 9] {
        for v in bufs[i].chunks_mut(4) {
            v.copy_from_slice(&1.0f32.to_le_bytes());
        }
    }
    bufs
}

/// The calls run on the worker of a one-thread rayon pool: the CPU references use rayon, and
/// a job injected from outside a pool goes through rayon's injector queue, which allocates a
/// block per 63 jobs (the CPU kernel's cost, not the host path's); on a worker the jobs stay
/// in its own queue.
#[test]
fn warm_cpu_calls_allocate_nothing() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    pool.install(warm_cpu_calls);
}

fn warm_cpu_calls() {
    let ctx = CCtx::new(hipfp8_backend::HIPFP8_BACKEND_CPU).expect("a CPU context");
    let mut bufs = host_buffers();
    let calls = Calls {
        ctx: ctx.0,
        p: std::array::from_fn(|i| bufs[i].as_mut_ptr().cast()),
        stream: null_mut(),
    };
    for (i, name) in ["rowwise_2d", "cast_transpose", "grouped_gemm_2d3d"]
        .iter()
        .enumerate()
    {
        // Warm: the first call may set up what lives for the process (rayon's pool, the
        // thread's caches).
        for _ in 0..3 {
            assert_eq!(
                calls.call(i),
                HIPFP8_STATUS_SUCCESS,
                "{name}: {}",
                last_error()
            );
        }
        let before = allocs();
        for _ in 0..100 {
            calls.call(i);
        }
        let n = allocs() - before;
        // The CPU grouped GEMM allocates its decoding scratch (two buffers per call): the
        // C call may allocate exactly what its reference allocates when called directly.
        let reference = if i == 2 {
            reference_gemm_allocs(&bufs)
        } else {
            0
        };
        assert_eq!(
            n,
            100 * reference,
            "{n} heap allocations in 100 warm {name} calls (its CPU reference: {reference} \
             per call)"
        );
    }
}

/// Heap allocations of one direct call of the CPU reference of grouped_gemm_2d3d on the
/// buffers of [`Calls`].
fn reference_gemm_allocs(bufs: &[Vec<u8>]) -> u64 {
    use hipfp8::Fp8Format::E4M3Fn;
    let f32s = |b: &[u8]| -> Vec<f32> {
        b.chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let offs: Vec<i32> = bufs[7]
        .chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let (sa, sb) = (f32s(&bufs[8]), f32s(&bufs[9]));
    let mut out = vec![bf16::ZERO; M * N];
    let before = allocs();
    hipfp8::reference::grouped_gemm::grouped_gemm_2d3d(
        (E4M3Fn, E4M3Fn),
        K,
        N,
        (&bufs[1], &bufs[6], &offs, &sa, &sb, &mut out),
    )
    .unwrap();
    allocs() - before
}

/// The counter is real: a failing call builds its message (and allocates), so the zero
/// above is not a counter that never moves.
#[test]
fn failing_calls_are_counted() {
    let ctx = CCtx::new(hipfp8_backend::HIPFP8_BACKEND_CPU).expect("a CPU context");
    let mut bufs = host_buffers();
    let mut calls = Calls {
        ctx: ctx.0,
        p: std::array::from_fn(|i| bufs[i].as_mut_ptr().cast()),
        stream: null_mut(),
    };
    calls.p[2] = null_mut(); // rowwise_2d's scales: NULL with a non-zero count
    let before = allocs();
    assert_eq!(calls.call(0), HIPFP8_STATUS_NULL_POINTER);
    assert!(allocs() > before, "the error message was not counted");
    assert!(last_error().contains("scales"), "{}", last_error());
}

/// A destroyed handle is refused even right after this thread used it (the lookup's
/// thread-local cache), and a live one after another context was destroyed still works.
#[test]
fn cached_lookup_follows_destruction() {
    let a = CCtx::new(hipfp8_backend::HIPFP8_BACKEND_CPU).expect("a CPU context");
    let b = CCtx::new(hipfp8_backend::HIPFP8_BACKEND_CPU).expect("a CPU context");
    let mut bufs = host_buffers();
    let mut calls = Calls {
        ctx: a.0,
        p: std::array::from_fn(|i| bufs[i].as_mut_ptr().cast()),
        stream: null_mut(),
    };
    assert_eq!(calls.call(0), HIPFP8_STATUS_SUCCESS);
    assert_eq!(calls.call(0), HIPFP8_STATUS_SUCCESS);
    calls.ctx = b.0;
    assert_eq!(calls.call(0), HIPFP8_STATUS_SUCCESS);
    drop(a);
    assert_eq!(calls.call(0), HIPFP8_STATUS_SUCCESS, "{}", last_error());
    let h = b.0;
    drop(b);
    calls.ctx = h;
    assert_eq!(calls.call(0), HIPFP8_STATUS_INVALID_HANDLE);
    assert_eq!(calls.call(1), HIPFP8_STATUS_INVALID_HANDLE);
}

/// On a GPU: one pointer-check shim call and one activation per op call (the current device
/// is the context's), whatever the number of buffers; and a host pointer is still refused
/// with WRONG_LOCATION naming it.
#[test]
fn gpu_calls_make_two_shim_calls() {
    use hipfp8::device::{DeviceBuffer, Stream, gpu_for_tests};
    use hipfp8::runtime::shim_calls_on_this_thread;
    let Some(rust) = gpu_for_tests("gpu_calls_make_two_shim_calls") else {
        return;
    };
    let ctx = CCtx::new(hipfp8_backend::HIPFP8_BACKEND_GPU).expect("a GPU context");
    let host = host_buffers();
    let mut dev: Vec<DeviceBuffer<u8>> = host
        .iter()
        .map(|h| DeviceBuffer::from_host(&rust, h).unwrap())
        .collect();
    let stream = Stream::new(&rust).unwrap();
    let calls = Calls {
        ctx: ctx.0,
        p: std::array::from_fn(|i| dev[i].as_mut_ptr().cast()),
        stream: stream.raw().cast(),
    };
    // A test thread starts with GPU 0 current (the context's): the activation sets nothing
    // and restores nothing.
    for (i, name) in ["rowwise_2d", "cast_transpose", "grouped_gemm_2d3d"]
        .iter()
        .enumerate()
    {
        for _ in 0..2 {
            assert_eq!(
                calls.call(i),
                HIPFP8_STATUS_SUCCESS,
                "{name}: {}",
                last_error()
            );
        }
        let before = shim_calls_on_this_thread();
        assert_eq!(
            calls.call(i),
            HIPFP8_STATUS_SUCCESS,
            "{name}: {}",
            last_error()
        );
        let n = shim_calls_on_this_thread() - before;
        assert_eq!(
            n, 2,
            "{name}: {n} runtime-shim calls (want: 1 pointer check, 1 activation)"
        );
    }
    stream.synchronize().unwrap();
    // A host buffer in the middle of the list is found by the one batched check.
    let mut host_scales = vec![0f32; M];
    let mut bad = Calls {
        p: calls.p,
        ..calls
    };
    bad.p[2] = host_scales.as_mut_ptr().cast();
    assert_eq!(bad.call(0), HIPFP8_STATUS_WRONG_LOCATION);
    assert!(
        last_error().contains("`scales` is not device memory"),
        "{}",
        last_error()
    );
}
