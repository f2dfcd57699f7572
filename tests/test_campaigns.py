import pytest

from cutlass_nm import InputError
from cutlass_nm.campaigns import load_models, model_shapes


def test_shipped_campaigns_load():
    models = load_models()
    assert {"llama-7b", "llama-13b", "llama-70b", "mistral-7b"} <= set(models)
    assert ("down_proj", 4096, 11008) in models["llama-7b"]


def test_model_shapes_are_distinct_problems():
    shapes = model_shapes("llama-7b", 2048)
    assert shapes == [(2048, 4096, 4096), (2048, 4096, 11008), (2048, 11008, 4096)]
    with pytest.raises(InputError, match="unknown model"):
        model_shapes("gpt-5", 16)


def test_cli_build_help_mentions_models(capsys):
    from cutlass_nm.cli import main

    with pytest.raises(SystemExit):
        main(["build", "--help"])
    assert "--model" in capsys.readouterr().out


def test_split_is_by_whole_models_and_held_out_shapes_are_never_tuned():
    from cutlass_nm.campaigns import split_models, split_shapes

    tune, held = split_models("tune"), split_models("held_out")
    assert len(tune) + len(held) >= 8 and len(held) >= 3 and not set(tune) & set(held)
    assert set(tune) | set(held) == set(load_models())
    nk = {(n, k) for _, n, k in split_shapes("tune")}
    assert not {(n, k) for _, n, k in split_shapes("held_out")} & nk  # no held-out layer shape is ever tuned
    assert {m for m, _, _ in split_shapes("tune")} == {1, 16, 128, 512, 2048, 8192}
    with pytest.raises(InputError, match="split"):
        split_models("train")


def test_shipped_configs_come_from_tuned_models_only():
    """Every shipped tuned record's shape is a shape of a "tune" model: the held-out models never feed them."""
    from cutlass_nm.campaigns import split_shapes
    from cutlass_nm.store.shipped import shipped_records

    nk = {(n, k) for _, n, k in split_shapes("tune")}
    records = [r for gpu_records in shipped_records().values() for r in gpu_records]
    assert records
    assert {(r["n"], r["k"]) for r in records} <= nk
