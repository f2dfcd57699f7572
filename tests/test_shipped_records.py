"""Tuned records shipped in the package (cutlass_nm/configs/) pass validation and import idempotently."""

import json
from pathlib import Path

import pytest
from script_helpers import load_script

import cutlass_nm
from cutlass_nm.store.store import Store

RECORDS = sorted((Path(cutlass_nm.__file__).parent / "configs").glob("*.jsonl"))


@pytest.mark.parametrize("path", RECORDS, ids=[p.name for p in RECORDS])
def test_shipped_records_import(tmp_path, path):
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    store = Store(f"sqlite:///{tmp_path / 'x.sqlite'}")
    assert store.merge(lines) == {"new": header["records"], "known": 0, "rejected": 0, "skipped_env": 0}
    assert store.merge(lines)["new"] == 0
    assert store.winners()


def test_shipped_configs_match_this_versions_templates():
    """A family's shipped configs stand for the templates they were measured with (the header's "templates"): a
    template or family-module change must re-measure them or carry them over (tuning/ship_configs.py)."""
    from cutlass_nm.store.shipped import stale_families, valid_templates

    assert any(valid_templates().values()), "no shipped file names the templates its records stand for"
    stale = {gpu: fams for gpu, fams in stale_families().items() if fams}
    assert not stale, (f"templates changed since these shipped configs were measured: {stale}; re-measure them "
                       "(python3 tuning/ship_configs.py) or carry them over (--carry-over FAMILY)")


def test_shipped_configs_are_used_for_their_gpu_and_its_chip_only():
    from cutlass_nm.families import KernelTypes, Problem, get_family
    from cutlass_nm.store.chooser import DefaultChooser
    from cutlass_nm.store.shipped import shipped_records

    records = shipped_records()["h100-80gb-hbm3"]
    env = records[0]["environment"]
    machine = {"gpu": env.gpu, "compute_capability": env.compute_capability, "sm_count": env.sm_count}
    r = records[0]
    fam = get_family(r["family"])
    problem = Problem(r["m"], r["n"], r["k"], KernelTypes(r["dtype"], r["out_dtype"], r["bias"]), r["pattern"])
    choice = DefaultChooser(None, machine)(fam, problem)
    best = min((x for x in records if x["key"] == r["key"]), key=lambda x: x["p50_ms"])
    assert choice.source == "shipped" and choice.config == best["config"]
    untuned = Problem(r["m"] + 3, r["n"] + 64, r["k"], problem.types, r["pattern"])
    assert DefaultChooser(None, machine)(fam, untuned).source == "model"
    sibling = {**machine, "gpu": "h200"}  # same chip (compute capability, SM count); its own file has vnm_sm90 only
    assert DefaultChooser(None, sibling)(fam, problem) == choice
    own = shipped_records()["h200"][0]
    assert own["family"] != fam.name and own["environment"].gpu == "h200"
    vnm = get_family(own["family"])
    vnm_problem = Problem(own["m"], own["n"], own["k"], problem.types, own["pattern"])
    assert DefaultChooser(None, sibling)(vnm, vnm_problem).source == "shipped"
    assert DefaultChooser(None, machine)(vnm, vnm_problem).source == "shipped"  # the H100 takes the H200's
    for other in ({**machine, "gpu": "rtx-4090", "sm_count": 128}, {**machine, "compute_capability": "8.0"}):
        assert DefaultChooser(None, other)(fam, problem) is None  # no shipped configs, nothing tuned: the heuristic


@pytest.mark.parametrize(("family", "dtype"), [("sptc24_sm90", "f16"), ("sptc24_fp8_sm90", "e4m3"),
                                               ("vnm_sm90", "f16")])
def test_shipping_grid_plans_without_a_gpu(capsys, family, dtype):
    """tuning/ship_configs.py --dry-run: every grid config is valid in its family, and the tune models' problems
    each have a candidate to time (FP8: e4m3 inputs, bf16 output)."""
    ship = load_script("tuning/ship_configs.py")
    pattern = "128:2:8" if family == "vnm_sm90" else "2:4"
    assert ship.main(["--family", family, "--dtype", dtype, "--pattern", pattern, "--out", "unused.jsonl",
                      "--dry-run"]) == 0
    problems, kernels = (int(w) for w in capsys.readouterr().out.split()[::2][:2])
    assert problems > 100 and kernels >= len(ship.GRID[family]) // 2
    fam = cutlass_nm.families.get_family(family)
    assert all(fam.Config.from_record({**fam.Config().to_record(), **c}) for c in ship.GRID[family])


def test_one_token_vnm_grid_and_fused_gate_up_problems(capsys):
    """The V:N:M decode grid (nm_decode, one token) is valid in its space and runs V:N:M weights; --fused-gate-up
    plans the tune models' gate/up weights as one of twice gate's rows (a SparseGatedMLP's 256:2:M weight)."""
    from cutlass_nm.campaigns import load_models, split_models

    ship = load_script("tuning/ship_configs.py")
    fam = cutlass_nm.families.get_family("nm_decode")
    layers = ship.problems(fam, (1,), "128:2:8", "f16")
    fused = ship.problems(fam, (1,), "256:2:8", "f16", fused_gate_up=True)
    models = load_models()
    gates = {(2 * n, k) for name in split_models("tune") for layer, n, k in models[name] if layer == "gate_proj"}
    assert {(p.n, p.k) for p in fused} == gates and all(p.m == 1 for p in fused)
    for p in (*layers, *fused):
        assert all(fam.check(c, p) is None for c in ship.candidates(fam, 1)), p
    assert ship.main(["--family", "nm_decode", "--pattern", "256:2:8", "--fused-gate-up", "--tokens", "1", "--out",
                      "unused.jsonl", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith(f"{len(gates)} problems, {len(ship.GRID['nm_decode'])} kernels")


def test_grid_variations_and_the_default_choice_for_held_out_shapes(capsys):
    """--all-tiles and --vary FIELD=V1,V2 widen the grid (each config once per value); --shape adds the default
    path's choice (a decode family at small m) to what is compiled; a field or value outside the space is refused."""
    ship = load_script("tuning/ship_configs.py")
    fam = cutlass_nm.families.get_family("sptc24_fp8_sm90")
    plain, wide = ship.candidates(fam, 2048), ship.candidates(fam, 2048, all_tiles=True)
    assert len(wide) == len(ship.GRID[fam.name]) > len(plain)
    both = ship.candidates(fam, 2048, all_tiles=True, vary={"fast_accum": [0, 1]})
    assert len(both) == 2 * len(wide) and {c.fast_accum for c in both} == {0, 1}
    with pytest.raises(SystemExit, match="no field"):
        ship.parse_vary(fam, ["bogus=1"])
    with pytest.raises(SystemExit, match="values must be"):
        ship.parse_vary(fam, ["fast_accum=3"])
    vnm = cutlass_nm.families.get_family("vnm_sm90")
    small = cutlass_nm.families.Problem(16, 18944, 3584, ship.kernel_types("f16"), "128:2:8")
    family, cfg, source = ship.default_choice(vnm, small)
    assert family.name in ("nm_decode", "nm_decode_simt") and family.check(cfg, small) is None and source
    assert ship.main(["--family", "vnm_sm90", "--pattern", "128:2:8", "--shape", "16,18944,3584", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("1 problems")
