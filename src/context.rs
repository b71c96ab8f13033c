//! The op-level context: the backend choice (CPU or one GPU), the native FP8 flavour, the
//! format resolution and the view checks every op runs before it writes anything. The op
//! families (`quant`, `cast_transpose`, `mx`, `grouped_gemm`) add their methods to
//! [`Context`] in their own modules, through the shared body in `dispatch.rs`.

use std::ffi::c_void;

use crate::error::{Error, Result};
use crate::format::Fp8Format;
use crate::params::FormatChoice;
use crate::runtime::{
    self, Device, DeviceGuard, GpuHandle, arch_native_fnuz, built_backend, gpu_built,
};
use crate::validate::check_view;
use crate::view::{Dst, HpSrc, Loc, Src};

/// Which backend a context runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    Cpu,
    Gpu,
}

/// Owns the backend choice and the native FP8 flavour. Cheap to create for the CPU.
#[derive(Debug)]
pub struct Context {
    backend: BackendKind,
    /// true when the device's native FP8 is FNUZ (gfx940/941/942).
    native_fnuz: bool,
    /// Human-readable device name.
    device_name: String,
    /// Architecture string ("cpu", "gfx942", "sm_90", ...).
    arch: String,
    /// GPU ordinal for the GPU backend (see `runtime.rs`), None for the CPU.
    ordinal: Option<usize>,
    /// Device scratch of the GPU kernels that need one (see `workspace.rs`).
    pub(crate) workspace: crate::workspace::WorkspaceCache,
}

impl Context {
    /// The CPU backend; native format OCP.
    pub fn cpu() -> Context {
        Context {
            backend: BackendKind::Cpu,
            native_fnuz: false,
            device_name: format!("host CPU ({} threads)", rayon::current_num_threads()),
            arch: "cpu".into(),
            ordinal: None,
            workspace: Default::default(),
        }
    }

    /// A GPU context; made by `Context::gpu` (below) from the device's properties.
    pub(crate) fn new_gpu(
        ordinal: usize,
        device_name: String,
        arch: String,
        native_fnuz: bool,
    ) -> Context {
        let workspace = Default::default();
        Context {
            backend: BackendKind::Gpu,
            native_fnuz,
            device_name,
            arch,
            ordinal: Some(ordinal),
            workspace,
        }
    }

    /// The GPU ordinal of a GPU context.
    pub fn ordinal(&self) -> Option<usize> {
        self.ordinal
    }

    /// The CPU backend pretending to be a device whose native FP8 is FNUZ (for testing
    /// and for preparing data for an MI300 on the host).
    pub fn cpu_with_fnuz_native(fnuz: bool) -> Context {
        Context {
            native_fnuz: fnuz,
            ..Context::cpu()
        }
    }

    pub fn backend(&self) -> BackendKind {
        self.backend
    }
    pub fn device_name(&self) -> &str {
        &self.device_name
    }
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The device's native E4M3 flavour.
    pub fn native_format(&self) -> Fp8Format {
        if self.native_fnuz {
            Fp8Format::E4M3FnUz
        } else {
            Fp8Format::E4M3Fn
        }
    }

    /// Resolve a [`FormatChoice`] for this context.
    pub fn resolve(&self, f: FormatChoice) -> Fp8Format {
        match f {
            FormatChoice::Auto => self.native_format(),
            FormatChoice::AutoE5M2 => {
                if self.native_fnuz {
                    Fp8Format::E5M2FnUz
                } else {
                    Fp8Format::E5M2
                }
            }
            FormatChoice::Exact(f) => f,
        }
    }

    /// The memory kind this context's ops take.
    pub fn loc(&self) -> Loc {
        match self.backend {
            BackendKind::Cpu => Loc::Host,
            BackendKind::Gpu => Loc::Device,
        }
    }

    // ---- validation helpers shared by all ops -------------------------------------------

