//! `hipfp8_context`: creation, destruction, queries, and the handle registry.
//!
//! A handle is a key into a process-wide registry, not the address of the context: the
//! sequential id of the context mixed with a per-process random key ([`handle_of`]). Ids are
//! never reused, so using a destroyed handle is detected; a made-up pointer (a small integer,
//! a neighbour or a bit flip of a live handle, garbage) names a live context only with
//! probability about (live contexts) / 2^64. Either is answered with
//! `HIPFP8_STATUS_INVALID_HANDLE` instead of being dereferenced. Calls clone the context's `Arc` out of the registry, so
//! destroying a context while another thread runs an op on it is safe (the op finishes on
//! its own reference).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::c_char;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::args::{self, format_choice};
use super::status::{FfiError, guard, hipfp8_status};
use super::types::{hipfp8_backend, hipfp8_format};
use crate::context::{BackendKind, Context};
use crate::error::Error;
use crate::format::Fp8Format;

/// Opaque library context: backend (CPU or GPU n), device properties, native FP8 format,
/// workspace. Create with `hipfp8_context_create`, release with `hipfp8_context_destroy`.
/// A context may be used from several threads at once.
pub struct hipfp8_context {
    _opaque: [u8; 0],
}

struct Registry {
    next_id: u64,
    /// Live contexts by handle value (see [`handle_of`]).
    live: BTreeMap<usize, Arc<Context>>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    next_id: 1,
    live: BTreeMap::new(),
});

fn registry() -> MutexGuard<'static, Registry> {
    // Nothing panics while the lock is held, but a poisoned registry is still consistent:
    // every mutation is a single map operation.
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// The per-process secret mixed into every handle: random (std's hash keys, which the OS
/// seeds per process) so a handle value cannot be guessed from the order of creation.
fn handle_key() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static KEY: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *KEY.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(std::process::id() as u64);
        h.finish() | 1
    })
}

