//! The GPU runtime in safe Rust: devices and their properties, the native FP8 flavour of an
//! architecture, streams (owned or borrowed from a framework), events, typed device buffers
//! with RAII. It takes a [`GpuHandle`] (the GPU ordinal), never the op-level context.
//!
//! Every call goes through the runtime shim declared in [`crate::sys`]; in a build without a
//! GPU backend those calls are stubs, so this module compiles everywhere: [`Device::count`]
//! is 0 (and `Context::gpu` returns [`Error::BackendUnavailable`]).

use std::ffi::{CStr, c_int, c_void};
use std::marker::PhantomData;
use std::ops::Range;

use half::{bf16, f16};

use crate::error::{Error, Result};
use crate::format::Fp8Format;
use crate::sys;
use crate::view::{Dst, HpSrc, Loc, Src, StreamRef};

// ---------------------------------------------------------------------------------- build facts

/// The GPU backend this library was compiled with: `"rocm"`, `"cuda"` or `"cpu"` (none).
pub fn built_backend() -> &'static str {
    env!("HIPFP8_BUILD_BACKEND")
}

/// The GPU targets compiled in (`"gfx942;gfx950"`, `"sm_90"`, empty for CPU builds).
pub fn built_targets() -> &'static str {
    env!("HIPFP8_BUILD_TARGETS")
}

/// Names of the foreign functions (runtime shim and kernel launchers) compiled in.
pub fn built_launchers() -> impl Iterator<Item = &'static str> {
    env!("HIPFP8_BUILD_LAUNCHERS")
        .split(',')
        .filter(|s| !s.is_empty())
}

/// Whether the launcher `name` (e.g. `"hipfp8_rowwise_2d_launch"`) is compiled in (a binary
/// search of the sorted names, made once; the grouped GEMM asks on every call).
pub fn has_launcher(name: &str) -> bool {
    static SORTED: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    SORTED
        .get_or_init(|| {
            let mut v: Vec<&'static str> = built_launchers().collect();
            v.sort_unstable();
            v
        })
        .binary_search(&name)
        .is_ok()
}

/// Whether this build has a GPU backend at all.
pub const fn gpu_built() -> bool {
    cfg!(hipfp8_gpu)
}

// ---------------------------------------------------------------------------------- status codes

/// The runtime's (or hipfp8's) name and description of a status code.
pub fn status_string(code: i32) -> (String, String) {
    let (mut name, mut desc) = (std::ptr::null(), std::ptr::null());
    // SAFETY: both out-pointers are valid for one write; on success they point to static
    // NUL-terminated strings owned by the runtime or the shim.
    let st = unsafe { sys::hipfp8_rt_error_string(code, &mut name, &mut desc) };
    if st != 0 || name.is_null() || desc.is_null() {
        return (
            format!("status {code}"),
            String::from("(no GPU runtime in this build)"),
        );
    }
    // SAFETY: non-null static C strings (see above).
    unsafe {
        (
            CStr::from_ptr(name).to_string_lossy().into_owned(),
            CStr::from_ptr(desc).to_string_lossy().into_owned(),
        )
    }
}

/// Turn a shim / launcher status into a `Result`. `what` names the call for the message.
/// Used by every GPU arm of every op.
pub fn check_status(what: &str, code: c_int) -> Result<()> {
    match code {
        sys::KSTATUS_OK => Ok(()),
        sys::NOT_BUILT => Err(Error::BackendUnavailable(format!(
            "{what}: not compiled into this build (backend {}, targets {:?})",
            built_backend(),
            built_targets()
        ))),
        sys::KSTATUS_INVALID_ENUM => Err(Error::InvalidEnum(format!(
            "{what}: rejected by the kernel launcher"
        ))),
        sys::KSTATUS_INVALID_SHAPE => Err(Error::InvalidShape(format!(
            "{what}: rejected by the kernel launcher"
        ))),
        sys::KSTATUS_MISALIGNED => Err(Error::Misaligned(format!(
            "{what}: pointer alignment not supported"
        ))),
        sys::KSTATUS_UNSUPPORTED => Err(Error::NotSupported(format!(
            "{what}: the kernel launcher does not take these arguments (docs/OPS.md lists the \
             GPU limits)"
        ))),
        sys::KSTATUS_NULL_POINTER => Err(Error::NullPointer("kernel argument")),
        c => {
            let (name, desc) = status_string(c);
            // hipErrorOutOfMemory / cudaErrorMemoryAllocation (both 2): a failed allocation
            // of the library's own (workspace, buffer) is its own status, not a broken device.
            if name.contains("OutOfMemory") || name.contains("MemoryAllocation") {
                return Err(Error::OutOfMemory(format!("{what}: {name}: {desc}")));
            }
            Err(Error::Device {
                code: c,
                msg: format!("{what}: {name}: {desc}"),
            })
        }
    }
}

// ---------------------------------------------------------------------------------- arch -> format

/// The base of an architecture string: `"gfx942:sramecc+:xnack-"` -> `"gfx942"`.
pub fn base_arch(arch: &str) -> &str {
    arch.trim().split(':').next().unwrap_or("")
}

/// True when the architecture's native FP8 is FNUZ: the MI300 family (gfx940, gfx941,
/// gfx942, which includes MI300X/MI300A/MI325X). Everything else is OCP: gfx950 (MI355X)
/// converts to OCP in hardware, NVIDIA (`sm_*`) is OCP, and other or unknown AMD targets
/// (gfx90a and older have no FP8 hardware; RDNA4 gfx12 uses OCP) get OCP because that is
/// what torch's `float8_e4m3fn` and every later AMD part use; "cpu" is OCP.
pub fn arch_native_fnuz(arch: &str) -> bool {
    matches!(
        base_arch(arch).to_ascii_lowercase().as_str(),
        "gfx940" | "gfx941" | "gfx942"
    )
}

