//! The GPU context's device workspace: scratch memory some kernels need (inter-block amax
//! exchange of the column-reducing casts, amax accumulators of the two-phase casts).
//!
//! # Decision: the context owns it (no workspace argument in the API)
//! A GPU context lazily allocates one grow-only device buffer, zeroed once at
//! allocation. Every user keeps the invariant "all zero between uses": the column casts reset
//! every slot they touched before they finish; the two-phase casts (amax pass, then cast pass)
//! clear their accumulators with an async memset queued after their cast pass. So no call pays for an allocation or a host sync after the first, and
//! CUDA/HIP graph capture of the ops works (nothing is allocated while capturing, provided the
//! workspace is warm: run each op once before capturing).
//!
//! Streams: a launch uses the workspace from its stream's point of view. When a call comes on
//! a different stream than the previous user, the new stream first waits for an event
//! recorded after the previous use, so two in-flight launches never share the memory. Calls
//! are serialised on the host by a mutex only while they enqueue work.
//! Growing frees the old buffer (`hipFree`/`cudaFree` synchronise the device, so no in-flight
//! kernel still uses it), allocates a zeroed larger one and synchronises the device once.

use std::ffi::c_void;
use std::sync::Mutex;

use crate::error::Result;
use crate::runtime::{DeviceBuffer, GpuHandle, check_status};
use crate::sys;
use crate::view::StreamRef;

struct Inner {
    buf: DeviceBuffer<u8>,
    /// Raw event recorded after the last use (created with the buffer).
    event: sys::hipEvent_t,
    /// Stream of the last use, as an address (StreamRef is not Send).
    last_stream: usize,
    used: bool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // SAFETY: we created the event; destroying a recorded event is allowed.
        unsafe { sys::hipfp8_rt_event_destroy(self.event) };
    }
}

/// The workspace slot of a context (empty until a GPU op needs it).
#[derive(Default)]
pub struct WorkspaceCell {
    inner: Mutex<Option<Inner>>,
}

// SAFETY: the raw event handle is a thread-safe runtime identifier; all access goes through
// the mutex.
unsafe impl Send for WorkspaceCell {}
// SAFETY: as above.
unsafe impl Sync for WorkspaceCell {}

impl std::fmt::Debug for WorkspaceCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bytes = self
            .inner
            .lock()
            .ok()
            .and_then(|g| g.as_ref().map(|i| i.buf.len()))
            .unwrap_or(0);
        write!(f, "WorkspaceCell({bytes} bytes)")
    }
}

impl WorkspaceCell {
    /// Run `f` with a device pointer to at least `bytes` bytes of workspace that is all zero
    /// (see the module docs), ordered after every earlier use on any stream. `f` must only
    /// enqueue work on `stream`, and that work must leave the workspace all zero.
    pub(crate) fn with<R>(
        &self,
        ctx: &(impl GpuHandle + ?Sized),
        bytes: usize,
        stream: StreamRef,
        f: impl FnOnce(*mut c_void) -> Result<R>,
    ) -> Result<R> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let need_new = g.as_ref().is_none_or(|i| i.buf.len() < bytes.max(1));
        if need_new {
            let old_len = g.as_ref().map_or(0, |i| i.buf.len());
            *g = None; // free the old buffer first (synchronising free)
            let len = bytes.max(old_len.saturating_mul(2)).max(4096);
            let buf = DeviceBuffer::<u8>::zeroed(ctx, len)?;
            let mut event = std::ptr::null_mut();
            // SAFETY: valid out-pointer; the device was made current by the caller's guard.
            check_status("event create", unsafe {
                sys::hipfp8_rt_event_create(&mut event, 0)
            })?;
            // The zeroing memset went to the legacy default stream, which non-blocking streams
            // do not wait for: finish it before any kernel can use the memory.
            // SAFETY: no arguments.
            check_status("device synchronize", unsafe {
                sys::hipfp8_rt_device_synchronize()
            })?;
            *g = Some(Inner {
                buf,
                event,
                last_stream: 0,
                used: false,
            });
        }
        let inner = g.as_mut().expect("workspace allocated above");
        if inner.used && inner.last_stream != stream.0 as usize {
            // SAFETY: valid event (recorded after the last use) and a caller-provided stream.
            check_status("stream wait event", unsafe {
                sys::hipfp8_rt_stream_wait_event(stream.0, inner.event)
            })?;
        }
        let r = f(inner.buf.as_mut_ptr() as *mut c_void)?;
        // SAFETY: valid event; the stream is the one the work was queued on.
        check_status("event record", unsafe {
            sys::hipfp8_rt_event_record(inner.event, stream.0)
        })?;
        inner.used = true;
        inner.last_stream = stream.0 as usize;
        Ok(r)
    }
}
