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

mod support;
use support::ffi_ops::*;

/// Every export of the header is exercised by the matrix (a new op without a row fails here).
#[test]
fn matrix_covers_every_op_export() {
    // CARGO_MANIFEST_DIR at run time: a GPU test bundle carries the sources elsewhere.
    let root =
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    let header = std::fs::read_to_string(format!("{root}/include/hipfp8.h")).unwrap();
    let names: std::collections::BTreeSet<&str> = all_ops().iter().map(|o| o.name).collect();
    for line in header
        .lines()
        .filter(|l| l.starts_with("hipfp8_status hipfp8_"))
    {
        let f = &line["hipfp8_status ".len()..line.find('(').unwrap()];
        if f.starts_with("hipfp8_context_")
            || f.ends_with("_workspace_size")
            || f.ends_with("_stream_workspace")
            || f.ends_with("_plan")
            // The MoE recipe calls take a weight-cache handle and byte buffers, not one
            // descriptor's op buffers: tests/recipe_cpu.rs (the checks behind them) and
            // ffi_examples/06_moe_experts_recipe.c (statuses through the C ABI).
            || f.starts_with("hipfp8_moe_experts_")
            || f.starts_with("hipfp8_grouped_linear_")
            || f.starts_with("hipfp8_weight_cache_")
        {
            // no descriptor: rows of their own below (the cast workspace queries and the
            // stream binding in tests/ffi_workspace.rs)
            continue;
        }
        assert!(
            names.contains(f),
            "{f} is exported but not in the bad-input matrix"
        );
    }
}

// ---- sanity: every case is valid as built ---------------------------------------------------

#[test]
fn valid_calls_succeed_and_write() {
    let ctx = Ctx::cpu();
    // Zero inputs as built, and the random inputs (with NaN/Inf/subnormals) of the GPU tests.
    let random = all_ops().into_iter().enumerate().map(|(idx, mut op)| {
        for (i, b) in op.bufs.iter_mut().enumerate() {
            b.fill_random((idx * 31 + i) as u32);
        }
        op
    });
    for mut op in all_ops().into_iter().chain(random) {
        assert_eq!(
            op.invoke(ctx.0),
            HIPFP8_STATUS_SUCCESS,
            "{}: {}",
            op.name,
            last_error()
        );
        assert_eq!(last_error(), "");
        for b in op.bufs.iter().filter(|b| b.output) {
            assert!(!b.untouched(), "{}: `{}` not written", op.name, b.name);
        }
    }
}

// ---- the rows --------------------------------------------------------------------------------

#[test]
fn null_context() {
    for mut op in all_ops() {
        let st = op.invoke(null());
        op.expect_fail("null context", st, HIPFP8_STATUS_INVALID_HANDLE, &["NULL"]);
    }
}

#[test]
fn destroyed_context() {
    let mut c = null_mut();
    assert_eq!(hipfp8_context_create(1, 0, &mut c), HIPFP8_STATUS_SUCCESS);
    assert_eq!(hipfp8_context_destroy(c), HIPFP8_STATUS_SUCCESS);
    for mut op in all_ops() {
        let st = op.invoke(c);
        op.expect_fail(
            "destroyed context",
            st,
            HIPFP8_STATUS_INVALID_HANDLE,
            &["not a live context"],
        );
    }
    // Destroying twice is detected too, and so is a pointer that never was a context.
    assert_eq!(hipfp8_context_destroy(c), HIPFP8_STATUS_INVALID_HANDLE);
    assert!(last_error().contains("not a live context"));
    let mut not_a_context = 0u64;
    let fake = (&raw mut not_a_context).cast::<hipfp8_context>();
    for mut op in all_ops() {
        let st = op.invoke(fake);
        op.expect_fail(
            "made-up handle",
            st,
            HIPFP8_STATUS_INVALID_HANDLE,
            &["not a live context"],
        );
    }
    assert_eq!(not_a_context, 0);
    // The query functions check the handle the same way.
    let mut fmt = hipfp8_format::HIPFP8_FORMAT_E5M2;
    assert_eq!(
        hipfp8_context_native_format(c, &mut fmt),
        HIPFP8_STATUS_INVALID_HANDLE
    );
    assert_eq!(fmt, hipfp8_format::HIPFP8_FORMAT_E5M2);
}

