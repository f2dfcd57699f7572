"""cutlass_nm.hf.sparsify_model on tiny random LLaMA / Mistral / Qwen2 models (no download), on the CPU reference
path; the static-cache + CUDA-graph generate() test is marked gpu."""

import copy
import math
import subprocess
import sys

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")

from script_helpers import load_script  # noqa: E402

from cutlass_nm import InputError, PatternError  # noqa: E402
from cutlass_nm.hf import masked_dense_twin, sparsify_model  # noqa: E402
from cutlass_nm.nn import Sparse24GatedMLP, SparseGatedMLP, SparseLinear, StackedSparseLinear  # noqa: E402
from cutlass_nm.patterns import Pattern  # noqa: E402

ARCHS = ("llama", "mistral", "qwen2")
PROJ = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
        "mlp.up_proj", "mlp.down_proj")


def _model(arch: str, *, device: str = "cpu", intermediate: int = 256, **cfg) -> nn.Module:
    """A 2-layer bf16 causal LM with GQA (4 query heads and 2 key/value heads unless ``cfg`` says) and random
    weights."""
    config_cls, model_cls = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
                             "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
                             "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}[arch]
    cfg = {"num_attention_heads": 4, "num_key_value_heads": 2, **cfg}
    config = config_cls(hidden_size=128, intermediate_size=intermediate, num_hidden_layers=2, vocab_size=256,
                        max_position_embeddings=64,
                        initializer_range=0.2, **cfg)  # wide weights: logits far apart, few near-ties
    torch.manual_seed(0)
    return model_cls(config).to(device=device, dtype=torch.bfloat16).eval()


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def _inputs(device: str = "cpu") -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 256, (2, 7), generator=g)
    return {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids, device=device)}