/// The handle of context number `id`: a keyed bijection of the 64-bit id (an xor with the
/// key, then the splitmix64 finaliser, every step invertible), so distinct ids give distinct
/// handles and a handle says nothing about its neighbours: a small integer, a neighbouring
/// value or a bit flip of a live handle is, with overwhelming probability, no live handle.
/// Values below 2^16 are never handed out (see `register`), so small integers are always
/// rejected.
fn handle_of(id: u64) -> u64 {
    let mut z = id ^ handle_key();
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn register(ctx: Context) -> *mut hipfp8_context {
    let mut r = registry();
    let h = loop {
        let id = r.next_id;
        r.next_id += 1;
        // On a 64-bit target the cast is lossless and the bijection never collides; the
        // checks keep a 32-bit target (truncated handles) correct too.
        let h = handle_of(id) as usize;
        if h >= 1 << 16 && !r.live.contains_key(&h) {
            break h;
        }
    };
    r.live.insert(h, Arc::new(ctx));
    // The handle is the keyed id dressed as a pointer: C code only stores and passes it back.
    std::ptr::without_provenance_mut(h)
}

/// The context behind a handle, or INVALID_HANDLE. Lock-free on a thread's repeated use of
/// one context ([`LAST_LOOKUP`]); else one lock of the registry.
pub(crate) fn lookup(ctx: *const hipfp8_context) -> Result<Arc<Context>, FfiError> {
    if ctx.is_null() {
        return Err(FfiError::InvalidHandle("the context is NULL".into()));
    }
    let h = ctx.addr();
    let generation = DESTROYED.load(Ordering::Acquire);
    // try_with: during thread teardown the cache may be gone; the registry still answers.
    let cached = LAST_LOOKUP
        .try_with(|last| match &*last.borrow() {
            Some((lh, lg, weak)) if *lh == h && *lg == generation => weak.upgrade(),
            _ => None,
        })
        .ok()
        .flatten();
    if let Some(c) = cached {
        return Ok(c);
    }
    let found = registry().live.get(&h).cloned();
    match found {
        Some(c) => {
            let _ = LAST_LOOKUP
                .try_with(|last| *last.borrow_mut() = Some((h, generation, Arc::downgrade(&c))));
            Ok(c)
        }
        None => Err(FfiError::InvalidHandle(format!(
            "{ctx:p} is not a live context (destroyed, or never created by hipfp8_context_create)"
        ))),
    }
}

/// How many contexts were destroyed in this process: a thread's cached lookup
/// ([`LAST_LOOKUP`]) is only used while this has not changed since it was made.
static DESTROYED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The last handle this thread looked up in the registry: (handle, [`DESTROYED`] then,
    /// the context). Valid while no context has been destroyed since: a handle that was live
    /// then and has not been destroyed is still live, and handles are never reused. A `Weak`,
    /// so the cache keeps no context (and no GPU workspace) alive after its destruction.
    /// `hipfp8_context_destroy` removes the handle from the registry BEFORE it counts the
    /// destruction, so a lookup that reads the old count either runs before the destruction
    /// (and may use the context, as a call that started earlier may) or finds the `Weak`
    /// dead once the registry's reference is gone.
    #[allow(clippy::type_complexity)]
    static LAST_LOOKUP: RefCell<Option<(usize, u64, Weak<Context>)>> = const { RefCell::new(None) };
}

/// The GPU context on device `device`: BackendUnavailable when the build has no GPU backend
/// or there is no such device (negative ordinals included).
fn gpu(device: i32) -> Result<Context, Error> {
    let ordinal = usize::try_from(device)
        .map_err(|_| Error::BackendUnavailable(format!("GPU {device}: no such device")))?;
    Context::gpu(ordinal)
}

fn create(backend: u32, device: i32) -> Result<Context, FfiError> {
    const AUTO: u32 = hipfp8_backend::HIPFP8_BACKEND_AUTO as u32;
    const CPU: u32 = hipfp8_backend::HIPFP8_BACKEND_CPU as u32;
    const GPU: u32 = hipfp8_backend::HIPFP8_BACKEND_GPU as u32;
    match backend {
        CPU => Ok(Context::cpu()),
        GPU => Ok(gpu(device)?),
        // AUTO falls back to the CPU only when the GPU is *unavailable*; a GPU that is
        // present but fails (a runtime error) is reported, not papered over.
        AUTO => match gpu(device) {
            Err(Error::BackendUnavailable(_)) => Ok(Context::cpu()),
            r => Ok(r?),
        },
        v => Err(Error::InvalidEnum(format!(
            "backend = {v} is not a hipfp8_backend (AUTO = 0, CPU = 1, GPU = 2)"
        ))
        .into()),
    }
}

/// Create a context. `backend` is a `hipfp8_backend`: AUTO (GPU `device` if this build and
/// machine have one, else CPU), CPU (`device` is ignored) or GPU (`device` is the ordinal;
/// BACKEND_UNAVAILABLE when there is no such device or the build has no GPU backend).
/// On success `*out` receives the handle; on failure `*out` is not written.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_context_create(
    backend: u32,
    device: i32,
    out: *mut *mut hipfp8_context,
) -> hipfp8_status {
    guard("hipfp8_context_create", || {
        let out = args::out_param("out", out)?;
        let ctx = create(backend, device)?;
        out.write(register(ctx));
        Ok(())
    })
}

/// Create a CPU context whose AUTO formats are those of another device: `native_format`
/// E4M3FNUZ or E5M2FNUZ emulates an MI300 (gfx942: AUTO = FNUZ), E4M3FN / E5M2 / AUTO give
/// the plain CPU context (OCP). Useful to prepare data for a device on the host.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_context_create_cpu(
    native_format: u32,
    out: *mut *mut hipfp8_context,
) -> hipfp8_status {
    guard("hipfp8_context_create_cpu", || {
        let out = args::out_param("out", out)?;
        let fnuz = match format_choice(native_format)? {
            crate::params::FormatChoice::Exact(f) => f.is_fnuz(),
            _ => false,
        };
        out.write(register(Context::cpu_with_fnuz_native(fnuz)));
        Ok(())
    })
}