#[test]
fn null_descriptor() {
    let ctx = Ctx::cpu();
    for mut op in all_ops() {
        let st = op.invoke_with(ctx.0, null());
        op.expect_fail(
            "null descriptor",
            st,
            HIPFP8_STATUS_NULL_POINTER,
            &["`desc`"],
        );
    }
}

#[test]
fn null_pointer() {
    let ctx = Ctx::cpu();
    for op in all_ops() {
        for i in 0..op.bufs.len() {
            let mut o = op.clone();
            o.bufs[i].null = true;
            let name = o.bufs[i].name;
            let st = o.invoke(ctx.0);
            o.expect_fail(
                "null pointer",
                st,
                HIPFP8_STATUS_NULL_POINTER,
                &[&format!("`{name}`")],
            );
        }
    }
}

#[test]
fn wrong_descriptor_size() {
    let ctx = Ctx::cpu();
    for op in all_ops() {
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
    for op in all_ops() {
        // The one descriptor without an enum: hipfp8_scale_reciprocal_desc (size, n).
        assert!(!op.enum_fields.is_empty() || op.name == "hipfp8_scale_reciprocal");
        for &(field, off) in &op.enum_fields {
            for bad in [6u32, 0x8000_0000, u32::MAX] {
                let mut o = op.clone();
                o.set_desc_u32(off, bad);
                let st = o.invoke(ctx.0);
                o.expect_fail(
                    "unknown enum",
                    st,
                    HIPFP8_STATUS_INVALID_ENUM,
                    &[field, &bad.to_string()],
                );
            }
        }
        if let Some(off) = op.flags_field {
            let mut o = op.clone();
            o.set_desc_u32(off, 0x10 | hipfp8_flag::HIPFP8_FLAG_POW2_SCALES as u32);
            let st = o.invoke(ctx.0);
            o.expect_fail(
                "unknown flag bit",
                st,
                HIPFP8_STATUS_INVALID_ENUM,
                &["flags", "0x10"],
            );
        }
    }
}

/// HIPFP8_FLAG_DEQUANT_SCALES: the fused MoE casts take it (the valid problem runs), every
/// other op with a `flags` field refuses it with NOT_SUPPORTED and writes nothing.
#[test]
fn dequant_scales_flag_only_on_the_moe_casts() {
    let ctx = Ctx::cpu();
    let mut taken = Vec::new();
    for op in all_ops() {
        let Some(off) = op.flags_field else {
            assert!(
                !op.dequant_scales,
                "{}: dequant scales without flags",
                op.name
            );
            continue;
        };
        let mut o = op.clone();
        o.set_desc_u32(off, hipfp8_flag::HIPFP8_FLAG_DEQUANT_SCALES as u32);
        let st = o.invoke(ctx.0);
        if op.dequant_scales {
            assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}: {}", op.name, last_error());
            taken.push(op.name);
        } else {
            o.expect_fail(
                "dequant scales",
                st,
                HIPFP8_STATUS_NOT_SUPPORTED,
                &["HIPFP8_FLAG_DEQUANT_SCALES", "hipfp8_moe_"],
            );
        }
    }
    taken.sort();
    taken.dedup();
    let want = [
        "hipfp8_moe_act_dual",
        "hipfp8_moe_combine_bwd_dual",
        "hipfp8_moe_dispatch_dual",
        "hipfp8_moe_swiglu_bwd_quant",
        "hipfp8_moe_swiglu_quant",
        "hipfp8_moe_weights_dual",
    ];
    assert_eq!(taken, want);
    // Enum parameters of the context functions.
    let mut c = null_mut();
    assert_eq!(
        hipfp8_context_create(3, 0, &mut c),
        HIPFP8_STATUS_INVALID_ENUM
    );
    assert!(c.is_null(), "out-parameter written on failure");
    assert!(last_error().contains("backend = 3"));
    assert_eq!(
        hipfp8_context_create_cpu(77, &mut c),
        HIPFP8_STATUS_INVALID_ENUM
    );
    assert!(c.is_null());
    let mut f = hipfp8_format::HIPFP8_FORMAT_E5M2;
    assert_eq!(
        hipfp8_context_resolve_format(ctx.0, 6, &mut f),
        HIPFP8_STATUS_INVALID_ENUM
    );
    assert_eq!(f, hipfp8_format::HIPFP8_FORMAT_E5M2);
}