def _check_greedy(model: nn.Module, ref: nn.Module, new: int = 4, **gen) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy generate() on ``model``; the reference, run on the same tokens, must give the same logits at every
    step, and each chosen token must be its argmax (up to bf16 ties). Returns the sequences and step logits."""
    inp = _inputs(next(model.parameters()).device.type)
    out = model.generate(**inp, max_new_tokens=new, do_sample=False, return_dict_in_generate=True,
                         output_logits=True, pad_token_id=0, **gen)
    seq, prompt = out.sequences, inp["input_ids"].shape[1]
    assert seq.shape == (2, prompt + new)
    with torch.no_grad():
        ref_logits = ref(seq, attention_mask=torch.ones_like(seq)).logits[:, prompt - 1:-1].float()
    got = torch.stack(out.logits, 1).float()
    assert _rel(got, ref_logits) < 2e-2
    chosen = ref_logits.gather(-1, seq[:, prompt:, None])[..., 0]
    assert (chosen >= ref_logits.amax(-1) - 0.05 * ref_logits.abs().amax()).all()
    return seq, got


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("pattern", ["2:4", "128:2:8"])
def test_sparsify_model_matches_masked_dense_and_generates(arch, pattern):
    model = _model(arch)
    dense = copy.deepcopy(model)
    assert sparsify_model(model, pattern) is model
    summary = model.sparsify_summary
    for i in range(2):
        layer = model.model.layers[i]
        if pattern == "128:2:8":
            assert all(isinstance(layer.get_submodule(proj), SparseLinear) for proj in PROJ[:4])
        else:  # q, k and v stacked into one 2:4 weight, each a part of it under its own name
            attn = layer.self_attn
            assert isinstance(attn.qkv_proj, StackedSparseLinear) and isinstance(attn.o_proj, SparseLinear)
            assert [(p.stack, p.index) for p in (attn.q_proj, attn.k_proj, attn.v_proj)] == [(attn.qkv_proj, i)
                                                                                             for i in range(3)]
            assert attn.qkv_proj.sizes == tuple(getattr(attn, p).out_features for p in ("q_proj", "k_proj", "v_proj"))
        if pattern == "128:2:8":
            assert isinstance(layer.mlp, SparseGatedMLP) and str(layer.mlp.pattern) == pattern
        else:  # gate and up stacked into one 2:4 weight
            mlp = layer.mlp
            assert isinstance(mlp, Sparse24GatedMLP) and str(mlp.gate_up.pattern) == pattern
            assert (mlp.gate_up.out_features, mlp.hidden) == (2 * mlp.down_proj.in_features, mlp.down_proj.in_features)
    assert type(model.model.embed_tokens) is nn.Embedding and type(model.lm_head) is nn.Linear
    assert summary.replaced == [f"model.layers.{i}.{p}" for i in range(2) for p in PROJ]
    assert summary.fused == [f"model.layers.{i}.mlp" for i in range(2)]
    assert summary.stacked == ([f"model.layers.{i}.self_attn" for i in range(2)] if pattern == "2:4" else [])
    assert all(("stacked q/k/v" in d.how) == (pattern == "2:4" and d.name.endswith(("q_proj", "k_proj", "v_proj")))
               for d in summary.decisions)
    assert summary.excluded == ["lm_head"] and not summary.skipped
    assert any("lm_head kept dense" in n for n in summary.notes)

    ref = masked_dense_twin(dense, model)
    inp = _inputs()
    with torch.no_grad():
        got, want = model(**inp).logits, ref(**inp).logits
    assert _rel(got, want) < 2e-2
    seq, _ = _check_greedy(model, ref)
    ref_seq = ref.generate(**inp, max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert (seq[:, -4] == ref_seq[:, -4]).all()  # the first generated token: same logits up to bf16 rounding


def test_lm_head_sparse_only_when_asked_and_untied():
    llama = sparsify_model(_model("llama", tie_word_embeddings=False), "2:4", include_lm_head=True)
    assert isinstance(llama.lm_head, SparseLinear) and "lm_head" in llama.sparsify_summary.replaced
    assert type(llama.model.embed_tokens) is nn.Embedding
    qwen = _model("qwen2", tie_word_embeddings=True)
    assert qwen.lm_head.weight is qwen.model.embed_tokens.weight
    sparsify_model(qwen, "2:4", include_lm_head=True)
    assert type(qwen.lm_head) is nn.Linear and qwen.lm_head.weight is qwen.model.embed_tokens.weight
    assert "lm_head is tied to the input embedding: kept dense" in qwen.sparsify_summary.notes
    with torch.no_grad():
        qwen(**_inputs())


def test_2_4_gate_up_stack_keeps_each_weight_and_the_function():
    """A 2:4 MLP's stacked gate/up holds gate's pruned rows then up's (each pruned on its own, as unfused), and the
    fused MLP computes down(silu(gate x) * up x) with them; fp8=True stacks e4m3 weights; a bias is refused."""
    model = _model("llama")
    mlp = model.model.layers[0].mlp
    fused = Sparse24GatedMLP.from_linears(mlp.gate_proj, mlp.up_proj, mlp.down_proj)
    gate, up, down = fused.dense_weights()
    for got, lin in ((gate, mlp.gate_proj), (up, mlp.up_proj), (down, mlp.down_proj)):
        assert torch.equal(got, SparseLinear.from_linear(lin, "2:4").weight_dense())
    x = torch.randn(3, mlp.gate_proj.in_features, dtype=gate.dtype)
    want = nn.functional.silu(x @ gate.T) * (x @ up.T) @ down.T
    with torch.no_grad():
        assert _rel(fused(x).float(), want.float()) < 1e-2
    assert Sparse24GatedMLP.from_linears(mlp.gate_proj, mlp.up_proj, mlp.down_proj, fp8=True).gate_up.fp8
    biased = nn.Linear(mlp.gate_proj.in_features, mlp.gate_proj.out_features, bias=True)
    with pytest.raises(PatternError, match="bias-free"):
        Sparse24GatedMLP.from_linears(biased, mlp.up_proj, mlp.down_proj)
    gate_s, up_s, down_s = (SparseLinear.from_linear(lin, "2:4") for lin in (mlp.gate_proj, mlp.up_proj, mlp.down_proj))
    assert all(torch.equal(a, b) for a, b in zip(Sparse24GatedMLP.from_sparse(gate_s, up_s, down_s).dense_weights(),
                                                 (gate, up, down), strict=True))
    with pytest.raises(PatternError, match="gate and up alike"):
        Sparse24GatedMLP.from_sparse(gate_s, down_s, down_s)
    with pytest.raises(PatternError, match="fp8=True takes the 2:4 pattern"):
        sparsify_model(_model("llama"), "128:2:8", fp8=True)


@pytest.mark.parametrize("fp8", [False, True])
def test_fused_2_4_checkpoint_loads_into_a_fresh_dense_model(tmp_path, fp8):
    """save_sparse of a model whose 2:4 MLPs and q/k/v are stacked, then load_sparse_into the dense model it came
    from: each MLP becomes a Sparse24GatedMLP and each attention gets its stacked q/k/v again, and the logits are the
    saved model's, exactly; a stack that does not fit the model, or an MLP that is not SiLU, is refused."""
    from cutlass_nm import CheckpointError, load_sparse_into, save_sparse

    model, fresh = _model("llama"), _model("llama", intermediate=256)
    sparsify_model(model, "2:4", fp8=fp8)
    save_sparse(model, tmp_path / "m.safetensors")
    assert load_sparse_into(fresh, tmp_path / "m.safetensors") is fresh
    assert all(isinstance(layer.mlp, Sparse24GatedMLP) and layer.mlp.gate_up.fp8 == fp8 and
               isinstance(layer.self_attn.qkv_proj, StackedSparseLinear) and layer.self_attn.v_proj.index == 2
               for layer in fresh.model.layers)
    with torch.no_grad():
        assert torch.equal(fresh(**_inputs()).logits, model(**_inputs()).logits)
    refused = (({"intermediate": 512}, "stacked 2:4 gate/up of 1024x128"), ({"hidden_act": "gelu"}, "not SiLU"),
               ({"head_dim": 64}, r"qkv_proj' is 2:4 \d+x128 in the checkpoint; .* stacked q/k/v of \d+x128"))
    for cfg, why in refused:
        other = _model("llama", **cfg)
        with pytest.raises(CheckpointError, match=why):
            load_sparse_into(other, tmp_path / "m.safetensors")
        assert not any(isinstance(m, SparseLinear | Sparse24GatedMLP) for m in other.modules())  # left as it was