    pub(crate) fn check_src<T>(
        &self,
        what: &'static str,
        s: &Src<'_, T>,
        needed: usize,
    ) -> Result<()> {
        check_view(
            self.loc(),
            what,
            s.as_ptr() as *const u8,
            s.loc(),
            s.len(),
            needed,
            false,
        )
    }
    pub(crate) fn check_hp(&self, what: &'static str, s: &HpSrc<'_>, needed: usize) -> Result<()> {
        match s {
            HpSrc::Bf16(v) => self.check_src(what, v, needed),
            HpSrc::F32(v) => self.check_src(what, v, needed),
        }
    }
    pub(crate) fn check_dst<T>(
        &self,
        what: &'static str,
        d: &mut Dst<'_, T>,
        needed: usize,
    ) -> Result<()> {
        let loc = d.loc();
        let len = d.len();
        check_view(
            self.loc(),
            what,
            d.as_mut_ptr() as *const u8,
            loc,
            len,
            needed,
            true,
        )
    }
}

impl Context {
    /// A context on GPU `ordinal`. Fails with [`Error::BackendUnavailable`] when the library
    /// was built without a GPU backend or the device is not present. The native FP8 flavour
    /// comes from the device's architecture ([`native_format_for_arch`]).
    pub fn gpu(ordinal: usize) -> Result<Context> {
        if !gpu_built() {
            return Err(Error::BackendUnavailable(
                "hipfp8 was built without a GPU backend (no hipcc/nvcc found, or HIPFP8_BACKEND=cpu)".into(),
            ));
        }
        let d = Device::get(ordinal)?;
        Ok(Context::new_gpu(
            ordinal,
            format!("{} ({})", d.name, d.arch),
            d.arch.clone(),
            arch_native_fnuz(&d.arch),
        ))
    }

    /// GPU 0 when this build has a GPU backend and a GPU is present, else the CPU backend.
    pub fn best() -> Context {
        Context::gpu(0).unwrap_or_else(|_| Context::cpu())
    }

    /// The properties of this context's GPU (None for the CPU backend).
    pub fn device(&self) -> Option<Result<Device>> {
        self.ordinal().map(Device::get)
    }

    /// For GPU contexts: make this context's device current until the guard drops.
    pub(crate) fn activate(&self) -> Result<Option<DeviceGuard>> {
        runtime::activate(self)
    }