/// The native E4M3 flavour of an architecture string (see [`arch_native_fnuz`]).
pub fn native_format_for_arch(arch: &str) -> Fp8Format {
    if arch_native_fnuz(arch) {
        Fp8Format::E4M3FnUz
    } else {
        Fp8Format::E4M3Fn
    }
}

/// The native E5M2 flavour of an architecture string.
pub fn native_e5m2_for_arch(arch: &str) -> Fp8Format {
    if arch_native_fnuz(arch) {
        Fp8Format::E5M2FnUz
    } else {
        Fp8Format::E5M2
    }
}

/// Whether the architecture converts f32 -> FP8 in hardware (informational: every target
/// produces the same bits, software conversion where this is false). gfx940-942 (FNUZ),
/// gfx950 (OCP), NVIDIA sm_89 and newer (OCP).
pub fn arch_has_hw_fp8(arch: &str) -> bool {
    let base = base_arch(arch).to_ascii_lowercase();
    if let Some(sm) = base.strip_prefix("sm_") {
        let digits: String = sm.chars().take_while(|c| c.is_ascii_digit()).collect();
        return digits.parse::<u32>().is_ok_and(|v| v >= 89);
    }
    matches!(base.as_str(), "gfx940" | "gfx941" | "gfx942" | "gfx950")
}

// ---------------------------------------------------------------------------------- devices

/// GPU vendor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vendor {
    Amd,
    Nvidia,
}

/// Properties of one GPU, as reported by the runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    pub ordinal: usize,
    pub name: String,
    /// `gcnArchName` on AMD (`"gfx942:sramecc+:xnack-"`), `"sm_XY"` on NVIDIA.
    pub arch: String,
    pub vendor: Vendor,
    /// Compute units (AMD) / streaming multiprocessors (NVIDIA).
    pub compute_units: u32,
    /// 64 on CDNA, 32 on NVIDIA.
    pub wavefront_size: u32,
    /// (major, minor): the compute capability on NVIDIA, HIP's emulated value on AMD.
    pub compute_capability: (u32, u32),
    pub total_memory: u64,
    pub l2_cache_bytes: u64,
    pub shared_mem_per_block: u64,
    pub shared_mem_per_block_optin: u64,
    pub max_threads_per_block: u32,
    pub pci_bus_id: u32,
}

impl Device {
    /// Number of visible GPUs: 0 in a CPU-only build and on a machine without GPU or driver.
    pub fn count() -> Result<usize> {
        if !gpu_built() {
            return Ok(0);
        }
        let mut n = 0i32;
        // SAFETY: `n` is valid for one write.
        check_status("device count", unsafe {
            sys::hipfp8_rt_device_count(&mut n)
        })?;
        Ok(n.max(0) as usize)
    }

    /// Properties of GPU `ordinal`.
    pub fn get(ordinal: usize) -> Result<Device> {
        let n = Device::count()?;
        if ordinal >= n {
            return Err(Error::BackendUnavailable(format!(
                "GPU {ordinal} not present ({n} visible; library built for {})",
                built_backend()
            )));
        }
        let mut size = 0u64;
        // SAFETY: valid out-pointer.
        check_status("props size", unsafe {
            sys::hipfp8_rt_props_size(&mut size)
        })?;
        if size as usize != std::mem::size_of::<sys::hipfp8_device_props>() {
            return Err(Error::Device {
                code: -1,
                msg: format!(
                    "hipfp8_device_props is {size} bytes in C++ but {} in Rust: sys.rs and runtime.hip disagree",
                    std::mem::size_of::<sys::hipfp8_device_props>()
                ),
            });
        }
        let mut p = sys::hipfp8_device_props::default();
        // SAFETY: `p` has the layout the shim writes (size checked above).
        check_status("device properties", unsafe {
            sys::hipfp8_rt_device_props(ordinal as i32, &mut p)
        })?;
        Ok(Device {
            ordinal,
            name: c_chars(&p.name),
            arch: c_chars(&p.arch),
            vendor: if p.vendor == 1 {
                Vendor::Amd
            } else {
                Vendor::Nvidia
            },
            compute_units: p.multiprocessor_count.max(0) as u32,
            wavefront_size: p.wavefront_size.max(0) as u32,
            compute_capability: (p.cc_major.max(0) as u32, p.cc_minor.max(0) as u32),
            total_memory: p.total_global_mem.max(0) as u64,
            l2_cache_bytes: p.l2_cache_bytes.max(0) as u64,
            shared_mem_per_block: p.shared_mem_per_block.max(0) as u64,
            shared_mem_per_block_optin: p.shared_mem_per_block_optin.max(0) as u64,
            max_threads_per_block: p.max_threads_per_block.max(0) as u32,
            pci_bus_id: p.pci_bus_id.max(0) as u32,
        })
    }

    /// Every visible GPU.
    pub fn all() -> Result<Vec<Device>> {
        (0..Device::count()?).map(Device::get).collect()
    }

    /// The device's native E4M3 flavour.
    pub fn native_format(&self) -> Fp8Format {
        native_format_for_arch(&self.arch)
    }

    /// `"gfx942"` of `"gfx942:sramecc+:xnack-"`.
    pub fn base_arch(&self) -> &str {
        base_arch(&self.arch)
    }
}

