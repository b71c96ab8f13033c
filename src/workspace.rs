//! Device scratch memory of the GPU ops that need it, one mechanism for all of them: the
//! column-reducing casts (inter-block amax exchange), the two-phase cast_transpose (amax
//! accumulators) and the grouped GEMM's library arguments.
//!
//! # Per stream, no events
//! A GPU context keeps one scratch buffer per (stream, kind): work queued on one stream is
//! ordered by the stream itself, so reuse needs no event, and two streams never share a
//! buffer, so they run concurrently (two streams of column casts do not serialise). Nothing
//! here waits on an event recorded elsewhere: a stream that is being captured into a CUDA/HIP
//! graph uses its buffer like any other call, and the capture stays valid.
//!
//! Kinds: [`Kind::Zeroed`] buffers are all zero between uses (zeroed once when allocated; the
//! column casts reset every slot they touched before they finish; cast_transpose clears its
//! accumulators with an async memset after its cast pass when it accumulated any, m > 0).
//! [`Kind::Plain`] buffers (the GEMM's group arguments and TMA descriptors) hold anything
//! after their first use; they too start zeroed.
//!
//! Growth: a buffer grows (geometrically) when a call needs more: a new one is allocated and
//! zeroed with an async memset on the stream, and the old one is retired, not freed: it stays
//! allocated until the context is dropped. Work queued earlier may still use it, and so may a
//! CUDA/HIP graph captured with it, whose replays keep its address forever; retiring needs
//! neither a stream synchronisation nor knowing which buffers a capture saw, and costs at
//! most the sum of a geometric series (under twice the largest buffer per stream and kind).
//! Binding a caller workspace retires the stream's own buffer the same way. Growth allocates,
//! so it is refused while the stream itself is capturing ([`Error::NotSupported`]): run each
//! op once on the stream before capturing (a warm-up), or bind a caller-provided workspace
//! ([`WorkspaceCache::bind`]).
//!
//! Caller-provided workspaces: `Context::bind_stream_workspace` makes caller memory the
//! zeroed scratch of a stream (sized with `Context::colwise_workspace_size` /
//! `cast_transpose_workspace_size`); the GEMM takes its own through `GemmParams::workspace`.
//!
//! A stream's handle is its identity: a stream destroyed while work that used its buffer is
//! still queued must not be replaced by a new stream with the same handle before that work
//! ends (streams from [`crate::runtime::Stream`] and frameworks are long-lived).

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::runtime::{DeviceBuffer, GpuHandle, stream_is_capturing};
use crate::view::StreamRef;

/// A caller-owned device workspace: for a grouped GEMM (`GemmParams::workspace`, sized by
/// `Context::grouped_gemm_workspace_size`) or bound to a stream for the casts
/// (`Context::bind_stream_workspace`). Work queued with it may still use it after the call
/// returns: the caller keeps it alive and unused by other work until then (stream order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workspace {
    ptr: *mut c_void,
    bytes: usize,
}

impl Workspace {
    /// # Safety
    /// `ptr` must be device memory of the context's GPU, valid for `bytes` bytes, and not
    /// used by any other work queued while a grouped GEMM using it may run.
    pub unsafe fn from_raw(ptr: *mut c_void, bytes: usize) -> Workspace {
        Workspace { ptr, bytes }
    }
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }
    pub fn len(&self) -> usize {
        self.bytes
    }
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
}

/// What a scratch buffer must hold between uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// All zero (the casts' invariant).
    Zeroed,
    /// Anything (overwritten by each use).
    Plain,
}

#[derive(Default)]
struct Slot {
    own: Option<DeviceBuffer<u8>>,
    /// Caller memory (address, bytes) bound to the slot instead of `own`.
    bound: Option<(usize, usize)>,
}

#[derive(Default)]
struct Slots {
    live: HashMap<(usize, Kind), Slot>,
    /// Buffers replaced by a larger one or by a bound workspace: kept until the cache drops
    /// (queued work or a captured graph may still use them; see the module docs).
    retired: Vec<DeviceBuffer<u8>>,
}

/// The per-stream scratch buffers of a GPU context (empty until an op needs one).
#[derive(Default)]
pub struct WorkspaceCache {
    slots: Mutex<Slots>,
}

impl std::fmt::Debug for WorkspaceCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (n, bytes) = self
            .slots
            .lock()
            .map(|g| {
                (
                    g.live.len(),
                    g.live
                        .values()
                        .filter_map(|s| s.own.as_ref())
                        .chain(g.retired.iter())
                        .map(|b| b.len())
                        .sum::<usize>(),
                )
            })
            .unwrap_or((0, 0));
        write!(f, "WorkspaceCache({n} streams, {bytes} bytes owned)")
    }
}

