"""`cutlass-nm bench` without a GPU: shape presets, planning, row schema, reports, the cuSPARSELt child restarts."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cutlass_nm.bench import report, shapes, suite
from cutlass_nm.bench.shapes import Shape
from cutlass_nm.families import KernelTypes

ROOT = Path(__file__).resolve().parents[1]
# bench_sptc24's row keys: every suite row has them too
SPTC24_KEYS = {"m", "n", "k", "dtype", "tuned", "impl", "config", "median_ms", "p20_ms", "p80_ms", "reps", "timing",
               "tflops", "rel_err", "speedup_vs_cublas", "speedup_vs_cusparselt_best"}
SUITE_KEYS = SPTC24_KEYS | {"family", "pattern", "sparsity", "engine", "tflops_effective", "gbps", "ideal_ms",
                            "pct_of_ideal", "speedup_vs_sgemm", "speedup_vs_cusparselt", "name"}


def test_nmsparse_m1_to_m32_in_table_order():
    s = shapes.nmsparse()
    assert [x.name for x in s] == [f"M{i}" for i in range(1, 33)]
    by = {x.name: x.mnk for x in s}
    assert by["M1"] == (1, 1024, 1024) and by["M7"] == (1, 20480, 5120) and by["M8"] == (1, 5120, 20480)
    assert by["M9"] == (256, 1024, 1024) and by["M11"] == (4096, 1024, 1024) and by["M12"] == (256, 2048, 2048)
    assert by["M24"] == (256, 1024, 4096) and by["M27"] == (256, 20480, 5120) and by["M32"] == (4096, 5120, 20480)
    assert len({x.mnk for x in s}) == 32


def test_llama_and_venom_sets():
    ll = shapes.llama()
    assert len(ll) == 20 and {x.m for x in ll} == {256, 512, 1024, 2048, 4096}
    assert {(x.n, x.k) for x in ll} == {(4096, 4096), (12288, 4096), (11008, 4096), (4096, 11008)}
    v = shapes.venom()
    assert len(v) == 18 and len({x.mnk for x in v}) == 18


def test_venom_mapping_sparse_a_becomes_w():
    # VENOM: sparse A (M x K) · dense B (K x N) -> ours: W = A (n = M out, k = K in), x = Bᵀ (m = N tokens)
    s = shapes.venom_shape(3072, 768, 2048)
    assert (s.m, s.n, s.k) == (2048, 3072, 768)
    assert {(x.n, x.k) for x in shapes.venom()} == set(shapes.VENOM_MK)
    assert {x.m for x in shapes.venom()} == set(shapes.VENOM_N)


def test_presets_merge_and_levels():
    assert set(shapes.PRESETS) >= {"quick", "headline", "nmsparse", "llama", "venom"}
    merged = shapes.merge(shapes.nmsparse() + shapes.llama() + [Shape(4096, 4096, 4096, "x")])
    assert len(merged) == len({x.mnk for x in merged})
    assert next(x for x in merged if x.mnk == (4096, 4096, 4096)).name == "M17+llama-4096x4096+x"
    assert shapes.parse_level("87.5") == 0.875 and shapes.parse_level("90%") == 0.9
    with pytest.raises(ValueError):
        shapes.parse_level("60")
    assert shapes.patterns_for("nm") == ["2:4", "2:8", "2:16", "2:20"]
    assert shapes.patterns_for("24") == ["2:4"]
    from cutlass_nm.patterns import Pattern

    for kind in shapes.PATTERNS:
        for level in shapes.LEVELS:
            for pat in shapes.patterns_for(kind, (level,), extra=True):
                assert abs(Pattern.parse(pat).sparsity - level) < 0.07, (kind, pat)


def test_gpu_slug():
    assert suite.gpu_slug("NVIDIA H100 80GB HBM3") == "h100"
    assert suite.gpu_slug("NVIDIA A100-SXM4-80GB") == "a100"
    assert suite.gpu_slug("NVIDIA GeForce RTX 4090") == "rtx-4090"
    assert suite.gpu_slug(None) == "cpu"


def test_plan_picks_patterns_by_weight_kind_and_skips_out_of_range():
    types = KernelTypes("f16", "f16", False)
    pats = {k: shapes.patterns_for(k) for k in shapes.PATTERNS}
    fams = ["sptc24_sm90", "nm_decode"]
    cases, skipped = suite.plan([Shape(1, 4096, 4096), Shape(2048, 4096, 4096)], fams, types, pats)
    assert {(c.shape.m, c.family, c.pattern) for c in cases} == (
        {(1, "sptc24_sm90", "2:4"), (2048, "sptc24_sm90", "2:4")}
        | {(1, "nm_decode", p) for p in ("2:4", "2:8", "2:16", "2:20")})
    assert all(not c.tuned and c.impl.endswith("_heuristic") for c in cases)
    assert [(s["m"], s["family"]) for s in skipped] == [(2048, "nm_decode")]


def test_plan_uses_a_tuned_config_only_if_it_runs():
    from cutlass_nm.families import get_family

    fam = get_family("sptc24_sm90")
    tuned = fam.Config(tile_m=128, tile_n=128, tile_k=64)
    types = KernelTypes("f16", "f16", False)
    cases, _ = suite.plan([Shape(2048, 4096, 4096)], ["sptc24_sm90", "nm_decode"], types,
                          {"24": ["2:4"], "nm": ["2:8"]}, selector=lambda f, p: tuned if f is fam else None)
    c = next(c for c in cases if c.family == "sptc24_sm90")
    assert c.tuned and c.config == tuned and c.impl == "sptc24_sm90_tuned"


def test_dry_run_and_help(capsys):
    from cutlass_nm.cli import main

    assert main(["bench", "--dry-run", "--quick", "--heuristic", "--family", "sptc24_sm90"]) == 0
    out = capsys.readouterr().out
    assert "1 x 4096 x 4096" in out and "kernels to compile" in out
    proc = subprocess.run([sys.executable, "-m", "cutlass_nm.cli", "bench", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "--quick" in proc.stdout and "--dry-run" in proc.stdout


def _synthetic() -> dict:
    """A small result built by the real metric and speedup code: two shapes, baselines and three families."""
    from cutlass_nm.bench.run import derive, metrics

    rows = []
    for (m, n, k), t in (((1, 4096, 4096), 0.02), ((2048, 4096, 4096), 0.1)):
        base = {"m": m, "n": n, "k": k, "name": "s", "dtype": "f16", "reps": 30, "timing": "graph", "rel_err": 1e-4,
                "config": None, "tuned": False, "family": None}
        shape = [{**base, "impl": "cublas", "pattern": None, "sparsity": 0.0, "engine": "tensor",
                  "median_ms": t, "p20_ms": t, "p80_ms": t, **metrics(m, n, k, t, 1.0, n * k * 2, "tensor")},
                 {**base, "impl": "cublas_sgemm", "pattern": None, "sparsity": 0.0, "engine": "simt",
                  "median_ms": 8 * t, "p20_ms": 8 * t, "p80_ms": 8 * t,
                  **metrics(m, n, k, 8 * t, 1.0, n * k * 4, "simt", 4, 4)},
                 {**base, "impl": "cusparselt_search", "pattern": "2:4", "sparsity": 0.5, "engine": "tensor",
                  "median_ms": 0.8 * t, "p20_ms": t, "p80_ms": t,
                  **metrics(m, n, k, 0.8 * t, 0.5, n * k * 1.125, "tensor")}]
        fams = [("sptc24_sm90", "2:4", 0.5, "tensor", 0.7)] + (
            [("nm_decode", p, s, "simt", f) for p, s, f in (("2:4", 0.5, 0.6), ("2:8", 0.75, 0.35))] if m == 1 else [])
        for fam, pat, sp, eng, f in fams:
            shape.append({**base, "impl": f"{fam}_heuristic", "family": fam, "pattern": pat, "sparsity": sp,
                          "engine": eng, "config": {"a": 1}, "median_ms": f * t, "p20_ms": f * t, "p80_ms": f * t,
                          **metrics(m, n, k, f * t, 1 - sp, n * k * (1 - sp) * 2.5, eng)})
        shape.append({**base, "impl": "sptc24_sm80_heuristic", "family": "sptc24_sm80", "pattern": "2:4",
                      "sparsity": 0.5, "engine": "tensor", "config": {"a": 1}, "error": "build failed: boom"})
        derive(shape)
        rows += shape
    env = {"gpu": "NVIDIA H100 80GB HBM3", "cutlass": "4.2.0.0", "torch": "2.x", "driver": "580", "commit": "abc1234",
           "command": "cutlass-nm bench --quick", "date": "2026-11-22T19:00:00+00:00"}
    return {"environment": env, "suite": {"dtype": "f16"}, "model": {"rates_flops": {"tensor": 7e14, "simt": 6.7e13},
            "bandwidth_Bps": 3e12}, "skipped": [{"m": 2048, "n": 4096, "k": 4096, "family": "nm_decode",
                                                  "reason": "m too large"}], "rows": rows}


def test_row_schema_and_derived_metrics():
    result = _synthetic()
    timed = [r for r in result["rows"] if "median_ms" in r]
    for r in timed:
        assert set(r) >= SUITE_KEYS, SUITE_KEYS - set(r)
    r = next(r for r in timed if r["m"] == 2048 and r["impl"] == "sptc24_sm90_heuristic")
    assert r["speedup_vs_cublas"] == pytest.approx(1 / 0.7) and r["speedup_vs_cusparselt"] == pytest.approx(0.8 / 0.7)
    assert r["tflops"] == pytest.approx(2 * 2048 * 4096 * 4096 / 0.07 / 1e9)
    assert r["tflops_effective"] == pytest.approx(r["tflops"] / 2)
    assert 0 < r["pct_of_ideal"] <= 100 * 0.1 / 0.07 + 1e-9


def test_ideal_model():
    from cutlass_nm.tune.perfmodel import ideal_ms

    # compute-bound: 2:4 at the sparse rate; memory-bound: m = 1 streams the weight
    assert ideal_ms(8192, 8192, 8192, 0.5, 8192 * 8192 * 1.125) == pytest.approx(2 * 8192**3 / 1.4e15 * 1e3)
    assert ideal_ms(1, 4096, 4096, 0.25, 4096 * 4096 * 0.6, "simt") == pytest.approx(
        (4096 * 2 + 4096 * 4096 * 0.6 + 4096 * 2) / 3e12 * 1e3)


def test_markdown_and_plots(tmp_path):
    result = _synthetic()
    md = report.markdown(result)
    head = report.headline_table(result)
    assert head in md and "| m > 16 | sptc24_sm90 | 2:4 | 50.0% | 1 | 1.43x" in head
    assert "| m ≤ 16 | nm_decode | 2:8 | 75.0% | 1 | 2.86x" in head
    assert "build failed: boom" in md and "nm_decode: m too large (1)" in md
    pytest.importorskip("matplotlib")
    path = tmp_path / "r.json"
    path.write_text(json.dumps(result))
    assert suite.main(argparse.Namespace(report=path)) == 0
    for name in ("r.md", "r_speedup.png", "r_roofline.png"):
        assert (tmp_path / name).stat().st_size > 0


def test_weights_clone_and_bytes():
    from cutlass_nm.bench.run import make_weight, weight_bytes

    w = torch.randn(64, 128, dtype=torch.float16)
    for kind, pat in (("24", "2:4"), ("nm", "2:4"), ("nm", "2:8"), ("vnm", "64:2:8")):
        cw = make_weight(w, pat, kind)
        copy = suite.clone_weight(cw)
        assert type(copy) is type(cw) and torch.equal(copy.to_dense(), cw.to_dense())
        assert copy.values.data_ptr() != cw.values.data_ptr()
        assert weight_bytes(cw) >= cw.values.numel() * 2
    assert type(make_weight(w, "2:4", "nm")).__name__ == "NMWeight"


def test_cusparselt_child_restarts_after_a_fault(monkeypatch):
    calls = []

    def fake_run(cmd, **kw):
        todo = cmd[cmd.index("cusparselt_search") + 2:]  # after the mode: the deadline, then the shapes
        calls.append(todo)
        out = []
        for s in todo:
            if s == "2,2,2" and len(calls) == 1:  # faults: no line, nonzero exit
                return subprocess.CompletedProcess(cmd, -4, "\n".join(out), "Illegal instruction")
            if s == "3,3,3":  # a Python error: an error line, then the child exits
                out.append(json.dumps({"error": "RuntimeError: x"}))
                return subprocess.CompletedProcess(cmd, 3, "\n".join(out), "")
            out.append(json.dumps({"median_ms": 1.0}))
        return subprocess.CompletedProcess(cmd, 0, "\n".join(out), "")

    monkeypatch.setattr(suite.subprocess, "run", fake_run)
    got = suite.cusparselt_rows([(1, 1, 1), (2, 2, 2), (3, 3, 3), (4, 4, 4)], "f16", 5)
    assert got[(1, 1, 1)] == {"median_ms": 1.0} and got[(4, 4, 4)] == {"median_ms": 1.0}
    assert "Illegal instruction" in got[(2, 2, 2)]["error"] and got[(3, 3, 3)]["error"].startswith("RuntimeError")
    assert calls == [["1,1,1", "2,2,2", "3,3,3", "4,4,4"], ["3,3,3", "4,4,4"], ["4,4,4"]]


def test_readme_suite_section_renders_and_is_optional(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import update_readme
    finally:
        sys.path.pop(0)
    path = tmp_path / "suite.json"
    path.write_text(json.dumps(_synthetic()))
    sections = {"suite": (path, update_readme.suite_section)}
    text = "intro\n<!-- results:suite -->\nold\n<!-- /results:suite -->\nend\n"
    new = update_readme.render(text, sections)
    assert report.headline_table(_synthetic()) in new and "suite_speedup.png" in new and "old" not in new
    assert update_readme.render(new, sections) == new
    assert update_readme.render("no markers\n", sections) == "no markers\n"


SUITE_RESULTS = sorted((ROOT / "benchmarks" / "results").glob("*/suite*.json"))


@pytest.mark.parametrize("path", SUITE_RESULTS, ids=[str(p.relative_to(ROOT)) for p in SUITE_RESULTS])
def test_committed_suite_results(path):
    """Committed results keep the row schema, and their markdown is generated from them."""
    result = json.loads(path.read_text())
    assert {"gpu", "commit", "command"} <= set(result["environment"])
    for r in result["rows"]:
        assert set(r) >= SUITE_KEYS if "median_ms" in r else "error" in r
    md = path.with_suffix(".md")
    assert md.read_text() == report.markdown(result) + "\n", f"regenerate: cutlass-nm bench --report {path}"


def test_cusparselt_child_skips_past_its_deadline():
    proc = subprocess.run([sys.executable, "-m", "cutlass_nm.bench.suite", "--cslt-child", "f16", "5",
                           "cusparselt_search", "0", "16,64,64", "32,64,64"], capture_output=True, text=True)
    lines = [json.loads(ln) for ln in proc.stdout.splitlines()]
    assert proc.returncode == 0 and lines == [{"error": "skipped: --budget-s reached"}] * 2
