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