fn c_chars(buf: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Driver and runtime versions as the runtime reports them (e.g. 13000 for CUDA 13.0).
pub fn runtime_versions() -> Result<(i32, i32)> {
    let (mut d, mut r) = (0, 0);
    // SAFETY: valid out-pointers.
    check_status("versions", unsafe {
        sys::hipfp8_rt_versions(&mut d, &mut r)
    })?;
    Ok((d, r))
}

/// Makes `ordinal` the current device for the guard's lifetime and restores the previous
/// one afterwards, so hipfp8 calls do not change a framework's current device.
///
/// One shim call (`hipfp8_rt_activate`): it clears the runtime's last error (launchers report
/// `hipGetLastError()` after their launch, which would also return an older, already-reported
/// failure of any runtime call in this thread, a framework's say; sticky errors from a faulted
/// kernel are not cleared by this and still surface), reads the current device and sets
/// `ordinal` only when another one is current; then one more (`hipfp8_rt_set_device`) on drop
/// only in that case. There is no cache of the current device: the framework, the user or
/// another library may change it on this thread between two hipfp8 calls without hipfp8
/// seeing it, so it is read every time (a thread-local read inside the runtime).
pub(crate) struct DeviceGuard {
    previous: Option<i32>,
}

impl DeviceGuard {
    pub(crate) fn new(ordinal: usize) -> Result<DeviceGuard> {
        let ordinal = ordinal as i32;
        let mut previous = ordinal;
        count_shim_call();
        // SAFETY: valid out-pointer; an invalid ordinal is reported as a status.
        check_status("activate device", unsafe {
            sys::hipfp8_rt_activate(ordinal, &mut previous)
        })?;
        Ok(DeviceGuard {
            previous: (previous != ordinal).then_some(previous),
        })
    }
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        if let Some(p) = self.previous {
            count_shim_call();
            // SAFETY: restores a device that was current before; failure leaves the new one.
            unsafe { sys::hipfp8_rt_set_device(p) };
        }
    }
}

