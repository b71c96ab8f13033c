//! The C ABI's stream-bound cast workspace: the size queries (0 on a CPU context, the Rust
//! queries' values on a GPU context) and `hipfp8_bind_stream_workspace` /
//! `hipfp8_unbind_stream_workspace` (argument errors, the CPU refusal, binding device memory).

use std::ptr::null_mut;

use hipfp8::ffi::*;
use hipfp8_status::*;

mod support;
use support::ffi_ops::{Ctx, last_error};

type Query = Box<dyn Fn(*const hipfp8_context, *mut usize) -> hipfp8_status>;

/// Every size query with one set of arguments, by name.
fn queries() -> Vec<(&'static str, Query)> {
    let t = hipfp8_scaling::HIPFP8_SCALING_ROWWISE as u32;
    vec![
        (
            "hipfp8_colwise_workspace_size",
            Box::new(|c, b| hipfp8_colwise_workspace_size(c, 8, 4096, 2048, b)),
        ),
        (
            "hipfp8_cast_transpose_workspace_size",
            Box::new(move |c, b| hipfp8_cast_transpose_workspace_size(c, 4096, 4096, t, b)),
        ),
        (
            "hipfp8_grouped_rows_workspace_size",
            Box::new(|c, b| hipfp8_grouped_rows_workspace_size(c, 257, b)),
        ),
        (
            "hipfp8_moe_workspace_size",
            Box::new(|c, b| hipfp8_moe_workspace_size(c, 33, b)),
        ),
    ]
}

#[test]
fn cpu_context_needs_no_scratch_and_refuses_a_binding() {
    let ctx = Ctx::cpu();
    for (name, q) in queries() {
        let mut bytes = usize::MAX;
        assert_eq!(q(ctx.0, &mut bytes), HIPFP8_STATUS_SUCCESS, "{name}");
        assert_eq!(bytes, 0, "{name}: a CPU context needs no device scratch");
        assert_eq!(q(ctx.0, null_mut()), HIPFP8_STATUS_NULL_POINTER, "{name}");
        assert!(last_error().starts_with(name), "{name}: `{}`", last_error());
        let mut b = 7usize;
        let bad = 0x1234usize as *const hipfp8_context;
        assert_eq!(q(bad, &mut b), HIPFP8_STATUS_INVALID_HANDLE, "{name}");
        assert_eq!(b, 7, "{name}: written on failure");
    }
    let mut b = 7usize;
    assert_eq!(
        hipfp8_cast_transpose_workspace_size(ctx.0, 64, 64, 9, &mut b),
        HIPFP8_STATUS_INVALID_ENUM
    );
    assert_eq!(b, 7);
    let mut word = 0u64;
    let p = (&mut word as *mut u64).cast();
    assert_eq!(
        hipfp8_bind_stream_workspace(ctx.0, null_mut(), p, 8),
        HIPFP8_STATUS_WRONG_LOCATION
    );
    assert!(last_error().starts_with("hipfp8_bind_stream_workspace"));
    assert_eq!(
        hipfp8_bind_stream_workspace(ctx.0, null_mut(), null_mut(), 8),
        HIPFP8_STATUS_NULL_POINTER
    );
    assert_eq!(
        hipfp8_unbind_stream_workspace(ctx.0, null_mut()),
        HIPFP8_STATUS_SUCCESS
    );
}

#[test]
fn gpu_context_sizes_match_rust_and_binding_takes_device_memory() {
    use hipfp8::device::{DeviceBuffer, Stream, gpu_for_tests};
    let Some(rust) = gpu_for_tests("gpu_context_sizes_match_rust_and_binding_takes_device_memory")
    else {
        return;
    };
    let mut c = null_mut();
    let st = hipfp8_context_create(hipfp8_backend::HIPFP8_BACKEND_GPU as u32, 0, &mut c);
    assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());
    let ctx = Ctx(c);
    let want = [
        rust.colwise_workspace_size(8, 4096, 2048).unwrap(),
        rust.cast_transpose_workspace_size(4096, 4096, hipfp8::Scaling::Rowwise)
            .unwrap(),
        rust.grouped_scratch_size(257).unwrap(),
        rust.moe_workspace_size(33).unwrap(),
    ];
    let mut need = 0;
    for ((name, q), w) in queries().into_iter().zip(want) {
        let mut bytes = 0usize;
        assert_eq!(
            q(ctx.0, &mut bytes),
            HIPFP8_STATUS_SUCCESS,
            "{name}: {}",
            last_error()
        );
        assert_eq!(bytes, w, "{name}: C and Rust disagree");
        need = need.max(bytes);
    }
    assert!(need > 0, "the column casts need scratch on a GPU");
    let stream = Stream::new_non_blocking(&rust).unwrap();
    let ws = DeviceBuffer::<u8>::zeroed(&rust, need).unwrap();
    let s = stream.handle().0.cast();
    assert_eq!(
        hipfp8_bind_stream_workspace(ctx.0, s, ws.as_ptr() as *mut _, need),
        HIPFP8_STATUS_SUCCESS,
        "{}",
        last_error()
    );
    let mut host = 0u64;
    assert_eq!(
        hipfp8_bind_stream_workspace(ctx.0, s, (&mut host as *mut u64).cast(), 8),
        HIPFP8_STATUS_WRONG_LOCATION,
        "host memory bound as device scratch"
    );
    assert_eq!(
        hipfp8_unbind_stream_workspace(ctx.0, s),
        HIPFP8_STATUS_SUCCESS
    );
    println!("HIPFP8_GPU_CHECK C workspace queries == Rust ({need} bytes at most), bind/unbind");
}