def test_stacked_nm_qkv_checkpoint_loads_into_a_fresh_dense_model(tmp_path):
    """A 2:8 model's stacked q/k/v saves and loads into the dense model it came from as a 2:8 stack again, logits
    exact; a model whose q/k/v are shaped otherwise refuses it, unchanged."""
    from cutlass_nm import CheckpointError, load_sparse_into, save_sparse

    model, fresh = sparsify_model(_model("llama"), "2:8"), _model("llama")
    save_sparse(model, tmp_path / "m.safetensors")
    load_sparse_into(fresh, tmp_path / "m.safetensors")
    assert all(layer.self_attn.qkv_proj.pattern == Pattern.parse("2:8") for layer in fresh.model.layers)
    with torch.no_grad():
        assert torch.equal(fresh(**_inputs()).logits, model(**_inputs()).logits)
    narrow = _model("llama", num_attention_heads=8, num_key_value_heads=1)  # q 128, k 16, v 16 rows (not 64)
    with pytest.raises(CheckpointError, match="stacked q/k/v"):
        load_sparse_into(narrow, tmp_path / "m.safetensors")
    assert not any(isinstance(m, SparseLinear) for m in narrow.modules())


def test_qkv_stacked_where_blocks_allow_and_when_asked():
    """q/k/v stack at every pattern whose blocks of rows q and k fill (V:N:M: V rows; N:M: ``vector``), and not
    with stack_qkv=False; a stacked model computes what the same model with q/k/v apart computes."""
    apart = sparsify_model(_model("llama"), "2:4", stack_qkv=False)
    assert not apart.sparsify_summary.stacked and type(apart.model.layers[0].self_attn.q_proj) is SparseLinear
    vnm = sparsify_model(_model("llama"), "128:2:8")  # k_proj has 64 rows: less than one block of 128
    assert not vnm.sparsify_summary.stacked and not hasattr(vnm.model.layers[0].self_attn, "qkv_proj")
    for pattern, cfg in (("128:2:8", {"num_key_value_heads": 4}), ("2:8", {})):
        stacked = sparsify_model(_model("llama", **cfg), pattern)
        apart = sparsify_model(_model("llama", **cfg), pattern, stack_qkv=False)
        attn = stacked.model.layers[1].self_attn
        assert len(stacked.sparsify_summary.stacked) == 2 and attn.qkv_proj.pattern == Pattern.parse(pattern)
        with torch.no_grad():
            assert torch.equal(stacked(**_inputs()).logits, apart(**_inputs()).logits)