thread_local! {
    static SHIM_CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn count_shim_call() {
    SHIM_CALLS.set(SHIM_CALLS.get().wrapping_add(1));
}

/// The runtime-shim calls an op's host path made on this thread so far: the pointer checks
/// ([`check_device_pointers`]) and the device activations and restores ([`DeviceGuard`]),
/// the runtime calls every op call makes outside its launcher. Tests take the difference
/// around one call (tests/host_path.rs) so that a regression (a second check of the same
/// buffers, a runtime call per buffer) fails.
#[doc(hidden)]
pub fn shim_calls_on_this_thread() -> u64 {
    SHIM_CALLS.get()
}

// ---------------------------------------------------------------------------------- handles

/// What the runtime needs of whoever asks it for a stream, an event or a buffer: the GPU it
/// is for (`None`: a CPU backend, refused with [`Error::WrongLocation`]). The op-level
/// `Context` implements it (src/context.rs); the runtime knows nothing else of it.
pub trait GpuHandle {
    fn gpu_ordinal(&self) -> Option<usize>;
}

/// A bare GPU ordinal is a handle too.
impl GpuHandle for usize {
    fn gpu_ordinal(&self) -> Option<usize> {
        Some(*self)
    }
}

/// The ordinal of a GPU handle, or [`Error::WrongLocation`] naming `what` for a CPU one.
pub fn require_gpu(h: &(impl GpuHandle + ?Sized), what: &str) -> Result<usize> {
    h.gpu_ordinal().ok_or_else(|| {
        Error::WrongLocation(format!(
            "{what} needs a GPU context, this one runs on the CPU"
        ))
    })
}

/// Make the handle's GPU current until the guard drops (nothing for a CPU handle).
pub(crate) fn activate(h: &(impl GpuHandle + ?Sized)) -> Result<Option<DeviceGuard>> {
    h.gpu_ordinal().map(DeviceGuard::new).transpose()
}

/// Check that raw pointers are device memory of GPU `ordinal`: host memory would fault
/// inside a kernel (and on CUDA poison the context), so it is refused here with
/// [`Error::WrongLocation`] naming the first bad one in the order given. Null pointers pass
/// (the op's own null check reports them). One shim call for all of them
/// (`hipfp8_rt_check_pointers`, which asks the runtime about each in turn); none when every
/// pointer is null. No heap allocation up to [`MAX_CHECKED`] pointers (more are checked in
/// several shim calls).
pub fn check_device_pointers(ordinal: usize, ptrs: &[(&'static str, *const c_void)]) -> Result<()> {
    match first_bad_pointer(ordinal, ptrs)? {
        None => Ok(()),
        Some((_, e)) => Err(e),
    }
}

/// [`check_device_pointers`] that returns the index of the first bad pointer with its error
/// instead of failing (`Err` only when the runtime cannot answer).
pub(crate) fn first_bad_pointer(
    ordinal: usize,
    ptrs: &[(&'static str, *const c_void)],
) -> Result<Option<(usize, Error)>> {
    for (c, chunk) in ptrs.chunks(MAX_CHECKED).enumerate() {
        let mut raw = [std::ptr::null::<c_void>(); MAX_CHECKED];
        let mut any = false;
        for (r, &(_, p)) in raw.iter_mut().zip(chunk) {
            *r = p;
            any |= !p.is_null();
        }
        if !any {
            continue;
        }
        let (mut bad, mut dev) = (-1i32, -1i32);
        count_shim_call();
        // SAFETY: `raw` holds chunk.len() pointers; the shim only asks the runtime about the
        // addresses; valid out-pointers.
        check_status("pointer info", unsafe {
            sys::hipfp8_rt_check_pointers(
                raw.as_ptr(),
                chunk.len() as i32,
                ordinal as i32,
                &mut bad,
                &mut dev,
            )
        })?;
        if let Some(i) = usize::try_from(bad).ok().filter(|&i| i < chunk.len()) {
            let what = chunk[i].0;
            let e = if dev < 0 {
                Error::WrongLocation(format!("`{what}` is not device memory"))
            } else {
                Error::WrongLocation(format!(
                    "`{what}` is memory of GPU {dev}, the context uses GPU {ordinal}"
                ))
            };
            return Ok(Some((c * MAX_CHECKED + i, e)));
        }
    }
    Ok(None)
}

/// The pointers one shim call of [`check_device_pointers`] checks (every op has fewer
/// buffers).
pub const MAX_CHECKED: usize = 16;

// ---------------------------------------------------------------------------------- streams

/// A GPU stream: owned (created here, destroyed on drop) or borrowed (a framework's
/// `hipStream_t`/`cudaStream_t`, never destroyed here).
#[derive(Debug)]
pub struct Stream {
    raw: sys::hipStream_t,
    owned: bool,
}

// SAFETY: a runtime stream handle may be used from any thread (the HIP and CUDA runtimes are
// thread-safe); the handle is only an identifier.
unsafe impl Send for Stream {}
// SAFETY: see Send; every operation on the handle goes through the thread-safe runtime.
unsafe impl Sync for Stream {}

impl Stream {
    /// A new stream on the context's GPU; it synchronises with the legacy default stream
    /// like any stream created without flags.
    pub fn new(ctx: &(impl GpuHandle + ?Sized)) -> Result<Stream> {
        Self::create(ctx, false)
    }

    /// A new stream that does not synchronise with the legacy default stream.
    pub fn new_non_blocking(ctx: &(impl GpuHandle + ?Sized)) -> Result<Stream> {
        Self::create(ctx, true)
    }

    fn create(ctx: &(impl GpuHandle + ?Sized), non_blocking: bool) -> Result<Stream> {
        let _g = DeviceGuard::new(require_gpu(ctx, "a stream")?)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the device is current.
        check_status("stream create", unsafe {
            sys::hipfp8_rt_stream_create(&mut raw, non_blocking as i32)
        })?;
        Ok(Stream { raw, owned: true })
    }

    /// Borrow a stream handle owned by someone else (e.g. `torch.cuda.current_stream().cuda_stream`).
    ///
    /// # Safety
    /// `raw` must be null (the default stream) or a valid stream of the device it will be
    /// used with, and stay valid for the life of the returned value.
    pub unsafe fn borrowed(raw: *mut c_void) -> Stream {
        Stream { raw, owned: false }
    }

    /// The default (null) stream.
    pub fn default_stream() -> Stream {
        Stream {
            raw: std::ptr::null_mut(),
            owned: false,
        }
    }

    /// The handle, as the ops take it.
    pub fn handle(&self) -> StreamRef {
        StreamRef(self.raw)
    }

    pub fn raw(&self) -> *mut c_void {
        self.raw
    }

    pub fn is_owned(&self) -> bool {
        self.owned
    }

    /// Block until all work queued on the stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: the handle is valid (constructor contracts).
        check_status("stream synchronize", unsafe {
            sys::hipfp8_rt_stream_synchronize(self.raw)
        })
    }

    /// Whether all queued work has finished, without blocking.
    pub fn is_idle(&self) -> Result<bool> {
        let mut done = 0;
        // SAFETY: valid handle and out-pointer.
        check_status("stream query", unsafe {
            sys::hipfp8_rt_stream_query(self.raw, &mut done)
        })?;
        Ok(done != 0)
    }

    /// Whether the stream is capturing into a graph now.
    pub fn is_capturing(&self) -> Result<bool> {
        stream_is_capturing(self.handle())
    }

    /// Begin capturing this stream into a graph, in thread-local mode (other threads may go
    /// on using the runtime). Work queued on it until [`Stream::end_capture`] is recorded,
    /// not run.
    pub fn begin_capture(&self) -> Result<()> {
        // SAFETY: valid handle; mode 1 = thread-local.
        check_status("stream begin capture", unsafe {
            sys::hipfp8_rt_stream_begin_capture(self.raw, 1)
        })
    }

    /// End the capture begun by [`Stream::begin_capture`]: the captured work as a graph.
    pub fn end_capture(&self) -> Result<Graph> {
        let mut graph = std::ptr::null_mut();
        // SAFETY: valid handle and out-pointer.
        check_status("stream end capture", unsafe {
            sys::hipfp8_rt_stream_end_capture(self.raw, &mut graph)
        })?;
        let mut exec = std::ptr::null_mut();
        // SAFETY: the graph just captured; valid out-pointer.
        let st = unsafe { sys::hipfp8_rt_graph_instantiate(&mut exec, graph) };
        // From here `Graph` owns both handles (null ones are not destroyed).
        let g = Graph { raw: exec, graph };
        check_status("graph instantiate", st)?;
        Ok(g)
    }

    /// Make later work on this stream wait for `event` (recorded on any stream).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        // SAFETY: valid handles.
        check_status("stream wait event", unsafe {
            sys::hipfp8_rt_stream_wait_event(self.raw, event.raw)
        })
    }
}

impl From<&Stream> for StreamRef {
    fn from(s: &Stream) -> StreamRef {
        s.handle()
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.owned && !self.raw.is_null() {
            // SAFETY: we created this stream and nobody else destroys it.
            unsafe { sys::hipfp8_rt_stream_destroy(self.raw) };
        }
    }
}

/// Whether `stream` is capturing into a graph now (false for a CPU build).
pub fn stream_is_capturing(stream: StreamRef) -> Result<bool> {
    if !gpu_built() {
        return Ok(false);
    }
    let mut c = 0;
    // SAFETY: a caller-provided stream handle (StreamRef's contract) and a valid out-pointer.
    check_status("stream is capturing", unsafe {
        sys::hipfp8_rt_stream_is_capturing(stream.0, &mut c)
    })?;
    Ok(c != 0)
}

// ---------------------------------------------------------------------------------- graphs

/// A captured and instantiated graph ([`Stream::end_capture`]): replay it with
/// [`Graph::launch`]. Replays read and write the same device memory as the captured calls.
#[derive(Debug)]
pub struct Graph {
    /// The executable graph.
    raw: *mut c_void,
    graph: *mut c_void,
}

// SAFETY: graph handles are thread-safe runtime identifiers (as for Stream).
unsafe impl Send for Graph {}

impl Graph {
    /// Queue one replay of the graph on `stream`.
    pub fn launch(&self, stream: impl Into<StreamRef>) -> Result<()> {
        // SAFETY: an instantiated graph and a caller-provided stream handle.
        check_status("graph launch", unsafe {
            sys::hipfp8_rt_graph_launch(self.raw, stream.into().0)
        })
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: we own both handles; destroying null is a no-op in the shim.
        unsafe {
            sys::hipfp8_rt_graph_exec_destroy(self.raw);
            sys::hipfp8_rt_graph_destroy(self.graph);
        }
    }
}

// ---------------------------------------------------------------------------------- events

/// A timing event.
#[derive(Debug)]
pub struct Event {
    raw: sys::hipEvent_t,
}

// SAFETY: event handles are thread-safe runtime identifiers (as for Stream).
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    /// A timing-capable event on the context's GPU.
    pub fn new(ctx: &(impl GpuHandle + ?Sized)) -> Result<Event> {
        let _g = DeviceGuard::new(require_gpu(ctx, "an event")?)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the device is current.
        check_status("event create", unsafe {
            sys::hipfp8_rt_event_create(&mut raw, 1)
        })?;
        Ok(Event { raw })
    }

    /// Record the event at the current end of `stream`.
    pub fn record(&self, stream: impl Into<StreamRef>) -> Result<()> {
        // SAFETY: valid event; the stream handle's validity is the StreamRef's contract.
        check_status("event record", unsafe {
            sys::hipfp8_rt_event_record(self.raw, stream.into().0)
        })
    }

    /// Block until the recorded work has finished.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: valid event.
        check_status("event synchronize", unsafe {
            sys::hipfp8_rt_event_synchronize(self.raw)
        })
    }

    /// Milliseconds from `self` (recorded first) to `end`; both must have completed.
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        let mut ms = 0f32;
        // SAFETY: valid events and out-pointer.
        check_status("event elapsed", unsafe {
            sys::hipfp8_rt_event_elapsed_ms(&mut ms, self.raw, end.raw)
        })?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: we created the event.
        unsafe { sys::hipfp8_rt_event_destroy(self.raw) };
    }
}

