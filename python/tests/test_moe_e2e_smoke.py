"""bench/moe_e2e.py --smoke: the MoE end-to-end benchmark's every case and variant that has a
CPU path, on tiny shapes on the CPU backend (no timing): it runs, its JSON has the row format
bench/results/h200-moe.json uses, hipfp8's casts equal torchao's eager reference bit for bit,
and hipfp8's outputs and gradients are close to BF16's."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "bench", "moe_e2e.py")
ROW_KEYS = {"case", "shape", "split", "grads", "microbatches", "variant", "impl", "compiled",
            "us", "peak_mem_bytes", "iters"}

pytest.importorskip("torchao", reason="torchao 0.18 is not installed (python/ci/torch-env.sh installs it)")
pytest.importorskip("torchtitan.models.common.moe",
                    reason="torchtitan 0.3 is not installed (python/ci/torch-env.sh installs it)")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("moe")
    env = dict(os.environ)
    # the hipfp8 this test process imports (the installed wheel in CI, python/ in a checkout)
    import hipfp8
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(hipfp8.__file__)))
    env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, SCRIPT, "--smoke", "--out", str(out)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"moe_e2e.py --smoke failed ({p.returncode}):\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"
    with open(out / "moe-smoke.json") as f:
        doc = json.load(f)
    assert (out / "moe-smoke.md").exists()
    return doc


def test_rows(smoke):
    rows = smoke["rows"]
    assert smoke["meta"]["smoke"] is True
    for r in rows:
        assert set(r) == ROW_KEYS, r
        assert r["case"] in ("projection", "block", "layer")
        assert r["split"] in ("balanced", "zipf") and r["grads"] in ("fresh", "acc")
        assert r["microbatches"] in (1, 4) and r["variant"] in ("bf16", "torchao", "hipfp8")
        assert r["us"] is None and r["peak_mem_bytes"] is None  # no timing claims on the CPU
    # every case x split x grads x micro-batches for the variants with a CPU path; hipfp8's
    # block and layer in both implementations (the fused recipe, the grouped_mm path)
    got = {(r["case"], r["split"], r["grads"], r["microbatches"], r["variant"], r["impl"])
           for r in rows}
    impls = {"projection": ("grouped_mm",), "block": ("recipe", "grouped_mm"),
             "layer": ("recipe", "grouped_mm", "recipe+route")}
    want = {(c, s, g, m, v, i) for c in ("projection", "block", "layer")
            for s in ("balanced", "zipf") for g in ("fresh", "acc") for m in (1, 4)
            for v, i in [("bf16", None)] + [("hipfp8", i) for i in impls[c]]}
    assert got == want, sorted(want - got)
    assert not [s for s in smoke["skipped"] if s.startswith("failed")], smoke["skipped"]
    assert all("torchao" in s for s in smoke["skipped"]), smoke["skipped"]


def test_casts_equal_torchao_reference(smoke):
    casts = smoke["casts"]
    assert {c["split"] for c in casts} == {"balanced", "zipf"}
    assert len(casts) == 2 * 6
    for c in casts:
        assert c["identical"], c


def test_close_to_bf16(smoke):
    checks = [c for c in smoke["checks"] if c["vs"] == "bf16"]
    assert {(c["case"], c["split"], c["mine"]) for c in checks} == {
        ("projection", s, "hipfp8 grouped_mm") for s in ("balanced", "zipf")} | {
        (c, s, m) for c in ("block", "layer") for s in ("balanced", "zipf")
        for m in ("hipfp8 recipe", "hipfp8 grouped_mm")} | {
        ("layer", s, "hipfp8 recipe+route") for s in ("balanced", "zipf")}
    for c in checks:
        assert c["cosine"] > 0.99, c


def test_route_vs_recipe(smoke):
    """The layer's routed path against torchtitan's dispatch around the same recipe: every
    output and gradient close (the combine rounds the f32 sum once, torchtitan each bf16 row)."""
    checks = [c for c in smoke["checks"]
              if c["mine"] == "hipfp8 recipe+route" and c["vs"] == "hipfp8 recipe"]
    assert {c["split"] for c in checks} == {"balanced", "zipf"}
    assert {c["what"] for c in checks} >= {"out"}
    for c in checks:
        assert c["cosine"] > 0.999, c


def test_recipe_vs_grouped_mm(smoke):
    """The two hipfp8 paths on the same module: the forward equal bit for bit (bf16 weights,
    CPU: the same casts and GEMMs, the same SwiGLU bits here), every weight gradient close."""
    checks = [c for c in smoke["checks"]
              if c["mine"] == "hipfp8 recipe" and c["vs"] == "hipfp8 grouped_mm"]
    assert {(c["case"], c["split"]) for c in checks} == {
        (c, s) for c in ("block", "layer") for s in ("balanced", "zipf")}
    for c in checks:
        if c["what"] == "out":
            assert c["identical"], c
        assert c["cosine"] > 0.999, c


def test_kernel_categories():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import moe_e2e
    assert moe_e2e.category("void hipfp8::rowwise_vec_kernel<__nv_bfloat16, 8>(...)") == "casts"
    assert moe_e2e.category("_triton_fp8_per_group_colwise_scales_dual_kernel") == "casts"
    assert moe_e2e.category("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<"
                            "...hipfp8...>>(...)") == "gemm"
    assert moe_e2e.category("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT") == "gemm"
    assert moe_e2e.category("void hipfp8_gg::build_2d3d(...)") == "gemm"
    assert moe_e2e.category("triton_poi_fused_mul_silu_0") == "rest"
    assert moe_e2e.category("void at::native::vectorized_elementwise_kernel<4, ...>") == "rest"


def test_every_timed_step_requantizes_the_weights():
    """The benchmark's steps are training steps: its optimizer_step (run between steps, outside
    the timed region) makes the fused recipe's weight cache quantize the weights again, so no
    variant reuses FP8 weights from an earlier step; micro-batches of one step share one."""
    import importlib.util

    import torch

    import hipfp8.torch as hf
    spec = importlib.util.spec_from_file_location("moe_e2e", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    m = hf.GroupedExperts(32, 16, 2, device="cpu", dtype=torch.bfloat16, fused=True)
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.05)
    cnt = torch.tensor([10, 22])
    x = torch.randn(32, 32).to(torch.bfloat16)
    params = list(m.parameters())
    for step in range(3):
        bench.optimizer_step(params)
        for _ in range(2):  # two micro-batches
            m(x, cnt).float().square().sum().backward()
        assert m.weight_cache.refreshes == step + 1
    before = [p.detach().clone() for p in params]
    bench.optimizer_step(params)
    assert all(torch.equal(a, p) for a, p in zip(before, params))  # no value changes