def test_gate_up_fused_only_where_the_mlp_allows():
    gelu = sparsify_model(_model("llama", hidden_act="gelu"), "128:2:8")
    assert not gelu.sparsify_summary.fused and "'gelu'" in gelu.sparsify_summary.not_fused["model.layers.0.mlp"]
    assert all(isinstance(gelu.model.layers[0].get_submodule(p), SparseLinear) for p in PROJ[4:])
    odd = sparsify_model(_model("mistral", intermediate=320), "128:2:8")  # 320 % 128 != 0
    assert "not a multiple of 128" in odd.sparsify_summary.not_fused["model.layers.1.mlp"]
    assert isinstance(odd.model.layers[1].mlp.gate_proj, SparseLinear)
    off = sparsify_model(_model("qwen2"), "128:2:8", fuse_gate_up=False, exclude=["*.layers.1.mlp.*"])
    assert isinstance(off.model.layers[0].mlp.up_proj, SparseLinear)
    assert type(off.model.layers[1].mlp.up_proj) is nn.Linear
    assert "model.layers.1.mlp.up_proj" in off.sparsify_summary.excluded
    part = sparsify_model(_model("qwen2"), "128:2:8", exclude=["*.layers.1.mlp.down_proj"])
    assert part.sparsify_summary.fused == ["model.layers.0.mlp"]
    assert part.sparsify_summary.not_fused["model.layers.1.mlp"] == "excluded"
    assert isinstance(part.model.layers[1].mlp.gate_proj, SparseLinear)
    assert type(part.model.layers[1].mlp.down_proj) is nn.Linear


def test_on_a_gpu_fuses_only_where_gate_up_and_down_each_win(monkeypatch):
    """sparsify's timing faked (every layer counts as on a GPU; speedup by out_features): an MLP whose down
    projection loses stays unfused, its gate/up decided layer by layer; where all three win it is fused."""
    from cutlass_nm import decisions

    speed = {}
    monkeypatch.setattr(decisions, "_measurable", lambda lin: True)
    monkeypatch.setattr(decisions, "_compile", lambda problems, progress: None)
    monkeypatch.setattr(decisions, "measure_speedups", lambda lin, sp, tokens: dict.fromkeys(tokens,
                                                                                            speed[lin.out_features]))
    speed.update({64: 1.5, 128: 0.9, 256: 1.5})  # q, o (128 x 128) and down (128 x 256) lose
    lose = sparsify_model(_model("llama"), "128:2:8")
    mlp, attn, s = lose.model.layers[0].mlp, lose.model.layers[0].self_attn, lose.sparsify_summary
    assert not s.fused and "not 1.0x faster" in s.not_fused["model.layers.0.mlp"]
    assert isinstance(mlp.gate_proj, SparseLinear) and type(mlp.down_proj) is nn.Linear
    assert isinstance(attn.k_proj, SparseLinear) and type(attn.q_proj) is nn.Linear
    assert "model.layers.0.mlp.down_proj" in s.kept_dense
    speed[128] = 1.2
    win = sparsify_model(_model("llama"), "128:2:8")
    assert win.sparsify_summary.fused == ["model.layers.0.mlp", "model.layers.1.mlp"]
    assert "model.layers.1.mlp.up_proj  256x128  sparse  m=1: 1.50x, m=2048: 1.50x  (fused gate/up (measured))" \
        in win.sparsify_summary.table()
    assert not sparsify_model(_model("llama"), "128:2:8", min_speedup=1.3).sparsify_summary.fused


