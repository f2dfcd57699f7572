"""`cutlass-nm bench` without a GPU: shape presets, planning, row schema, reports, the cuSPARSELt child restarts."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cutlass_nm.bench import cases, cusparselt, report, shapes, suite
from cutlass_nm.bench.shapes import Shape
from cutlass_nm.families import KernelTypes

ROOT = Path(__file__).resolve().parents[1]
# the row keys every suite row has
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
    assert c.tuned and c.config == tuned and c.impl == "sptc24_sm90_tuned" and c.source == "user"


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
    from cutlass_nm.bench.roofline import ideal_ms

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
        copy = cases.clone_weight(cw)
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

    monkeypatch.setattr(cusparselt.subprocess, "run", fake_run)
    got = cusparselt.cusparselt_rows([(1, 1, 1), (2, 2, 2), (3, 3, 3), (4, 4, 4)], "f16", 5)
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
    assert update_readme.suite_section(_synthetic()) in new and "_speedup.png" in new and "old" not in new
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
    proc = subprocess.run([sys.executable, "-m", "cutlass_nm.bench.cusparselt", "f16", "5",
                           "cusparselt_search", "0", "16,64,64", "32,64,64"], capture_output=True, text=True)
    lines = [json.loads(ln) for ln in proc.stdout.splitlines()]
    assert proc.returncode == 0 and lines == [{"error": "skipped: --budget-s reached"}] * 2


def _cases(shapes_, patterns):
    from cutlass_nm.families import get_family

    cfg = get_family("nm_decode").Config()
    return [cases.Case(s, "nm_decode", "nm", p, cfg, "heuristic") for s in shapes_ for p in patterns]


def test_run_group_starts_a_new_worker_after_a_fault(monkeypatch):
    from cutlass_nm.bench import run

    s1, s2, s3 = Shape(1, 64, 64, "a"), Shape(2, 64, 64, "b"), Shape(4, 64, 64, "c")
    cases = _cases([s1, s2, s3], ["2:8", "2:16"])
    jobs = []

    def fake_worker(job, deadline):
        jobs.append([tuple(x[:3]) for x in job["shapes"]])
        lines = []
        for m, n, k, _ in job["shapes"]:
            for v in (c for c in job["cases"] if tuple(c[:3]) == (m, n, k)):
                case = run._case_of(v)
                if m == 2:  # the first case faults: its row says why, then the worker is gone
                    return [*lines, ("ROW", run._row(case, dtype="f16", error="CUDA error: illegal address"))], -6, "x"
                lines.append(("ROW", run._row(case, dtype="f16", median_ms=1.0)))
            lines.append(("DONE", [m, n, k]))
        return lines, 0, ""

    monkeypatch.setattr(run, "_worker", fake_worker)
    skipped = []
    rows = run.run_group("nm_decode", [s1, s2, s3], cases, {"dtype": "f16", "baselines": False}, float("inf"),
                         skipped)
    assert jobs == [[s1.mnk, s2.mnk, s3.mnk], [s3.mnk]]
    got = {(r["m"], r["pattern"]): r.get("error", "ok") for r in rows}
    assert got[(1, "2:8")] == got[(4, "2:16")] == "ok" and "illegal address" in got[(2, "2:8")]
    assert got[(2, "2:16")].startswith("worker exited (-6)") and not skipped


def test_run_group_gives_up_after_repeated_faults(monkeypatch):
    from cutlass_nm.bench import run

    shapes_ = [Shape(m, 64, 64) for m in (1, 2, 4, 8)]
    monkeypatch.setattr(run, "_worker", lambda job, deadline: ([], -11, "Segmentation fault"))
    skipped = []
    rows = run.run_group("nm_decode", shapes_, _cases(shapes_, ["2:8"]), {"dtype": "f16", "baselines": False},
                         float("inf"), skipped)
    assert [r["m"] for r in rows] == [1, 2] and all("Segmentation fault" in r["error"] for r in rows)
    assert [(s["m"], s["reason"]) for s in skipped] == [(4, "not run: its worker faulted 2 times"),
                                                         (8, "not run: its worker faulted 2 times")]


def test_worker_skips_past_its_deadline():
    job = {"dtype": "f16", "reps": 1, "warmup": 1.0, "sgemm": True, "baselines": True, "deadline": 0,
           "shapes": [[1, 64, 64, "a"], [2, 64, 64, "b"]], "cases": []}
    proc = subprocess.run([sys.executable, "-m", "cutlass_nm.bench.run", "--worker"], input=json.dumps(job),
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.splitlines() == ["SKIP [1, 64, 64]", "SKIP [2, 64, 64]"]


def test_assemble_orders_rows_and_derives_speedups():
    from cutlass_nm.bench import run

    s = Shape(2048, 4096, 4096, "x")
    base = {"m": 2048, "n": 4096, "k": 4096, "name": "x", "dtype": "f16"}
    by_group = {"baselines": [{**base, "impl": "cublas", "median_ms": 0.1}],
                "nm_decode": [{**base, "impl": "nm_decode_heuristic", "family": "nm_decode", "median_ms": 0.05}]}
    rows = run.assemble([s, Shape(1, 2, 3)], by_group, {s.mnk: {"median_ms": 0.08}})
    assert [r["impl"] for r in rows] == ["cublas", "cusparselt_search", "nm_decode_heuristic"]
    assert rows[2]["speedup_vs_cublas"] == pytest.approx(2.0) and rows[2]["speedup_vs_cusparselt"] == pytest.approx(1.6)
    assert rows[1]["pct_of_ideal"] > 0 and rows[2]["speedup_vs_sgemm"] is None


def test_run_suite_orchestration(monkeypatch, tmp_path):
    """Compile, cuSPARSELt, then one worker group per family after the baselines; checkpoints; the result."""
    from cutlass_nm.bench import run

    s1, s2 = Shape(1, 64, 64, "a"), Shape(2, 64, 64, "b")
    cases = _cases([s1, s2], ["2:8"])
    groups = []

    def fake_worker(job, deadline):
        groups.append(job["baselines"])
        lines = []
        for m, n, k, name in job["shapes"]:
            base = {"m": m, "n": n, "k": k, "name": name, "dtype": "f16"}
            if job["baselines"]:
                if m == 2:  # the budget cut the baselines short here
                    lines.append(("SKIP", [m, n, k]))
                    continue
                lines.append(("ROW", {**base, "impl": "cublas", "family": None, "median_ms": 1.0}))
            for v in (c for c in job["cases"] if tuple(c[:3]) == (m, n, k)):
                lines.append(("ROW", run._row(run._case_of(v), dtype="f16", median_ms=0.5)))
            lines.append(("DONE", [m, n, k]))
        return lines, 0, ""

    monkeypatch.setattr(run, "_worker", fake_worker)
    monkeypatch.setattr(run, "_compile", lambda cases, types, jobs: {})
    monkeypatch.setattr(run, "cusparselt_rows", lambda mnks, dtype, reps, deadline: {s1.mnk: {"error": "nope"}})
    monkeypatch.setattr(run, "environment", lambda: {"gpu": "x"})
    saved = []
    args = argparse.Namespace(reps=None, quick=True, budget_s=100.0, no_cusparselt=False, jobs=None, dtype="f16",
                              no_sgemm=False)
    result = run.run_suite([s1, s2], cases, [], KernelTypes("f16", "f16", False), args, checkpoint=saved.append)
    assert groups == [True, False] and len(saved) == 2 and saved[0]["suite"]["partial"]
    assert not result["suite"]["partial"]
    assert [(r["m"], r["impl"]) for r in result["rows"]] == [(1, "cublas"), (1, "cusparselt_search"),
                                                             (1, "nm_decode_heuristic")]
    assert result["rows"][2]["speedup_vs_cublas"] == pytest.approx(2.0)
    assert result["skipped"] == [{"m": 2, "n": 64, "k": 64, "family": "baselines", "reason": "--budget-s reached"}]


def test_worker_process_protocol():
    """The real worker process through run._worker: job on stdin, SKIP lines back, exit status."""
    from cutlass_nm.bench import run

    job = {"dtype": "f16", "reps": 1, "warmup": 1.0, "sgemm": True, "baselines": True, "deadline": 0,
           "shapes": [[1, 64, 64, "a"]], "cases": []}
    lines, rc, tail = run._worker(job, deadline=0.0)  # past its deadline: still the grace time to say so
    assert (lines, rc) == ([("SKIP", [1, 64, 64])], 0)
    job = {**job, "dtype": "int8"}  # a worker that fails says why
    lines, rc, tail = run._worker(job, deadline=float("inf"))
    assert lines == [] and rc != 0 and "int8" in tail