    /// Check that raw pointers passed to a GPU op are device memory of this context's
    /// device (see [`runtime::check_device_pointers`]); nothing to check on the CPU.
    /// Pointers the C call being served already checked ([`VerifiedPointers`]) are not asked
    /// of the runtime again.
    pub fn check_device_pointers(&self, ptrs: &[(&'static str, *const c_void)]) -> Result<()> {
        let Some(o) = self.ordinal() else {
            return Ok(());
        };
        if ptrs.len() > runtime::MAX_CHECKED {
            return runtime::check_device_pointers(o, ptrs);
        }
        let mut left = [("", std::ptr::null()); runtime::MAX_CHECKED];
        let mut n = 0;
        for &(what, p) in ptrs {
            if !p.is_null() && !VerifiedPointers::contains(o, p) {
                left[n] = (what, p);
                n += 1;
            }
        }
        runtime::check_device_pointers(o, &left[..n])
    }
}

/// The device pointers the C call now being served on this thread has already checked
/// (src/ffi/args.rs: `Views` checks every buffer of a call when it makes the views), so the
/// op body does not ask the runtime about the same pointer twice. An entry is (GPU ordinal,
/// address): "this address was device memory of this GPU earlier in this call". It is valid
/// for the rest of that call only: `Views` records its pointers and removes them when it is
/// dropped (at the end of the call, also when it unwinds), and nothing outside a C call
/// records any. Memory freed and reused while the call runs would break the caller's contract
/// (buffers stay valid during the call) in the same way with or without this record. Fixed
/// capacity, no allocation: a pointer beyond it is simply not recorded (and checked again).
pub(crate) struct VerifiedPointers;

const VERIFIED_CAP: usize = 32;

thread_local! {
    static VERIFIED: std::cell::RefCell<(usize, [(usize, usize); VERIFIED_CAP])> =
        const { std::cell::RefCell::new((0, [(0, 0); VERIFIED_CAP])) };
}

impl VerifiedPointers {
    /// The number of entries now (give it to [`VerifiedPointers::truncate`] to drop what is
    /// recorded after this point).
    pub(crate) fn mark() -> usize {
        VERIFIED.with_borrow(|v| v.0)
    }
    /// Forget the entries recorded after `mark`.
    pub(crate) fn truncate(mark: usize) {
        VERIFIED.with_borrow_mut(|v| v.0 = v.0.min(mark));
    }
    /// Record that `p` is device memory of GPU `ordinal` (checked by the caller, just now).
    pub(crate) fn record(ordinal: usize, p: *const c_void) {
        VERIFIED.with_borrow_mut(|v| {
            if v.0 < VERIFIED_CAP {
                v.1[v.0] = (ordinal, p.addr());
                v.0 += 1;
            }
        });
    }
    fn contains(ordinal: usize, p: *const c_void) -> bool {
        VERIFIED.with_borrow(|v| v.1[..v.0].contains(&(ordinal, p.addr())))
    }
}

impl GpuHandle for Context {
    fn gpu_ordinal(&self) -> Option<usize> {
        self.ordinal
    }
}

// ---------------------------------------------------------------------------------- test support

/// For tests: the GPU context to run on, or `None` after printing `HIPFP8_SKIP <test>: why`
/// when this build or machine has no GPU. With `HIPFP8_REQUIRE_GPU=1` (set by
/// scripts/run-gpu-bundle.sh on the GPU machine) a missing GPU panics: there a skip would
/// hide a broken build. Prints `HIPFP8_GPU_TEST <test> on <device>` when it returns a context,
/// so a runner can count the tests that really ran on a GPU.
#[doc(hidden)]
pub fn gpu_for_tests(test: &str) -> Option<Context> {
    let require = std::env::var("HIPFP8_REQUIRE_GPU").is_ok_and(|v| v == "1");
    let why = if !gpu_built() {
        "library built without a GPU backend".to_string()
    } else {
        match Device::count() {
            Ok(0) => "no GPU visible".to_string(),
            Ok(_) => match Context::gpu(0) {
                Ok(ctx) => {
                    println!("HIPFP8_GPU_TEST {test} on {}", ctx.device_name());
                    return Some(ctx);
                }
                Err(e) => panic!("{test}: a GPU is visible but no context could be made: {e}"),
            },
            // A GPU build whose runtime fails to count devices is broken, not absent.
            Err(e) => panic!("{test}: device discovery failed: {e}"),
        }
    };
    if require {
        panic!(
            "{test}: HIPFP8_REQUIRE_GPU=1 but {why} (backend {})",
            built_backend()
        );
    }
    println!("HIPFP8_SKIP {test}: {why}");
    None
}

/// For tests: print a skip line (a kernel not in this build). Under HIPFP8_REQUIRE_GPU=1 this
/// still skips, but scripts/run-gpu-bundle.sh lists and counts it; it is never a pass.
#[doc(hidden)]
pub fn skip_test(test: &str, why: &str) {
    println!("HIPFP8_SKIP {test}: {why}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{
        DeviceBuffer, Event, Stream, built_launchers, built_targets, has_launcher,
    };

    #[test]
    fn cpu_context_refuses_device_objects() {
        let cpu = Context::cpu();
        assert!(matches!(
            DeviceBuffer::<u8>::alloc(&cpu, 4),
            Err(Error::WrongLocation(_))
        ));
        assert!(matches!(Stream::new(&cpu), Err(Error::WrongLocation(_))));
        assert!(matches!(Event::new(&cpu), Err(Error::WrongLocation(_))));
        assert!(cpu.device().is_none());
    }

    #[test]
    fn build_facts_are_consistent() {
        match built_backend() {
            "cpu" => {
                assert!(!gpu_built());
                assert_eq!(built_launchers().count(), 0);
                assert_eq!(Device::count().unwrap(), 0);
                assert!(matches!(Context::gpu(0), Err(Error::BackendUnavailable(_))));
                assert_eq!(Context::best().backend(), BackendKind::Cpu);
            }
            "rocm" | "cuda" => {
                assert!(gpu_built());
                // The runtime shim and the self-test kernels are always part of a GPU build.
                for l in [
                    "hipfp8_rt_device_count",
                    "hipfp8_rt_malloc",
                    "hipfp8_selftest_fill_launch",
                ] {
                    assert!(has_launcher(l), "{l} not built");
                }
                assert!(!built_targets().is_empty());
            }
            other => panic!("unknown backend {other}"),
        }
    }
}