// ---------------------------------------------------------------------------------- buffers

/// Element types a [`DeviceBuffer`] may hold.
///
/// # Safety
/// Implementors must be plain data: every bit pattern is a valid value and there is no
/// drop glue, so bytes copied from the device (or left uninitialised there) can be read
/// as `Self`.
pub unsafe trait DeviceCopy: Copy + Send + Sync + 'static {}

macro_rules! device_copy {
    ($($t:ty),*) => {$(
        // SAFETY: a primitive numeric type: any bit pattern is valid.
        unsafe impl DeviceCopy for $t {}
    )*};
}
device_copy!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64, bf16, f16);

/// `len` elements of `T` in device memory of one GPU, freed on drop.
pub struct DeviceBuffer<T: DeviceCopy> {
    ptr: *mut T,
    len: usize,
    ordinal: usize,
    _p: PhantomData<T>,
}

// SAFETY: the buffer owns its device memory exclusively (like a Vec); access from other
// threads goes through &/&mut as usual and the runtime is thread-safe.
unsafe impl<T: DeviceCopy> Send for DeviceBuffer<T> {}
// SAFETY: as above; shared references only read or hand out read-only views.
unsafe impl<T: DeviceCopy> Sync for DeviceBuffer<T> {}

impl<T: DeviceCopy> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceBuffer<{}>({} elements on GPU {} at {:p})",
            std::any::type_name::<T>(),
            self.len,
            self.ordinal,
            self.ptr
        )
    }
}