#[test]
fn zero_dims() {
    let ctx = Ctx::cpu();
    for op in all_ops() {
        for &off in &op.reduced {
            let mut o = op.clone();
            o.set_desc_usize(off, 0);
            let st = o.invoke(ctx.0);
            o.expect_fail(
                "zero reduced dim",
                st,
                HIPFP8_STATUS_INVALID_SHAPE,
                &["must be > 0"],
            );
        }
        // Every other dimension may be 0: the call succeeds (all-zero offsets stay valid).
        for &off in op
            .product
            .iter()
            .filter(|&&off| !op.reduced.contains(&off) && !op.linked.contains(&off))
        {
            let mut o = op.clone();
            o.set_desc_usize(off, 0);
            if let Some((b, _)) = o.offs {
                o.buf(b).set_i32(&[0, 0, 0]);
            }
            assert_eq!(
                o.invoke(ctx.0),
                HIPFP8_STATUS_SUCCESS,
                "{}: {}",
                o.name,
                last_error()
            );
        }
    }
    // With nothing to write, NULL (count 0) buffers are fine.
    let mut d = hipfp8_cast_2d_desc {
        size: size_of::<hipfp8_cast_2d_desc>(),
        input_dtype: 0,
        format: 0,
        flags: 0,
        m: 0,
        k: 8,
    };
    let st = hipfp8_rowwise_2d(ctx.0, &d, null(), 0, null_mut(), 0, null_mut(), 0, NS);
    assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());
    d.m = 1;
    let st = hipfp8_rowwise_2d(ctx.0, &d, null(), 0, null_mut(), 0, null_mut(), 0, NS);
    assert_eq!(st, HIPFP8_STATUS_NULL_POINTER, "{}", last_error());
}

#[test]
fn huge_dims_overflow() {
    let ctx = Ctx::cpu();
    for op in all_ops() {
        if !op.product.is_empty() {
            let mut o = op.clone();
            for &off in &op.product {
                o.set_desc_usize(off, usize::MAX / 2 + 1);
            }
            let st = o.invoke(ctx.0);
            o.expect_fail("huge dims", st, HIPFP8_STATUS_SIZE_OVERFLOW, &["overflows"]);
        }
        // A count whose byte size exceeds the address space is refused before any view is
        // made from it. (Byte buffers are skipped: isize::MAX one-byte elements still pass
        // that check, and a slice of them would be undefined behaviour in this test.)
        for i in 0..op.bufs.len() {
            if op.bufs[i].elem == 1 {
                continue;
            }
            let mut o = op.clone();
            o.bufs[i].len = usize::MAX / 2;
            let name = o.bufs[i].name;
            let st = o.invoke(ctx.0);
            o.expect_fail(
                "huge count",
                st,
                HIPFP8_STATUS_SIZE_OVERFLOW,
                &[&format!("`{name}`"), "address space"],
            );
        }
    }
}

