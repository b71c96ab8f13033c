//! The CLI behind `cargo run --release`: it runs every op and checks each against its oracle;
//! here it must succeed, report every op, and report no failed check.

use std::process::Command;

fn run(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hipfp8"))
        .args(args)
        .output()
        .expect("run hipfp8");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "hipfp8 {args:?} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn cli_runs_every_op_and_every_check_passes() {
    for args in [
        &["--json"][..],
        &["--json", "--format", "e4m3fnuz", "--pow2"],
    ] {
        let json = run(args);
        // The CLI runs on the best device present: the GPU when this build has one and a
        // device is there (the GPU bundle runs with HIPFP8_REQUIRE_GPU=1), the CPU otherwise.
        let want = if std::env::var("HIPFP8_REQUIRE_GPU").as_deref() == Ok("1")
            || hipfp8::Context::best().backend() == hipfp8::BackendKind::Gpu
        {
            "\"backend\":\"Gpu\""
        } else {
            "\"backend\":\"Cpu\""
        };
        assert!(json.contains(want), "expected {want}: {json}");
        assert!(!json.contains("\"ok\":false"), "{json}");
        for op in [
            "rowwise_2d",
            "tensorwise",
            "cast_transpose tensorwise",
            "cast_transpose rowwise",
            "per_group_colwise",
            "per_group_colwise_dual",
            "per_group_colwise_dual_padded",
            "per_group_rowwise",
            "colwise_3d",
            "rowwise_3d_transpose_rhs",
            "blockwise_1x128",
            "blockwise_128x128",
            "mxfp8_dim0 floor",
            "mxfp8_dim0 rceil",
            "mxfp8_dim1 floor",
            "mxfp8_dim1 rceil",
            "rowwise_2d_padded",
            "moe_dispatch_dual",
            "cast_transpose given scale",
            "moe_dispatch_dual",
            "grouped_gemm_2d3d",
            "grouped_gemm_2d2d",
        ] {
            assert!(
                json.contains(&format!("\"op\":\"{op}\"")),
                "{op} missing: {json}"
            );
        }
        assert_eq!(json.matches("\"check\":\"exact\"").count(), 19, "{json}");
    }
}

#[test]
fn cli_table_and_bad_arguments() {
    let table = run(&[]);
    assert!(table.contains("native FP8 e4m3fn"), "{table}");
    assert!(table.contains("All checks passed."), "{table}");
    let bad = Command::new(env!("CARGO_BIN_EXE_hipfp8"))
        .arg("--shapes")
        .arg("huge")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}