impl<T: DeviceCopy> DeviceBuffer<T> {
    /// Allocate `len` elements; contents unspecified (any bit pattern is a valid `T`).
    pub fn alloc(ctx: &(impl GpuHandle + ?Sized), len: usize) -> Result<Self> {
        let ordinal = require_gpu(ctx, "a device buffer")?;
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            Error::SizeOverflow(format!(
                "{len} elements of {} bytes",
                std::mem::size_of::<T>()
            ))
        })?;
        let _g = DeviceGuard::new(ordinal)?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; zero bytes gives null, which the buffer handles.
        check_status("device malloc", unsafe {
            sys::hipfp8_rt_malloc(&mut p, bytes as u64)
        })?;
        Ok(DeviceBuffer {
            ptr: p as *mut T,
            len,
            ordinal,
            _p: PhantomData,
        })
    }

    /// Allocate `len` zeroed elements.
    pub fn zeroed(ctx: &(impl GpuHandle + ?Sized), len: usize) -> Result<Self> {
        let mut b = Self::alloc(ctx, len)?;
        b.fill_bytes(0)?;
        Ok(b)
    }

    /// Allocate and copy `data` in (synchronous).
    pub fn from_host(ctx: &(impl GpuHandle + ?Sized), data: &[T]) -> Result<Self> {
        let mut b = Self::alloc(ctx, data.len())?;
        b.copy_from_host(data)?;
        Ok(b)
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn size_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }
    /// The GPU this memory lives on.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr
    }

    fn same_len(&self, other: usize, what: &str) -> Result<()> {
        if other != self.len {
            return Err(Error::InvalidShape(format!(
                "{what}: {other} elements but the device buffer holds {}",
                self.len
            )));
        }
        Ok(())
    }

    /// Copy size_bytes() bytes from `src` to `dst` (`kind`, a `sys::COPY_*`) queued on
    /// `stream`, or without one synchronously (returns when done).
    ///
    /// # Safety
    /// `dst` and `src` hold size_bytes() bytes of the memory `kind` says, alive (and `src`
    /// unmodified, `dst` untouched) until the copy has run; a stream handle is valid by
    /// StreamRef's contract.
    unsafe fn raw_copy(
        &self,
        dst: *mut T,
        src: *const T,
        kind: c_int,
        stream: Option<StreamRef>,
    ) -> Result<()> {
        let what = match (kind, stream.is_some()) {
            (sys::COPY_H2D, false) => "memcpy H2D",
            (sys::COPY_H2D, true) => "memcpy H2D async",
            (sys::COPY_D2H, false) => "memcpy D2H",
            (sys::COPY_D2H, true) => "memcpy D2H async",
            (_, false) => "memcpy D2D",
            (_, true) => "memcpy D2D async",
        };
        let (d, s, bytes) = (
            dst.cast::<c_void>(),
            src.cast::<c_void>(),
            self.size_bytes() as u64,
        );
        // SAFETY: the caller's contract.
        check_status(what, unsafe {
            match stream {
                None => sys::hipfp8_rt_memcpy(d, s, bytes, kind),
                Some(st) => sys::hipfp8_rt_memcpy_async(d, s, bytes, kind, st.0),
            }
        })
    }

    /// Copy `src` (exactly `len` elements) from the host into the buffer; returns when done.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        self.same_len(src.len(), "copy_from_host")?;
        // SAFETY: both ranges hold size_bytes() bytes (lengths checked); synchronous copy.
        unsafe { self.raw_copy(self.ptr, src.as_ptr(), sys::COPY_H2D, None) }
    }

    /// Copy the buffer into `dst` (exactly `len` elements); returns when done.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.same_len(dst.len(), "copy_to_host")?;
        // SAFETY: as copy_from_host; `dst` is exclusively borrowed and T is plain data.
        unsafe { self.raw_copy(dst.as_mut_ptr(), self.ptr, sys::COPY_D2H, None) }
    }

    /// The buffer's contents on the host.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = Vec::with_capacity(self.len);
        // SAFETY: copy_to_host writes all `len` elements before we read any (it fails before
        // writing only on a length mismatch, impossible here), and T is plain data.
        unsafe {
            let spare = std::slice::from_raw_parts_mut(v.as_mut_ptr(), self.len);
            self.copy_to_host(spare)?;
            v.set_len(self.len);
        }
        Ok(v)
    }

    /// Device-to-device copy of a buffer of the same length; returns when done.
    pub fn copy_from(&mut self, src: &DeviceBuffer<T>) -> Result<()> {
        self.same_len(src.len, "copy_from")?;
        // SAFETY: both are live device allocations of size_bytes().
        unsafe { self.raw_copy(self.ptr, src.ptr, sys::COPY_D2D, None) }
    }

    /// Device-to-device copy queued on `stream`. (Dropping either buffer before the copy ran
    /// is harmless: freeing device memory waits for the device.)
    pub fn copy_from_async(
        &mut self,
        src: &DeviceBuffer<T>,
        stream: impl Into<StreamRef>,
    ) -> Result<()> {
        self.same_len(src.len, "copy_from_async")?;
        // SAFETY: both are live device allocations of size_bytes(); the stream handle is valid
        // by StreamRef's contract.
        unsafe { self.raw_copy(self.ptr, src.ptr, sys::COPY_D2D, Some(stream.into())) }
    }

    /// Host-to-device copy queued on `stream`.
    ///
    /// # Safety
    /// `src` must stay alive and unmodified until the copy has run (synchronise `stream` or
    /// an event recorded after it before touching `src`).
    pub unsafe fn copy_from_host_async(
        &mut self,
        src: &[T],
        stream: impl Into<StreamRef>,
    ) -> Result<()> {
        self.same_len(src.len(), "copy_from_host_async")?;
        // SAFETY: lengths checked; the caller keeps `src` alive until the copy ran.
        unsafe { self.raw_copy(self.ptr, src.as_ptr(), sys::COPY_H2D, Some(stream.into())) }
    }

    /// Device-to-host copy queued on `stream`.
    ///
    /// # Safety
    /// `dst` must stay alive and must not be read or written until the copy has run.
    pub unsafe fn copy_to_host_async(
        &self,
        dst: &mut [T],
        stream: impl Into<StreamRef>,
    ) -> Result<()> {
        self.same_len(dst.len(), "copy_to_host_async")?;
        // SAFETY: lengths checked; the caller keeps `dst` alive and untouched until it ran.
        unsafe {
            self.raw_copy(
                dst.as_mut_ptr(),
                self.ptr,
                sys::COPY_D2H,
                Some(stream.into()),
            )
        }
    }

    /// Set every byte to `byte`; returns when done.
    pub fn fill_bytes(&mut self, byte: u8) -> Result<()> {
        // SAFETY: a live allocation of size_bytes().
        check_status("memset", unsafe {
            sys::hipfp8_rt_memset(
                self.ptr as *mut c_void,
                byte as i32,
                self.size_bytes() as u64,
            )
        })
    }

    /// Set every byte to `byte`, queued on `stream`.
    pub fn fill_bytes_async(&mut self, byte: u8, stream: impl Into<StreamRef>) -> Result<()> {
        // SAFETY: a live allocation; freeing waits for the device.
        check_status("memset async", unsafe {
            sys::hipfp8_rt_memset_async(
                self.ptr as *mut c_void,
                byte as i32,
                self.size_bytes() as u64,
                stream.into().0,
            )
        })
    }

    /// Read-only view for an op input.
    pub fn src(&self) -> Src<'_, T> {
        // SAFETY: `len` device elements stay allocated while `self` is borrowed.
        unsafe { Src::from_raw(self.ptr, self.len, Loc::Device) }
    }

    /// Writable view for an op output.
    pub fn dst(&mut self) -> Dst<'_, T> {
        // SAFETY: `len` device elements, exclusively borrowed for the view's life.
        unsafe { Dst::from_raw(self.ptr, self.len, Loc::Device) }
    }

    /// Read-only view of `range`.
    pub fn src_range(&self, range: Range<usize>) -> Result<Src<'_, T>> {
        self.check_range(&range)?;
        // SAFETY: the range lies inside the allocation (checked), borrowed with `self`.
        Ok(unsafe { Src::from_raw(self.ptr.wrapping_add(range.start), range.len(), Loc::Device) })
    }

    /// Writable view of `range`.
    pub fn dst_range(&mut self, range: Range<usize>) -> Result<Dst<'_, T>> {
        self.check_range(&range)?;
        // SAFETY: the range lies inside the allocation (checked), exclusively borrowed.
        Ok(unsafe { Dst::from_raw(self.ptr.wrapping_add(range.start), range.len(), Loc::Device) })
    }

    fn check_range(&self, r: &Range<usize>) -> Result<()> {
        if r.start > r.end || r.end > self.len {
            return Err(Error::InvalidShape(format!(
                "range {r:?} outside a buffer of {}",
                self.len
            )));
        }
        Ok(())
    }
}