#[test]
fn misaligned_pointers() {
    let ctx = Ctx::cpu();
    for op in all_ops() {
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
                &[
                    &format!("`{name}`"),
                    &format!("{}-byte aligned", o.bufs[i].elem),
                ],
            );
        }
        // The descriptor itself must be aligned too.
        let mut o = op.clone();
        let mut shifted = vec![0u8; o.desc_size + 8];
        // SAFETY: copying the descriptor bytes into a larger byte buffer at offset 1.
        unsafe {
            std::ptr::copy_nonoverlapping(
                o.desc.as_ptr().cast::<u8>(),
                shifted.as_mut_ptr().add(1),
                o.desc_size,
            )
        };
        // SAFETY: offset 1 is inside `shifted`.
        let d = unsafe { shifted.as_ptr().add(1) }.cast::<c_void>();
        let st = o.invoke_with(ctx.0, d);
        o.expect_fail("misaligned desc", st, HIPFP8_STATUS_MISALIGNED, &["`desc`"]);
    }
}

#[test]
fn buffers_smaller_than_needed() {
    let ctx = Ctx::cpu();
    for op in all_ops() {
        for i in 0..op.bufs.len() {
            if Some(op.bufs[i].name) == op.offs.map(|o| o.0) {
                continue; // the offsets' count is the group count, not a capacity
            }
            let mut o = op.clone();
            o.bufs[i].len -= 1;
            let (name, needed, output) = (o.bufs[i].name, op.bufs[i].len, o.bufs[i].output);
            let want = if output {
                HIPFP8_STATUS_OUTPUT_TOO_SMALL
            } else {
                HIPFP8_STATUS_INPUT_TOO_SMALL
            };
            let st = o.invoke(ctx.0);
            o.expect_fail(
                "too small",
                st,
                want,
                &[
                    &format!("`{name}`"),
                    &format!("needs {needed}"),
                    &format!("got {}", needed - 1),
                ],
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
        op.expect_fail(
            "non-monotonic offsets",
            st,
            HIPFP8_STATUS_INVALID_OFFSETS,
            &["non-decreasing", "offs[1] = 1"],
        );
    }
}

#[test]
fn offsets_past_extent() {
    let ctx = Ctx::cpu();
    for (mut op, offs, extent) in grouped_ops() {
        op.buf(offs).set_i32(&[1, 2, extent as i32 + 1]);
        let st = op.invoke(ctx.0);
        let past = format!("offs[2] = {} is past the extent {extent}", extent + 1);
        op.expect_fail(
            "offsets past extent",
            st,
            HIPFP8_STATUS_INVALID_OFFSETS,
            &[&past],
        );
    }
}

#[test]
fn negative_offsets() {
    let ctx = Ctx::cpu();
    for (mut op, offs, extent) in grouped_ops() {
        op.buf(offs).set_i32(&[-1, 2, extent as i32]);
        let st = op.invoke(ctx.0);
        op.expect_fail(
            "negative offsets",
            st,
            HIPFP8_STATUS_INVALID_OFFSETS,
            &["offs[0] = -1 is negative"],
        );
    }
}

#[test]
fn group_count_mismatch() {
    // 2D x 3D GEMM: one group per expert, so the offsets' count must equal e.
    let ctx = Ctx::cpu();
    let mut op = all_ops()
        .into_iter()
        .find(|o| o.name == "hipfp8_grouped_gemm_2d3d")
        .unwrap();
    op.set_desc_usize(offset_of!(hipfp8_grouped_gemm_2d3d_desc, e), 2);
    let st = op.invoke(ctx.0);
    op.expect_fail(
        "group count mismatch",
        st,
        HIPFP8_STATUS_GROUP_COUNT_MISMATCH,
        &["expected 2, got 3"],
    );
}

#[test]
fn unsupported_format() {
    // MXFP8 has no FNUZ elements: explicitly, or through AUTO on an FNUZ-native context.
    let ctx = Ctx::cpu();
    let mut fnuz = null_mut();
    let st = hipfp8_context_create_cpu(hipfp8_format::HIPFP8_FORMAT_E4M3FNUZ as u32, &mut fnuz);
    assert_eq!(st, HIPFP8_STATUS_SUCCESS);
    let fnuz = Ctx(fnuz);
    for op in all_ops()
        .into_iter()
        .filter(|o| o.name.starts_with("hipfp8_mxfp8"))
    {
        let mut o = op.clone();
        o.set_desc_u32(
            offset_of!(hipfp8_mxfp8_desc, format),
            hipfp8_format::HIPFP8_FORMAT_E5M2FNUZ as u32,
        );
        let st = o.invoke(ctx.0);
        o.expect_fail(
            "FNUZ for MX",
            st,
            HIPFP8_STATUS_UNSUPPORTED_FORMAT,
            &["e5m2fnuz"],
        );
        let mut o = op.clone();
        let st = o.invoke(fnuz.0);
        o.expect_fail(
            "AUTO = FNUZ for MX",
            st,
            HIPFP8_STATUS_UNSUPPORTED_FORMAT,
            &["e4m3fnuz"],
        );
    }
}

#[test]
fn grouped_gemm_workspace() {
    let ctx = Ctx::cpu();
    let gemm = |name: &str| all_ops().into_iter().find(|o| o.name == name).unwrap();
    // NULL with a size, and a workspace not 256-byte aligned, are refused for both GEMMs.
    let mut store = vec![0u64; 64];
    let base = store.as_mut_ptr().cast::<u8>();
    let aligned = base.wrapping_add(base.align_offset(256)); // < 256: inside the 512 bytes
    for name in ["hipfp8_grouped_gemm_2d3d", "hipfp8_grouped_gemm_2d2d"] {
        for (ws, bytes, want, msg) in [
            (
                null_mut(),
                64usize,
                HIPFP8_STATUS_NULL_POINTER,
                "`workspace`",
            ),
            (
                aligned.wrapping_add(16), // base + 16 itself is 256-aligned when base % 256 == 240
                64,
                HIPFP8_STATUS_MISALIGNED,
                "256-byte aligned",
            ),
        ] {
            let mut o = gemm(name);
            o.call = if name.ends_with("2d3d") {
                |c, d, ps, ls| {
                    let (ws, bytes) = WS.with(|w| w.get());
                    hipfp8_grouped_gemm_2d3d(
                        c,
                        d.cast(),
                        ps[0],
                        ls[0],
                        ps[1],
                        ls[1],
                        p(ps, 2),
                        ls[2],
                        p(ps, 3),
                        ls[3],
                        p(ps, 4),
                        ls[4],
                        p(ps, 5),
                        ls[5],
                        ws,
                        bytes,
                        NS,
                    )
                }
            } else {
                |c, d, ps, ls| {
                    let (ws, bytes) = WS.with(|w| w.get());
                    hipfp8_grouped_gemm_2d2d(
                        c,
                        d.cast(),
                        ps[0],
                        ls[0],
                        ps[1],
                        ls[1],
                        p(ps, 2),
                        ls[2],
                        p(ps, 3),
                        ls[3],
                        p(ps, 4),
                        ls[4],
                        p(ps, 5),
                        ls[5],
                        ws,
                        bytes,
                        NS,
                    )
                }
            };
            WS.with(|w| w.set((ws.cast(), bytes)));
            let st = o.invoke(ctx.0);
            o.expect_fail("workspace", st, want, &[msg]);
            // An aligned workspace is accepted (the CPU backend does not use it).
            WS.with(|w| w.set((aligned.cast(), 64)));
            let mut o2 = o.clone();
            assert_eq!(o2.invoke(ctx.0), HIPFP8_STATUS_SUCCESS, "{}", last_error());
        }
    }
    // The size query: 0 on the CPU; its arguments are checked like everything else.
    let mut bytes = 99usize;
    let st = hipfp8_grouped_gemm_workspace_size(ctx.0, 0, 0, 0, 32, &mut bytes);
    assert_eq!((st, bytes), (HIPFP8_STATUS_SUCCESS, 0));
    let mut bytes = 99usize;
    assert_eq!(
        hipfp8_grouped_gemm_workspace_size(null(), 0, 0, 0, 32, &mut bytes),
        HIPFP8_STATUS_INVALID_HANDLE
    );
    assert_eq!(
        hipfp8_grouped_gemm_workspace_size(ctx.0, 0, 9, 0, 32, &mut bytes),
        HIPFP8_STATUS_INVALID_ENUM
    );
    assert!(last_error().contains("format = 9"));
    assert_eq!(
        hipfp8_grouped_gemm_workspace_size(ctx.0, 0, 0, 3, 32, &mut bytes),
        HIPFP8_STATUS_INVALID_ENUM
    );
    assert!(last_error().contains("backend = 3"));
    assert_eq!(
        hipfp8_grouped_gemm_workspace_size(ctx.0, 0, 0, 0, 32, null_mut()),
        HIPFP8_STATUS_NULL_POINTER
    );
    assert_eq!(bytes, 99, "written on failure");

    // The 2D x 2D size query (the staging area: it reads the descriptor's shape): 0 on the
    // CPU, as the Rust query; descriptor, enums and out-parameter checked, nothing written on
    // failure.
    let d = hipfp8_grouped_gemm_2d2d_desc {
        size: size_of::<hipfp8_grouped_gemm_2d2d_desc>(),
        a_format: 0,
        b_format: 0,
        backend: 0,
        n: 136,
        mt: 512,
        k: 264,
    };
    let mut bytes = 99usize;
    let st = hipfp8_grouped_gemm_2d2d_workspace_size(ctx.0, &d, 4, &mut bytes);
    assert_eq!((st, bytes), (HIPFP8_STATUS_SUCCESS, 0));
    let op = hipfp8::GroupedOp::TwoD2D {
        n: d.n,
        mt: d.mt,
        k: d.k,
    };
    let p = hipfp8::GemmParams::new(hipfp8::Fp8Format::E4M3Fn, hipfp8::Fp8Format::E4M3Fn);
    assert_eq!(
        hipfp8::Context::cpu()
            .grouped_gemm_op_workspace_size(&p, op, 4)
            .unwrap(),
        0
    );
    let mut bytes = 99usize;
    let q = |d: &hipfp8_grouped_gemm_2d2d_desc, b: *mut usize| {
        hipfp8_grouped_gemm_2d2d_workspace_size(ctx.0, d, 4, b)
    };
    assert_eq!(
        hipfp8_grouped_gemm_2d2d_workspace_size(null(), &d, 4, &mut bytes),
        HIPFP8_STATUS_INVALID_HANDLE
    );
    assert_eq!(
        hipfp8_grouped_gemm_2d2d_workspace_size(ctx.0, null(), 4, &mut bytes),
        HIPFP8_STATUS_NULL_POINTER
    );
    let bad_size = hipfp8_grouped_gemm_2d2d_desc { size: 8, ..d };
    assert_eq!(q(&bad_size, &mut bytes), HIPFP8_STATUS_INVALID_DESCRIPTOR);
    let bad_format = hipfp8_grouped_gemm_2d2d_desc { b_format: 9, ..d };
    assert_eq!(q(&bad_format, &mut bytes), HIPFP8_STATUS_INVALID_ENUM);
    assert!(last_error().contains("format = 9"));
    let bad_backend = hipfp8_grouped_gemm_2d2d_desc { backend: 3, ..d };
    assert_eq!(q(&bad_backend, &mut bytes), HIPFP8_STATUS_INVALID_ENUM);
    assert!(last_error().contains("backend = 3"));
    assert_eq!(q(&d, null_mut()), HIPFP8_STATUS_NULL_POINTER);
    assert!(last_error().contains("hipfp8_grouped_gemm_2d2d_workspace_size"));
    assert_eq!(bytes, 99, "written on failure");
}

thread_local! {
    /// The workspace argument the GEMM closures of `grouped_gemm_workspace` pass.
    static WS: std::cell::Cell<(*mut c_void, usize)> = const { std::cell::Cell::new((std::ptr::null_mut(), 0)) };
}

#[test]
fn wrong_location_on_gpu() {
    // Host memory handed to a GPU context is refused before any kernel could fault on it.
    let Some(_gpu) = hipfp8::device::gpu_for_tests("wrong_location_on_gpu") else {
        return;
    };
    let mut c = null_mut();
    let st = hipfp8_context_create(hipfp8_backend::HIPFP8_BACKEND_GPU as u32, 0, &mut c);
    assert_eq!(st, HIPFP8_STATUS_SUCCESS, "{}", last_error());
    let ctx = Ctx(c);
    for mut op in all_ops() {
        let first = op.bufs[0].name;
        let st = op.invoke(ctx.0);
        op.expect_fail(
            "host memory on a GPU context",
            st,
            HIPFP8_STATUS_WRONG_LOCATION,
            &[&format!("`{first}`")],
        );
    }
}

// ---- context functions ----------------------------------------------------------------------

#[test]
fn context_functions_null_and_small_outputs() {
    assert_eq!(
        hipfp8_context_create(1, 0, null_mut()),
        HIPFP8_STATUS_NULL_POINTER
    );
    assert!(last_error().contains("`out`"));
    let ctx = Ctx::cpu();
    assert_eq!(
        hipfp8_context_backend(ctx.0, null_mut()),
        HIPFP8_STATUS_NULL_POINTER
    );
    assert_eq!(
        hipfp8_context_native_format(ctx.0, null_mut()),
        HIPFP8_STATUS_NULL_POINTER
    );
    assert_eq!(
        hipfp8_context_device_name(ctx.0, null_mut(), 0, null_mut()),
        HIPFP8_STATUS_NULL_POINTER
    );

    let mut len = 0usize;
    assert_eq!(
        hipfp8_context_arch(ctx.0, null_mut(), 0, &mut len),
        HIPFP8_STATUS_SUCCESS
    );
    assert_eq!(len, 3); // "cpu"
    let mut buf = [POISON as std::ffi::c_char; 8];
    let mut len2 = 99usize;
    assert_eq!(
        hipfp8_context_arch(ctx.0, buf.as_mut_ptr(), 3, &mut len2),
        HIPFP8_STATUS_OUTPUT_TOO_SMALL
    );
    assert!(last_error().contains("needs 4"));
    assert!(
        buf.iter().all(|&c| c as u8 == POISON) && len2 == 99,
        "written on failure"
    );
    assert_eq!(
        hipfp8_context_arch(ctx.0, buf.as_mut_ptr(), 4, &mut len2),
        HIPFP8_STATUS_SUCCESS
    );
    // SAFETY: the call wrote a NUL-terminated string into buf.
    assert_eq!(
        unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap(),
        "cpu"
    );

    // Misaligned out-parameter.
    let mut words = [0u32; 2];
    let bad = (words.as_mut_ptr() as usize + 1) as *mut hipfp8_format;
    assert_eq!(
        hipfp8_context_native_format(ctx.0, bad),
        HIPFP8_STATUS_MISALIGNED
    );
    assert_eq!(words, [0, 0]);
}

#[test]
fn gpu_unavailable_is_a_status() {
    // No such device on any machine: a specific status, nothing written.
    let mut c = null_mut();
    assert_eq!(
        hipfp8_context_create(hipfp8_backend::HIPFP8_BACKEND_GPU as u32, -1, &mut c),
        HIPFP8_STATUS_BACKEND_UNAVAILABLE
    );
    assert!(c.is_null());
    assert!(last_error().starts_with("hipfp8_context_create: backend unavailable"));
}

/// The grouped-GEMM plan queries (no data buffers): a CPU context's plan, the descriptor
/// rules, the out-parameters, and the two-call text protocol; nothing written on failure.
#[test]
fn grouped_gemm_plan_queries() {
    let mut c = null_mut();
    assert_eq!(hipfp8_context_create(1, 0, &mut c), HIPFP8_STATUS_SUCCESS);
    let d3 = hipfp8_grouped_gemm_2d3d_desc {
        size: size_of::<hipfp8_grouped_gemm_2d3d_desc>(),
        a_format: hipfp8_format::HIPFP8_FORMAT_E4M3FN as u32,
        b_format: hipfp8_format::HIPFP8_FORMAT_E5M2 as u32,
        backend: 0,
        m: 64,
        k: 32,
        n: 16,
        e: 2,
    };
    let (mut imp, mut why, mut len) = (77u32, 77u32, 0usize);
    let mut buf = [0x55 as std::ffi::c_char; 64];
    let st = hipfp8_grouped_gemm_2d3d_plan(
        c,
        &d3,
        null(),
        null(),
        null(),
        2,
        &mut imp,
        &mut why,
        buf.as_mut_ptr(),
        64,
        &mut len,
    );
    assert_eq!(st, HIPFP8_STATUS_SUCCESS);
    assert_eq!(imp, hipfp8_gemm_impl::HIPFP8_GEMM_IMPL_CPU as u32);
    assert_eq!(why, hipfp8_gemm_reason::HIPFP8_GEMM_REASON_NONE as u32);
    // SAFETY: the function wrote a NUL-terminated string into buf (len + 1 <= 64 bytes).
    let text = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap();
    assert_eq!((text, len), ("cpu-reference", text.len()));
    // Text skipped (buf and len NULL) is allowed; the code out-parameters are required.
    let st = hipfp8_grouped_gemm_2d3d_plan(
        c,
        &d3,
        null(),
        null(),
        null(),
        2,
        &mut imp,
        &mut why,
        null_mut(),
        0,
        null_mut(),
    );
    assert_eq!(st, HIPFP8_STATUS_SUCCESS);
    let (mut imp2, mut why2) = (77u32, 77u32);
    let bad = [
        // A stale descriptor size, a NULL reason, a text buffer too small.
        (
            hipfp8_grouped_gemm_2d3d_desc { size: 8, ..d3 },
            false,
            4usize,
            HIPFP8_STATUS_INVALID_DESCRIPTOR,
        ),
        (d3, true, 64, HIPFP8_STATUS_NULL_POINTER),
        (d3, false, 4, HIPFP8_STATUS_OUTPUT_TOO_SMALL),
    ];
    for (d, null_reason, cap, want) in bad {
        let mut small = [0x55 as std::ffi::c_char; 64];
        let reason: *mut u32 = if null_reason { null_mut() } else { &mut why2 };
        let st = hipfp8_grouped_gemm_2d3d_plan(
            c,
            &d,
            null(),
            null(),
            null(),
            2,
            &mut imp2,
            reason,
            small.as_mut_ptr(),
            cap,
            null_mut(),
        );
        assert_eq!(st, want, "{}", last_error());
        assert!(last_error().starts_with("hipfp8_grouped_gemm_2d3d_plan"));
        assert_eq!((imp2, why2), (77, 77), "written on failure");
        assert!(small.iter().all(|&b| b == 0x55), "text written on failure");
    }
    // 2D x 2D, and a bad backend value.
    let d2 = hipfp8_grouped_gemm_2d2d_desc {
        size: size_of::<hipfp8_grouped_gemm_2d2d_desc>(),
        a_format: hipfp8_format::HIPFP8_FORMAT_E5M2 as u32,
        b_format: hipfp8_format::HIPFP8_FORMAT_E4M3FN as u32,
        backend: 0,
        n: 8,
        mt: 40,
        k: 8,
    };
    let st = hipfp8_grouped_gemm_2d2d_plan(
        c,
        &d2,
        null(),
        null(),
        null(),
        3,
        &mut imp,
        &mut why,
        null_mut(),
        0,
        null_mut(),
    );
    assert_eq!((st, imp), (HIPFP8_STATUS_SUCCESS, 0));
    let st = hipfp8_grouped_gemm_2d2d_plan(
        c,
        &hipfp8_grouped_gemm_2d2d_desc { backend: 9, ..d2 },
        null(),
        null(),
        null(),
        3,
        &mut imp,
        &mut why,
        null_mut(),
        0,
        null_mut(),
    );
    assert_eq!(st, HIPFP8_STATUS_INVALID_ENUM);
    assert_eq!(hipfp8_context_destroy(c), HIPFP8_STATUS_SUCCESS);
}