def test_masked_dense_twin_does_not_share_a_compiled_forward():
    """generate() keeps its compiled forward on the model, bound to it: the twin must not call the original."""
    model = _model("llama")
    dense = copy.deepcopy(model)
    dense._compiled_call, dense._last_compile_config = dense.__call__, None  # as generate() leaves them
    sparsify_model(model, "2:4", force=True)
    twin = masked_dense_twin(dense, model)
    assert not hasattr(twin, "_compiled_call") and not hasattr(twin, "_last_compile_config")
    assert hasattr(dense, "_compiled_call")


def test_duck_typed_model_without_transformers_classes():
    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = nn.ModuleDict({"q_proj": nn.Linear(128, 128)})
            self.mlp = nn.Module()
            self.mlp.gate_proj, self.mlp.up_proj = nn.Linear(128, 256, bias=False), nn.Linear(128, 256, bias=False)
            self.mlp.down_proj, self.mlp.act_fn = nn.Linear(256, 128, bias=False), nn.SiLU()

    model = nn.Sequential(Layer(), nn.Linear(128, 64)).to(torch.bfloat16)
    sparsify_model(model, "128:2:8")
    assert isinstance(model[0].mlp, SparseGatedMLP) and isinstance(model[0].self_attn.q_proj, SparseLinear)
    assert type(model[1]) is nn.Linear and model.sparsify_summary.excluded == ["1"]


def test_refusals():
    with pytest.raises(InputError, match="no decoder layers"):
        sparsify_model(nn.Sequential(nn.Linear(16, 16)))
    with pytest.raises(InputError, match="tokens"):
        sparsify_model(_model("llama"), tokens=())


@pytest.mark.parametrize("pattern", ["2:4", "128:2:8"])
def test_static_cache_and_fullgraph_compile_on_cpu(pattern):
    """generate() with a static cache through transformers' own torch.compile (fullgraph, aot_eager: traces the
    custom ops with their fake kernels, the fused MLPs of both patterns; the GPU test below runs inductor + CUDA
    graphs)."""
    model = _model("llama")
    dense = copy.deepcopy(model)
    sparsify_model(model, pattern)
    eager = model.generate(**_inputs(), max_new_tokens=4, do_sample=False, pad_token_id=0)
    config = transformers.CompileConfig(fullgraph=True, backend="aot_eager", mode=None)
    config._compile_all_devices = True  # transformers compiles only on accelerators unless told
    torch._dynamo.reset()
    seq, _ = _check_greedy(model, masked_dense_twin(dense, model), cache_implementation="static", compile_config=config)
    assert hasattr(model, "_compiled_call")  # generate() used the compiled forward
    assert torch.equal(seq, eager)