impl<T: DeviceCopy> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: we own this allocation; hipFree/cudaFree wait for pending work on it.
            unsafe { sys::hipfp8_rt_free(self.ptr as *mut c_void) };
        }
    }
}

impl<'a> From<&'a DeviceBuffer<bf16>> for HpSrc<'a> {
    fn from(b: &'a DeviceBuffer<bf16>) -> Self {
        HpSrc::Bf16(b.src())
    }
}
impl<'a> From<&'a DeviceBuffer<f32>> for HpSrc<'a> {
    fn from(b: &'a DeviceBuffer<f32>) -> Self {
        HpSrc::F32(b.src())
    }
}

// ---------------------------------------------------------------------------------- self-test kernels

/// The value `hipfp8_selftest_fill_launch` writes at index `i` (murmur3's finaliser of
/// `i * 0x9E3779B9 + seed`, plus the input element).
pub fn selftest_pattern(input: u32, i: u64, seed: u32) -> u32 {
    let mut x = (i as u32).wrapping_mul(0x9E37_79B9).wrapping_add(seed);
    x ^= x >> 16;
    x = x.wrapping_mul(0x85EB_CA6B);
    x ^= x >> 13;
    x = x.wrapping_mul(0xC2B2_AE35);
    x ^= x >> 16;
    input.wrapping_add(x)
}

/// Run the fill self-test kernel: `out[i] = input[i] + pattern(i)` (input optional).
pub fn selftest_fill(
    ctx: &(impl GpuHandle + ?Sized),
    input: Option<&DeviceBuffer<u32>>,
    out: &mut DeviceBuffer<u32>,
    seed: u32,
    stream: impl Into<StreamRef>,
) -> Result<()> {
    let ordinal = require_gpu(ctx, "selftest_fill")?;
    if let Some(i) = input {
        out.same_len(i.len(), "selftest_fill input")?;
    }
    let _g = DeviceGuard::new(ordinal)?;
    let inp = input.map_or(std::ptr::null(), |b| b.as_ptr());
    // SAFETY: `inp` is null or `len` device elements, `out` holds `len` elements; both live
    // until the launch has been queued and freeing waits for the device.
    check_status("selftest_fill", unsafe {
        sys::hipfp8_selftest_fill_launch(
            inp,
            out.as_mut_ptr(),
            out.len() as i64,
            seed,
            stream.into().0,
        )
    })
}