/// Destroy a context. NULL is a no-op (like `free`); a handle that is not live (already
/// destroyed) gives INVALID_HANDLE. Work already queued on a GPU stream is not waited for.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_context_destroy(ctx: *mut hipfp8_context) -> hipfp8_status {
    guard("hipfp8_context_destroy", || {
        if ctx.is_null() {
            return Ok(());
        }
        let removed = registry().live.remove(&ctx.addr());
        match removed {
            Some(c) => {
                DESTROYED.fetch_add(1, Ordering::AcqRel);
                drop(c);
                Ok(())
            }
            None => Err(FfiError::InvalidHandle(format!(
                "{ctx:p} is not a live context (destroyed twice?)"
            ))),
        }
    })
}

/// A query of the context `ctx` under the panic guard: `f` with the live context.
fn with_context(
    func: &'static str,
    ctx: *const hipfp8_context,
    f: impl FnOnce(&Context) -> Result<(), FfiError>,
) -> hipfp8_status {
    guard(func, || {
        let c = lookup(ctx)?;
        f(&c)
    })
}

/// A query that writes one value to `out`: `value` (checked first), then `out` (NULL is
/// NULL_POINTER), then the write.
fn query_out<T>(
    func: &'static str,
    ctx: *const hipfp8_context,
    out: *mut T,
    value: impl FnOnce(&Context) -> Result<T, FfiError>,
) -> hipfp8_status {
    with_context(func, ctx, |c| {
        let v = value(c)?;
        args::out_param("out", out)?.write(v);
        Ok(())
    })
}

/// A query that copies the string `s` gives into the caller's (buf, buf_len, len)
/// ([`args::copy_str_out`]).
fn str_query(
    func: &'static str,
    ctx: *const hipfp8_context,
    s: fn(&Context) -> &str,
    (buf, buf_len, len): (*mut c_char, usize, *mut usize),
) -> hipfp8_status {
    with_context(func, ctx, |c| args::copy_str_out(s(c), buf, buf_len, len))
}

/// The backend of a context: `HIPFP8_BACKEND_CPU` or `HIPFP8_BACKEND_GPU`.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_context_backend(
    ctx: *const hipfp8_context,
    out: *mut hipfp8_backend,
) -> hipfp8_status {
    query_out("hipfp8_context_backend", ctx, out, |c| {
        Ok(match c.backend() {
            BackendKind::Cpu => hipfp8_backend::HIPFP8_BACKEND_CPU,
            BackendKind::Gpu => hipfp8_backend::HIPFP8_BACKEND_GPU,
        })
    })
}

/// The native E4M3 format of the context's device (what `HIPFP8_FORMAT_AUTO` resolves to):
/// E4M3FNUZ on gfx940/941/942, E4M3FN on gfx950, NVIDIA and the CPU.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_context_native_format(
    ctx: *const hipfp8_context,
    out: *mut hipfp8_format,
) -> hipfp8_status {
    query_out("hipfp8_context_native_format", ctx, out, |c| {
        Ok(exact_format(c.native_format()))
    })
}

/// The exact format a `hipfp8_format` (AUTO, AUTO_E5M2, or an exact one) means on this
/// context: what the ops will write.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_context_resolve_format(
    ctx: *const hipfp8_context,
    format: u32,
    out: *mut hipfp8_format,
) -> hipfp8_status {
    query_out("hipfp8_context_resolve_format", ctx, out, |c| {
        Ok(exact_format(c.resolve(format_choice(format)?)))
    })
}

