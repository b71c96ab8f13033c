//! The C ABI on a GPU context: creation and queries, and ops on device pointers with a
//! caller's stream, bit-identical to the same C calls on the CPU backend.
//!
//! Each test starts with `gpu_for_tests`: without a GPU build or device it prints
//! `HIPFP8_SKIP <test>: why` and returns (HIPFP8_REQUIRE_GPU=1 makes that a failure); with a
//! GPU every check must hold.

use std::ffi::CStr;
use std::mem::size_of;
use std::ptr::null_mut;

use hipfp8::bf16;
use hipfp8::device::{DeviceBuffer, Stream, gpu_for_tests, has_launcher};
use hipfp8::ffi::*;

use hipfp8_status::*;

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated, valid until the next hipfp8 call on this thread.
    unsafe { CStr::from_ptr(hipfp8_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

struct CCtx(*mut hipfp8_context);

impl CCtx {
    fn create(backend: hipfp8_backend) -> CCtx {
        let mut c = null_mut();
        let st = hipfp8_context_create(backend as u32, 0, &mut c);
        assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());
        CCtx(c)
    }
}

impl Drop for CCtx {
    fn drop(&mut self) {
        hipfp8_context_destroy(self.0);
    }
}

fn query_str(
    f: extern "C" fn(
        *const hipfp8_context,
        *mut std::ffi::c_char,
        usize,
        *mut usize,
    ) -> hipfp8_status,
    c: &CCtx,
) -> String {
    let mut buf = [0 as std::ffi::c_char; 256];
    assert_eq!(
        f(c.0, buf.as_mut_ptr(), buf.len(), null_mut()),
        HIPFP8_STATUS_SUCCESS
    );
    // SAFETY: the call wrote a NUL-terminated string into buf.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn exact(f: hipfp8::Fp8Format) -> hipfp8_format {
    use hipfp8::Fp8Format as F;
    match f {
        F::E4M3Fn => hipfp8_format::HIPFP8_FORMAT_E4M3FN,
        F::E5M2 => hipfp8_format::HIPFP8_FORMAT_E5M2,
        F::E4M3FnUz => hipfp8_format::HIPFP8_FORMAT_E4M3FNUZ,
        F::E5M2FnUz => hipfp8_format::HIPFP8_FORMAT_E5M2FNUZ,
    }
}

#[test]
fn gpu_context_through_c_abi() {
    let Some(rust) = gpu_for_tests("gpu_context_through_c_abi") else {
        return;
    };
    for backend in [
        hipfp8_backend::HIPFP8_BACKEND_GPU,
        hipfp8_backend::HIPFP8_BACKEND_AUTO,
    ] {
        let c = CCtx::create(backend);
        let mut b = hipfp8_backend::HIPFP8_BACKEND_CPU;
        assert_eq!(hipfp8_context_backend(c.0, &mut b), HIPFP8_STATUS_SUCCESS);
        assert_eq!(
            b,
            hipfp8_backend::HIPFP8_BACKEND_GPU,
            "{backend:?} should pick the GPU"
        );
        let arch = query_str(hipfp8_context_arch, &c);
        let name = query_str(hipfp8_context_device_name, &c);
        assert_eq!(arch, rust.arch());
        assert_eq!(name, rust.device_name());
        let mut f = hipfp8_format::HIPFP8_FORMAT_AUTO;
        assert_eq!(
            hipfp8_context_native_format(c.0, &mut f),
            HIPFP8_STATUS_SUCCESS
        );
        assert_eq!(f, exact(rust.native_format()));
        println!("C ABI GPU context: {name} ({arch}), native format {f:?}");
    }
    // A device that does not exist is a status, not a crash.
    let mut c = null_mut();
    let st = hipfp8_context_create(hipfp8_backend::HIPFP8_BACKEND_GPU as u32, 4096, &mut c);
    assert_ne!(st, HIPFP8_STATUS_SUCCESS);
    assert!(c.is_null());
    println!("GPU 4096: {st:?}: {}", last_error());
}

/// Deterministic bf16 test data with special values.
fn data(m: usize, k: usize) -> Vec<bf16> {
    let mut s = 0x1234_5678u32;
    let mut v: Vec<bf16> = (0..m * k)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            bf16::from_f32(((s >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 7.0)
        })
        .collect();
    v[..k].fill(bf16::ZERO); // an all-zero row
    v[k + 3] = bf16::MAX;
    v[2 * k + 1] = bf16::NAN;
    v[3 * k + 2] = bf16::INFINITY;
    v[4 * k..5 * k].fill(bf16::from_f32(1e-39)); // subnormal row
    v
}

#[test]
fn rowwise_2d_on_device_pointers_matches_cpu() {
    let Some(rust) = gpu_for_tests("rowwise_2d_on_device_pointers_matches_cpu") else {
        return;
    };
    if !has_launcher("hipfp8_rowwise_2d_launch") {
        println!(
            "HIPFP8_SKIP rowwise_2d_on_device_pointers_matches_cpu: the rowwise_2d kernel is not in this build"
        );
        return;
    }
    let gpu = CCtx::create(hipfp8_backend::HIPFP8_BACKEND_GPU);
    // The CPU oracle resolves AUTO like the GPU does (FNUZ on gfx942, OCP elsewhere).
    let mut native = hipfp8_format::HIPFP8_FORMAT_AUTO;
    assert_eq!(
        hipfp8_context_native_format(gpu.0, &mut native),
        HIPFP8_STATUS_SUCCESS
    );
    let mut c = null_mut();
    assert_eq!(
        hipfp8_context_create_cpu(native as u32, &mut c),
        HIPFP8_STATUS_SUCCESS
    );
    let cpu = CCtx(c);
    let stream = Stream::new(&rust).unwrap();
    let (m, k) = (37usize, 515usize);
    let x = data(m, k);
    let xd = DeviceBuffer::from_host(&rust, &x).unwrap();
    for format in 0..6u32 {
        for flags in [0, hipfp8_flag::HIPFP8_FLAG_POW2_SCALES as u32] {
            let desc = hipfp8_cast_2d_desc {
                size: size_of::<hipfp8_cast_2d_desc>(),
                input_dtype: hipfp8_dtype::HIPFP8_DTYPE_BF16 as u32,
                format,
                flags,
                m,
                k,
            };
            let (mut out, mut scales) = (vec![0u8; m * k], vec![0f32; m]);
            let st = hipfp8_rowwise_2d(
                cpu.0,
                &desc,
                x.as_ptr().cast(),
                x.len(),
                out.as_mut_ptr(),
                out.len(),
                scales.as_mut_ptr(),
                scales.len(),
                null_mut(),
            );
            assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());

            let mut od = DeviceBuffer::<u8>::from_host(&rust, &vec![0xA5u8; m * k]).unwrap();
            let mut sd = DeviceBuffer::<f32>::alloc(&rust, m).unwrap();
            let st = hipfp8_rowwise_2d(
                gpu.0,
                &desc,
                xd.as_ptr().cast(),
                xd.len(),
                od.as_mut_ptr(),
                od.len(),
                sd.as_mut_ptr(),
                sd.len(),
                stream.raw().cast(),
            );
            assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());
            stream.synchronize().unwrap();
            let (go, gs) = (od.to_vec().unwrap(), sd.to_vec().unwrap());
            let bad = out.iter().zip(&go).filter(|(a, b)| a != b).count();
            assert_eq!(
                bad, 0,
                "format {format} flags {flags}: {bad} data bytes differ between GPU and CPU"
            );
            let gs_bits: Vec<u32> = gs.iter().map(|s| s.to_bits()).collect();
            let cs_bits: Vec<u32> = scales.iter().map(|s| s.to_bits()).collect();
            assert_eq!(
                gs_bits, cs_bits,
                "format {format} flags {flags}: scales differ"
            );
        }
    }
    println!(
        "rowwise_2d through the C ABI on {}: 12 variants bit-identical to the CPU",
        rust.device_name()
    );
}