/// Run the wave self-test kernel: (HIPFP8_WAVE as compiled, the device's warpSize).
pub fn selftest_wave(ctx: &(impl GpuHandle + ?Sized)) -> Result<(i32, i32)> {
    let mut buf = DeviceBuffer::<i32>::zeroed(ctx, 2)?;
    let _g = activate(ctx)?;
    // SAFETY: `buf` holds the 2 elements the kernel writes; default stream, synchronous copy below.
    check_status("selftest_wave", unsafe {
        sys::hipfp8_selftest_wave_launch(buf.as_mut_ptr(), std::ptr::null_mut())
    })?;
    let v = buf.to_vec()?;
    Ok((v[0], v[1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_format_of_arch_strings() {
        use Fp8Format::*;
        let cases: &[(&str, Fp8Format)] = &[
            ("gfx940", E4M3FnUz),
            ("gfx941", E4M3FnUz),
            ("gfx942", E4M3FnUz),
            ("gfx942:sramecc+:xnack-", E4M3FnUz),
            ("gfx942:xnack+", E4M3FnUz),
            (" gfx942 ", E4M3FnUz),
            ("GFX942", E4M3FnUz),
            ("gfx950", E4M3Fn),
            ("gfx950:sramecc+:xnack-", E4M3Fn),
            ("gfx90a:sramecc+:xnack-", E4M3Fn),
            ("gfx908", E4M3Fn),
            ("gfx1100", E4M3Fn),
            ("gfx1201", E4M3Fn),
            ("gfx9420", E4M3Fn), // not a prefix match
            ("gfx94", E4M3Fn),
            ("sm_90", E4M3Fn),
            ("sm_89", E4M3Fn),
            ("sm_100", E4M3Fn),
            ("sm_80", E4M3Fn),
            ("cpu", E4M3Fn),
            ("", E4M3Fn),
        ];
        for &(arch, want) in cases {
            assert_eq!(native_format_for_arch(arch), want, "{arch:?}");
            assert_eq!(arch_native_fnuz(arch), want == E4M3FnUz, "{arch:?}");
            let e5 = if want == E4M3FnUz { E5M2FnUz } else { E5M2 };
            assert_eq!(native_e5m2_for_arch(arch), e5, "{arch:?}");
        }
    }

    #[test]
    fn hardware_fp8_of_arch_strings() {
        for a in [
            "gfx940",
            "gfx942:sramecc+:xnack-",
            "gfx950",
            "sm_89",
            "sm_90",
            "sm_90a",
            "sm_100",
            "sm_120",
        ] {
            assert!(arch_has_hw_fp8(a), "{a}");
        }
        for a in ["gfx90a", "gfx1100", "sm_80", "sm_86", "cpu", "", "sm_"] {
            assert!(!arch_has_hw_fp8(a), "{a}");
        }
    }

    #[test]
    fn base_arch_strips_features() {
        assert_eq!(base_arch("gfx942:sramecc+:xnack-"), "gfx942");
        assert_eq!(base_arch("sm_90"), "sm_90");
        assert_eq!(base_arch(""), "");
    }

    #[test]
    fn selftest_pattern_matches_murmur3_finaliser() {
        // Independent check of the constants: fmix32(0) = 0, and fmix32 of
        // 0x9E3779B9 (i = 1, seed 0) computed step by step.
        assert_eq!(selftest_pattern(0, 0, 0), 0);
        let mut x: u32 = 0x9E37_79B9;
        x ^= x >> 16;
        x = x.wrapping_mul(0x85EB_CA6B);
        x ^= x >> 13;
        x = x.wrapping_mul(0xC2B2_AE35);
        x ^= x >> 16;
        assert_eq!(selftest_pattern(0, 1, 0), x);
        assert_eq!(selftest_pattern(5, 1, 0), x.wrapping_add(5));
        // Different seeds give different streams.
        assert_ne!(selftest_pattern(0, 7, 1), selftest_pattern(0, 7, 2));
    }

    #[test]
    fn status_codes_map_to_errors() {
        assert!(check_status("x", 0).is_ok());
        let cases = [
            (sys::NOT_BUILT, Error::BackendUnavailable(String::new())),
            (sys::KSTATUS_INVALID_ENUM, Error::InvalidEnum(String::new())),
            (
                sys::KSTATUS_INVALID_SHAPE,
                Error::InvalidShape(String::new()),
            ),
            (sys::KSTATUS_MISALIGNED, Error::Misaligned(String::new())),
            (sys::KSTATUS_UNSUPPORTED, Error::NotSupported(String::new())),
            (sys::KSTATUS_NULL_POINTER, Error::NullPointer("")),
        ];
        for (code, want) in cases {
            let got = check_status("x", code).unwrap_err();
            let same = std::mem::discriminant(&got) == std::mem::discriminant(&want);
            assert!(same, "status {code}: {got:?}, want {want:?}");
        }
        match check_status("launch", 700) {
            Err(Error::Device { code: 700, msg }) => assert!(msg.starts_with("launch: "), "{msg}"),
            other => panic!("{other:?}"),
        }
    }

    /// hip/kernel_abi.h and sys.rs must agree on every number.
    #[test]
    fn kernel_abi_header_matches_sys() {
        let h = include_str!("../hip/kernel_abi.h");
        let val = |name: &str| -> i32 {
            let line = h
                .lines()
                .find(|l| l.starts_with(&format!("#define {name} ")))
                .unwrap_or_else(|| panic!("{name} missing from kernel_abi.h"));
            let v = line[format!("#define {name} ").len()..]
                .split("//")
                .next()
                .unwrap()
                .trim();
            v.trim_matches(|c| c == '(' || c == ')')
                .parse()
                .unwrap_or_else(|_| panic!("{name}: {v}"))
        };
        assert_eq!(val("HIPFP8_KSTATUS_OK"), sys::KSTATUS_OK);
        assert_eq!(
            val("HIPFP8_KSTATUS_INVALID_ENUM"),
            sys::KSTATUS_INVALID_ENUM
        );
        assert_eq!(
            val("HIPFP8_KSTATUS_INVALID_SHAPE"),
            sys::KSTATUS_INVALID_SHAPE
        );
        assert_eq!(val("HIPFP8_KSTATUS_MISALIGNED"), sys::KSTATUS_MISALIGNED);
        assert_eq!(val("HIPFP8_KSTATUS_UNSUPPORTED"), sys::KSTATUS_UNSUPPORTED);
        assert_eq!(
            val("HIPFP8_KSTATUS_NULL_POINTER"),
            sys::KSTATUS_NULL_POINTER
        );
        assert_eq!(val("HIPFP8_FMT_E4M3FN"), Fp8Format::E4M3Fn as i32);
        assert_eq!(val("HIPFP8_FMT_E5M2"), Fp8Format::E5M2 as i32);
        assert_eq!(val("HIPFP8_FMT_E4M3FNUZ"), Fp8Format::E4M3FnUz as i32);
        assert_eq!(val("HIPFP8_FMT_E5M2FNUZ"), Fp8Format::E5M2FnUz as i32);
        assert_eq!(val("HIPFP8_DTYPE_BF16"), sys::DTYPE_BF16);
        assert_eq!(val("HIPFP8_DTYPE_F32"), sys::DTYPE_F32);
        assert_eq!(val("HIPFP8_COPY_H2D"), sys::COPY_H2D);
        assert_eq!(val("HIPFP8_COPY_D2H"), sys::COPY_D2H);
        assert_eq!(val("HIPFP8_COPY_D2D"), sys::COPY_D2D);
    }

    #[test]
    fn props_struct_layout() {
        // 2 * 256 chars, 6 i32, 4 i64, 2 i32 -- the C++ struct in hip/runtime.hip.
        assert_eq!(
            std::mem::size_of::<sys::hipfp8_device_props>(),
            512 + 24 + 32 + 8
        );
        assert_eq!(
            std::mem::offset_of!(sys::hipfp8_device_props, total_global_mem),
            536
        );
        assert_eq!(
            std::mem::offset_of!(sys::hipfp8_device_props, pci_bus_id),
            568
        );
    }
}