c_fns! {
    (buf: *mut c_char, buf_len: usize, len: *mut usize) {
        /// Copy the device name ("host CPU (N threads)", "AMD Instinct MI300X", ...) into `buf`.
        /// `*len` (if `len` is not NULL) receives its length without the NUL. Call with `buf` NULL to
        /// ask the length only; otherwise `buf_len` must be at least length + 1 (OUTPUT_TOO_SMALL,
        /// nothing written, if not).
        fn hipfp8_context_device_name = str_query(Context::device_name, (buf, buf_len, len));
        /// Copy the architecture string ("cpu", "gfx942", "gfx950", "sm_90", ...) into `buf`, with
        /// the same rules as `hipfp8_context_device_name`.
        fn hipfp8_context_arch = str_query(Context::arch, (buf, buf_len, len));
    }
}

fn exact_format(f: Fp8Format) -> hipfp8_format {
    match f {
        Fp8Format::E4M3Fn => hipfp8_format::HIPFP8_FORMAT_E4M3FN,
        Fp8Format::E5M2 => hipfp8_format::HIPFP8_FORMAT_E5M2,
        Fp8Format::E4M3FnUz => hipfp8_format::HIPFP8_FORMAT_E4M3FNUZ,
        Fp8Format::E5M2FnUz => hipfp8_format::HIPFP8_FORMAT_E5M2FNUZ,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_never_reused() {
        let mut a = std::ptr::null_mut();
        assert_eq!(
            hipfp8_context_create(1, 0, &mut a),
            hipfp8_status::HIPFP8_STATUS_SUCCESS
        );
        assert_eq!(
            hipfp8_context_destroy(a),
            hipfp8_status::HIPFP8_STATUS_SUCCESS
        );
        let mut b = std::ptr::null_mut();
        assert_eq!(
            hipfp8_context_create(1, 0, &mut b),
            hipfp8_status::HIPFP8_STATUS_SUCCESS
        );
        assert_ne!(a, b);
        assert!(lookup(a).is_err());
        assert!(lookup(b).is_ok());
        assert_eq!(
            hipfp8_context_destroy(b),
            hipfp8_status::HIPFP8_STATUS_SUCCESS
        );
    }

    #[test]
    fn made_up_handles_are_rejected() {
        let mut live = Vec::new();
        for _ in 0..8 {
            let mut h = std::ptr::null_mut();
            assert_eq!(
                hipfp8_context_create(1, 0, &mut h),
                hipfp8_status::HIPFP8_STATUS_SUCCESS
            );
            live.push(h);
        }
        let set: std::collections::HashSet<usize> = live.iter().map(|h| h.addr()).collect();
        // small integers: never a live handle
        for v in 1..=70_000usize {
            assert!(lookup(std::ptr::without_provenance(v)).is_err(), "{v}");
        }
        // neighbours, bit flips and the handles of the ids around the live ones
        for h in &live {
            let a = h.addr();
            let mut near: Vec<usize> = (1..=64)
                .flat_map(|d| [a.wrapping_add(d), a.wrapping_sub(d)])
                .collect();
            near.extend((0..usize::BITS).map(|b| a ^ (1 << b)));
            for v in near {
                if !set.contains(&v) {
                    assert!(
                        lookup(std::ptr::without_provenance(v)).is_err(),
                        "{v:#x} near {a:#x}"
                    );
                    // destroy does not accept it either, and the live context survives
                    assert_eq!(
                        hipfp8_context_destroy(std::ptr::without_provenance_mut(v)),
                        hipfp8_status::HIPFP8_STATUS_INVALID_HANDLE
                    );
                }
            }
            assert!(lookup(*h).is_ok());
        }
        // consecutive handles are not consecutive values
        let mut sorted: Vec<usize> = live.iter().map(|h| h.addr()).collect();
        sorted.sort();
        assert!(
            sorted.windows(2).all(|w| w[1] - w[0] > 1 << 16),
            "{sorted:x?}"
        );
        for h in live {
            assert_eq!(
                hipfp8_context_destroy(h),
                hipfp8_status::HIPFP8_STATUS_SUCCESS
            );
            assert!(lookup(h).is_err());
        }
    }

    #[test]
    fn context_is_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Context>();
    }
}