def test_stacked_2_4_layers_run_one_kernel_each_eager_and_compiled(monkeypatch):
    """A 2:4 decoder layer runs 4 sparse kernels (q/k/v stacked, o, gate/up stacked, down) where it had 7, in eager
    calls and in a fullgraph-compiled forward alike (the q/k/v parts share their one split under tracing too)."""
    from cutlass_nm import ops

    model = sparsify_model(_model("llama"), "2:4")
    calls, linear = [], ops.linear
    monkeypatch.setattr(ops, "linear", lambda *a: calls.append(1) or linear(*a))
    with torch.no_grad():
        want = model(**_inputs()).logits
        eager = len(calls)
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
        compiled(**_inputs())  # traces
        calls.clear()
        got = compiled(**_inputs()).logits
    assert eager == len(calls) == 4 * len(model.model.layers)
    assert torch.equal(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", ["2:4", "128:2:8"])
def test_gpu_generate_static_cache_cuda_graphs_matches_eager(pattern):
    """On the GPU: generate() eager, then with a static cache and transformers' torch.compile (inductor,
    reduce-overhead: CUDA graphs, fullgraph) must compute the masked-dense model's logits."""
    model = _model("llama", device="cuda", intermediate=512)
    dense = copy.deepcopy(model)
    sparsify_model(model, pattern, force=True)
    assert len(model.sparsify_summary.replaced) == 14
    ref = masked_dense_twin(dense, model)
    eager, eager_logits = _check_greedy(model, ref, new=8)
    torch._dynamo.reset()
    config = transformers.CompileConfig(fullgraph=True)  # mode="reduce-overhead": CUDA graphs
    seq, logits = _check_greedy(model, ref, new=8, cache_implementation="static", compile_config=config)
    assert hasattr(model, "_compiled_call")  # the decode steps (all but the first) ran compiled
    prompt = _inputs()["input_ids"].shape[1]
    agree = int((seq[:, prompt:] == eager[:, prompt:]).all(0).int().cumprod(0).sum())  # steps with equal prefixes
    assert agree >= 2  # the first token (eager prefill) and the first compiled step
    assert _rel(logits[:, :agree], eager_logits[:, :agree]) < 2e-2


def test_importing_cutlass_nm_hf_does_not_import_transformers():
    code = "import sys, cutlass_nm, cutlass_nm.hf; assert 'transformers' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_end_to_end_benchmark_runs_on_a_tiny_model(tmp_path):
    """benchmarks/bench_hf.py's whole flow (build, measure, sparsify, compare with the masked dense twin) on the CPU
    reference path: the rows it writes are complete and the sparse logits equal the twin's."""
    import json
    from pathlib import Path

    out = tmp_path / "hf.json"
    script = Path(__file__).parents[1] / "benchmarks" / "bench_hf.py"
    subprocess.run([sys.executable, str(script), "--tiny", "--device", "cpu", "--no-compile", "--patterns", "2:4",
                    "--prefill-tokens", "32", "--prefill-batches", "1", "--decode-batches", "1", "--steps", "1,2",
                    "--reps", "1", "--out", str(out)], check=True, capture_output=True, timeout=300)
    rows = json.loads(out.read_text())["rows"]
    assert {(r["pattern"], r["metric"]) for r in rows} == {(p, m) for p in ("dense", "2:4")
                                                           for m in ("weight_gb", "linear_gb", "prefill_ms",
                                                                     "decode_tok_s")}
    sparse = [r for r in rows if r["pattern"] == "2:4"]
    assert all(r["rel_err"] < 1e-6 and r["layers_sparse"] == 14 for r in sparse)
    weights = next(r for r in sparse if r["metric"] == "weight_gb")
    assert weights["value"] < weights["dense_value"]  # compressed projections
    projections = next(r for r in sparse if r["metric"] == "linear_gb")
    assert projections["value"] < weights["value"] and projections["dense_value"] < weights["dense_value"]
    for by_kind, total in ((projections["by_kind"], projections["value"]),
                           (projections["dense_by_kind"], projections["dense_value"])):
        assert "lm_head" in by_kind and sum(by_kind.values()) == pytest.approx(total)
    only = tmp_path / "only.json"  # --compile-only: sparsifies each pattern's model, writes and times nothing
    done = subprocess.run([sys.executable, str(script), "--tiny", "--device", "cpu", "--compile-only", "--patterns",
                           "2:4,128:2:8", "--out", str(only)], check=True, capture_output=True, text=True, timeout=300)
    assert not only.exists() and done.stdout.count("kernels compiled") == 2
    floor = tmp_path / "floor.json"  # --host-floor: dense against the model whose decoder linears do no work
    subprocess.run([sys.executable, str(script), "--tiny", "--device", "cpu", "--host-floor", "--modes",
                    "eager,compiled", "--decode-batches", "1", "--compiled-batches", "1", "--steps", "1,2",
                    "--decode-reps", "1", "--out", str(floor)], check=True, capture_output=True, timeout=300)
    rows = json.loads(floor.read_text())["rows"]
    assert [(r["pattern"], r["mode"], r["m"]) for r in rows] == [
        (p, mode, 1) for mode in ("eager", "compiled") for p in ("dense", "no_linear_work")]
    # tokens/s from two short generations' difference: its sign is noise on a busy CPU, so only its form is checked
    assert all(r["metric"] == "decode_tok_s" and math.isfinite(r["value"]) for r in rows)
    assert rows[0]["speedup_vs_dense"] == rows[2]["speedup_vs_dense"] == 1.0


def test_end_to_end_ceiling_keeps_the_rest_of_the_step():
    """bench_hf's ceiling: only the projections' share of a step speeds up (decode: to the bytes ratio; prefill: to
    1 / density), the rest of the step stays as dense's."""
    bench = load_script("benchmarks/bench_hf.py")
    dense = {("decode_tok_s", 1, "compiled"): 100.0, ("linear_ms", 1, "graph"): 6.0, ("linear_gb", 0, ""): 10.0,
             ("prefill_ms", 1, "eager"): 50.0, ("linear_ms", 1, "prefill"): 40.0}
    sparse = {("linear_gb", 0, ""): 5.0}
    assert bench.ceiling(dense, sparse, "decode_tok_s", 1, "2:4") == pytest.approx(10 / (10 - 0.5 * 6))
    assert bench.ceiling(dense, sparse, "prefill_ms", 1, "128:2:8") == pytest.approx(50 / (50 - 0.75 * 40))
    assert bench.ceiling(dense, sparse, "decode_tok_s", 16, "2:4") is None  # dense not measured there


def test_fp8_llama_sparsifies_and_generates_on_the_cpu():
    """sparsify_model(fp8=True): every projection an FP8 2:4 SparseLinear (q/k/v and gate/up stacked);
    generate() runs, and the logits stay near the twin built from the dequantized weights (the gap is the
    activations' per-token e4m3 rounding, through 2 layers of 7 projections; each layer's exact reference is
    tests/test_fp8.py's)."""
    model = _model("llama")
    dense = copy.deepcopy(model)
    sparsify_model(model, "2:4", fp8=True)
    layer = model.model.layers[0]
    assert all(layer.get_submodule(p).fp8 for p in ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up",
                                                     "mlp.down_proj"))
    with torch.no_grad():
        got = model(**_inputs()).logits
        want = masked_dense_twin(dense, model)(**_inputs()).logits
    assert torch.isfinite(got).all() and _rel(got, want) < 0.25
    seq = model.generate(**_inputs(), max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert seq.shape == (2, 10)


def test_prefill_timing_runs_each_model_in_blocks():
    """bench_hf's prefill timing: every model in turn runs a block of forwards in a row (the first SETTLE untimed), so
    none is timed at the clock the model before it left; without NVML (the CPU) only the time is reported."""
    from types import SimpleNamespace

    bench = load_script("benchmarks/bench_hf.py")
    calls: list[str] = []

    class Stub(torch.nn.Module):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name, self.config = name, SimpleNamespace(vocab_size=8)

        def forward(self, input_ids, logits_to_keep, use_cache):
            calls.append(self.name)

    got = bench.prefill_ms({"a": Stub("a"), "b": Stub("b")}, 1, 4, "cpu", rounds=2, block=bench.SETTLE + 2)
    block = bench.SETTLE + 2
    assert calls == (["a"] * block + ["b"] * block) * 2
    assert set(got) == {"a", "b"} and all(set(v) == {"ms"} and v["ms"] >= 0 for v in got.values())
    class Meter:  # NVML's energy counter (mJ) and SM clock, as cutlass_nm.bench.energy reads them
        mj = 0

        def millijoules(self) -> int:
            Meter.mj += 500
            return Meter.mj

        def sm_clock_mhz(self) -> float:
            return 1500.0

    got = bench.prefill_ms({"a": Stub("a")}, 1, 4, "cpu", rounds=2, block=block, meter=Meter())
    assert got["a"]["sm_clock_mhz"] == 1500.0 and got["a"]["power_w"] > 0  # 0.5 J a block over its timed forwards