impl WorkspaceCache {
    /// Run `f` with `stream`'s scratch of `kind` (device pointer, bytes), at least `bytes`
    /// long (see the module docs). `f` must only enqueue work on `stream`, and work on a
    /// [`Kind::Zeroed`] buffer must leave it all zero. The cache is locked while `f` enqueues.
    pub(crate) fn with<R, F: FnOnce(*mut c_void, usize) -> Result<R>>(
        &self,
        gpu: &(impl GpuHandle + ?Sized),
        kind: Kind,
        bytes: usize,
        stream: StreamRef,
        f: F,
    ) -> Result<R> {
        // Caller memory (scoped or bound): used as it is, when it is large enough.
        let caller = |(ptr, len): (usize, usize), f: F| {
            if len < bytes {
                return Err(Error::OutputTooSmall {
                    what: "workspace",
                    needed: bytes,
                    got: len,
                });
            }
            f(ptr as *mut c_void, len)
        };
        if let Some((s, ptr, len)) = SCOPED.get() {
            if kind == Kind::Zeroed && s == stream.0 as usize {
                return caller((ptr, len), f);
            }
        }
        let mut g = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let Slots { live, retired } = &mut *g;
        let slot = live.entry((stream.0 as usize, kind)).or_default();
        if let Some(b) = slot.bound {
            return caller(b, f);
        }
        if slot.own.as_ref().is_none_or(|b| b.len() < bytes.max(1)) {
            if stream_is_capturing(stream)? {
                return Err(Error::NotSupported(format!(
                    "the stream's workspace must grow to {bytes} bytes, which cannot happen \
                     while it is captured into a graph: run the op once on the stream before \
                     capturing, or bind a workspace (Context::bind_stream_workspace)"
                )));
            }
            let old_len = slot.own.as_ref().map_or(0, |b| b.len());
            let len = bytes.max(old_len.saturating_mul(2)).max(4096);
            let mut buf = DeviceBuffer::<u8>::alloc(gpu, len)?;
            // Zeroed in stream order, before any kernel queued after it on `stream`: no
            // device-wide synchronisation, which would break a capture that another thread
            // runs on another stream. Plain buffers too: CUTLASS's grouped GEMM copies whole
            // TMA descriptor slots of its workspace that it only partly writes, and a
            // defined (zero) start keeps those reads deterministic (compute-sanitizer initcheck).
            buf.fill_bytes_async(0, stream)?;
            // Work queued earlier, or a graph captured with it, may still use the old one.
            retired.extend(slot.own.replace(buf));
        }
        let buf = slot.own.as_mut().expect("workspace allocated above");
        let len = buf.len();
        f(buf.as_mut_ptr() as *mut c_void, len)
    }

    /// Make caller memory (`ptr`, `bytes`: device memory of the context's GPU, all zero, kept
    /// alive and used by nothing else until unbound and the stream's work is done) the
    /// zeroed scratch of `stream`, retiring the buffer the cache owned for it (kept until the
    /// cache drops: work queued earlier or a captured graph may still use it).
    pub(crate) fn bind(&self, stream: StreamRef, ptr: *mut c_void, bytes: usize) {
        let mut g = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let Slots { live, retired } = &mut *g;
        let slot = live.entry((stream.0 as usize, Kind::Zeroed)).or_default();
        retired.extend(slot.own.take());
        slot.bound = Some((ptr as usize, bytes));
    }

    /// Run `f` with caller memory (`ptr`, `bytes`: device memory of the context's GPU, all
    /// zero) as `stream`'s zeroed scratch for the ops `f` runs on this thread, instead of
    /// the stream's own or bound buffer (which stay as they are: nothing synchronises). The
    /// recipe (`crate::recipe`) hands its casts a part of the caller's workspace this way.
    pub(crate) fn with_scoped_zeroed<R>(
        &self,
        stream: StreamRef,
        ptr: *mut c_void,
        bytes: usize,
        f: impl FnOnce() -> R,
    ) -> R {
        let prev = SCOPED.replace(Some((stream.0 as usize, ptr as usize, bytes)));
        let restore = Restore(prev);
        let r = f();
        drop(restore);
        r
    }

    /// Undo [`WorkspaceCache::bind`]: the stream's next call allocates its own again.
    pub(crate) fn unbind(&self, stream: StreamRef) {
        let mut g = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        g.live.remove(&(stream.0 as usize, Kind::Zeroed));
    }
}

thread_local! {
    /// The scoped zeroed scratch of [`WorkspaceCache::with_scoped_zeroed`]: (stream, address,
    /// bytes).
    static SCOPED: Cell<Option<(usize, usize, usize)>> = const { Cell::new(None) };
}

/// Restores the previous scoped scratch when dropped (also when `f` panics).
struct Restore(Option<(usize, usize, usize)>);

impl Drop for Restore {
    fn drop(&mut self) {
        SCOPED.set(self.0);
    }
}
