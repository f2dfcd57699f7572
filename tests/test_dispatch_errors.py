"""matmul's input rules, checked on the CPU (they run before anything touches a GPU)."""

import pytest
import torch

import cutlass_nm
from cutlass_nm import InputError, ShapeError
from cutlass_nm.hf import sparsify_model
from cutlass_nm.patterns import Pattern
from cutlass_nm.routing import default_family


@pytest.fixture
def w():
    return cutlass_nm.compress(torch.randn(256, 512, dtype=torch.float16), "2:4", prune=True)


def test_dense_weight_is_rejected():
    with pytest.raises(InputError, match="compressed weight"):
        cutlass_nm.matmul(torch.randn(4, 512, dtype=torch.float16), torch.randn(256, 512, dtype=torch.float16))


def test_non_tensor_x_is_rejected(w):
    for x in (None, [[1.0] * 512], 3.0):
        with pytest.raises(InputError, match=r"x must be a torch\.Tensor"):
            cutlass_nm.matmul(x, w)
    w8 = cutlass_nm.prune(torch.randn(256, 512, dtype=torch.bfloat16), "2:4", dtype=torch.float8_e4m3fn)[0]
    with pytest.raises(InputError, match=r"x must be a torch\.Tensor"):
        cutlass_nm.matmul(None, w8)


def test_selector_and_tuning_db_arguments_are_checked():
    with pytest.raises(InputError, match=r"selector\(family, problem\); got a int"):
        cutlass_nm.set_selector(5)
    with pytest.raises(InputError, match="takes a database URL string"):
        cutlass_nm.use_tuning_db(5)
    cutlass_nm.set_selector(None)


def test_sparsify_takes_a_module():
    with pytest.raises(InputError, match=r"takes an nn\.Module"):
        cutlass_nm.sparsify(5, "2:4")
    with pytest.raises(InputError, match=r"takes an nn\.Module"):
        sparsify_model("a model name", "2:4")


def test_wrong_dtype(w):
    with pytest.raises(InputError, match="float16 or bfloat16"):
        cutlass_nm.matmul(torch.randn(4, 512), w)
    with pytest.raises(InputError, match="dtype mismatch"):
        cutlass_nm.matmul(torch.randn(4, 512, dtype=torch.bfloat16), w)


def test_wrong_inner_dim(w):
    with pytest.raises(InputError, match="in_features 512"):
        cutlass_nm.matmul(torch.randn(4, 256, dtype=torch.float16), w)


def test_non_contiguous(w):
    with pytest.raises(InputError, match="contiguous"):
        cutlass_nm.matmul(torch.randn(512, 4, dtype=torch.float16).T, w)


def test_misaligned(w):
    buf = torch.randn(4 * 512 + 1, dtype=torch.float16)
    with pytest.raises(InputError, match="16-byte aligned"):
        cutlass_nm.matmul(buf[1:].view(4, 512), w)


def test_bad_bias(w):
    x = torch.randn(4, 512, dtype=torch.float16)
    with pytest.raises(InputError, match="shape"):
        cutlass_nm.matmul(x, w, torch.randn(255, dtype=torch.float16))
    with pytest.raises(InputError, match="bias dtype"):
        cutlass_nm.matmul(x, w, torch.randn(256))


def test_cpu_tensor(w):
    with pytest.raises(InputError, match="CUDA tensor"):
        cutlass_nm.matmul(torch.randn(4, 512, dtype=torch.float16), w)


def test_weight_not_24_is_rejected_at_compress():
    from cutlass_nm import SparsityError

    with pytest.raises(SparsityError, match="not 2:4"):
        cutlass_nm.compress(torch.randn(8, 16, dtype=torch.float16), "2:4")


def test_old_gpus_are_refused(monkeypatch):
    from cutlass_nm import routing
    from cutlass_nm.families.launch import DeviceInfo

    monkeypatch.setattr(routing, "device_info", lambda d: DeviceInfo(80, (7, 5), "T4"))
    with pytest.raises(ShapeError, match=r">= 8\.0"):
        default_family(torch.device("cuda"))


def test_default_family_by_weight_kind_gpu_and_m(monkeypatch):
    from cutlass_nm import routing
    from cutlass_nm.families.launch import DeviceInfo
    from cutlass_nm.formats.nm import NMWeight

    dev = torch.device("cuda")
    monkeypatch.setattr(routing, "device_info", lambda d: DeviceInfo(132, (9, 0), "H100"))
    assert default_family(dev) == "sptc24_sm90"
    assert default_family(dev, cutlass_nm.VNMWeight) == "nm_decode"  # m <= 16: sparse tensor cores, mode 3
    assert default_family(dev, cutlass_nm.VNMWeight, m=16, pattern="128:2:8") == "nm_decode"
    assert default_family(dev, cutlass_nm.VNMWeight, m=16, pattern=Pattern.parse("32:2:16")) == "nm_decode"
    assert default_family(dev, cutlass_nm.VNMWeight, m=17) == "vnm_sm90"
    assert default_family(dev, cutlass_nm.VNMWeight, m=2048) == "vnm_sm90"
    # N:M at m <= 16: tensor cores where a multiple of 32 rows share positions, else CUDA cores (unknown: 0)
    assert default_family(dev, NMWeight, m=16, pattern="2:8", vector=32) == "nm_decode"
    assert default_family(dev, NMWeight, m=1, pattern="3:7", vector=128) == "nm_decode"
    assert [default_family(dev, NMWeight, m=16, pattern="2:8", vector=v) for v in (0, 1, 8, 16, 48)] == [
        "nm_decode_simt"] * 5
    assert default_family(dev, NMWeight, m=16) == "nm_decode_simt"
    assert default_family(dev, NMWeight, m=17, vector=32) == "nm_simt"
    assert default_family(dev, NMWeight, m=4, dtype=torch.float32, vector=32) == "nm_simt"
    monkeypatch.setattr(routing, "device_info", lambda d: DeviceInfo(108, (8, 0), "A100"))
    assert default_family(dev, cutlass_nm.VNMWeight, m=64) == "vnm_sm80"
    assert default_family(dev) == "sptc24_sm80"


def test_check_inputs_without_the_device_rule_is_the_cpu_reference_rule(w):
    """dispatch.check_inputs(cuda=False) is every rule but x's device: what the custom ops' CPU path applies."""
    from cutlass_nm.dispatch import check_inputs

    x = torch.randn(4, 512, dtype=torch.float16)
    check_inputs(x, w, None, cuda=False)
    with pytest.raises(InputError, match="CUDA tensor"):
        check_inputs(x, w, None)
    for bad, fragment in ((torch.randn(4, 512), "float16 or bfloat16"),
                          (torch.randn(4, 512, dtype=torch.bfloat16), "dtype mismatch"),
                          (torch.randn(512, 4, dtype=torch.float16).T, "contiguous")):
        with pytest.raises(InputError, match=fragment):
            check_inputs(bad, w, None, cuda=False)


@pytest.mark.parametrize("op", ["sparse24_linear", "vnm_linear", "nm_linear"])
def test_cpu_op_path_refuses_what_the_gpu_path_refuses(op):
    """dtype mismatch, fp32 x with a Tensor Core weight, misaligned x, bias dtype: refused on the CPU too."""
    pattern, dtype = {"sparse24_linear": ("2:4", torch.float16), "vnm_linear": ("64:2:8", torch.float16),
                      "nm_linear": ("3:7", torch.float32)}[op]
    c = cutlass_nm.compress(torch.randn(64, 128, dtype=dtype), pattern, prune=True)
    if op == "sparse24_linear":
        def call(x, bias=None):
            return torch.ops.cutlass_nm.sparse24_linear(x, c.values, c.meta, bias)
    elif op == "vnm_linear":
        def call(x, bias=None):
            return torch.ops.cutlass_nm.vnm_linear(x, c.values, c.columns, c.meta, 64, 8, 128, bias)
    else:
        def call(x, bias=None):
            return torch.ops.cutlass_nm.nm_linear(x, c.values, c.indices, 3, 7, 128, 32, bias)
    x = torch.randn(4, 128, dtype=dtype)
    torch.testing.assert_close(call(x), x @ c.to_dense().T)
    with pytest.raises(InputError, match="dtype mismatch"):
        call(torch.randn(4, 128, dtype=torch.bfloat16))
    if dtype != torch.float32:
        with pytest.raises(InputError, match="float16 or bfloat16 for a"):
            call(torch.randn(4, 128))
    with pytest.raises(InputError, match="16-byte aligned"):
        call(torch.randn(4 * 128 + 1, dtype=dtype)[1:].view(4, 128))
    with pytest.raises(InputError, match="bias dtype"):
        call(x, torch.zeros(64, dtype=torch.float64))
    assert call(torch.empty(0, 128, dtype=dtype)).shape == (0, 64)  # m = 0: empty result


def test_fp32_weights_with_tensor_core_patterns_cannot_be_built():
    """fp32 2:4 / V:N:M weights can never run: refused at compress, so matmul never sees one."""
    for pattern in ("2:4", "128:2:8"):
        with pytest.raises(InputError, match="which takes the dtypes f16/bf16"):
            cutlass_nm.compress(torch.randn(256, 512), pattern, prune=True)


def test_default_choice_is_what_matmul_resolves(monkeypatch):
    """dispatch.default_choice (planning without a weight or a GPU) picks the family, config and kernel types that
    matmul's own resolution picks for the same problems on an sm_90 GPU, for every weight kind and m range."""
    from cutlass_nm import dispatch, routing
    from cutlass_nm.families import KernelTypes, Problem
    from cutlass_nm.families.launch import DeviceInfo
    from cutlass_nm.formats import weight_class

    monkeypatch.setattr(routing, "device_info", lambda d: DeviceInfo(132, (9, 0), "H100"))
    monkeypatch.setattr(dispatch, "_selector", lambda family, problem: None)  # heuristics: no DB, no shipped file
    cases = [("2:4", 1), ("2:4", 16), ("2:4", 512), ("128:2:8", 16), ("128:2:8", 2048), ("2:8", 1), ("2:8", 300)]
    for pattern, m in cases:
        w = cutlass_nm.prune(torch.randn(256, 512, dtype=torch.float16), pattern)[0]
        key = dispatch._key(m, w, torch.float16, torch.float16, False, torch.device("cuda"), None)  # matmul's key
        family, cfg, _, problem = dispatch._choose(key)
        vector = getattr(w, "vector", 0) if type(w) is cutlass_nm.NMWeight else 0
        planned = dispatch.default_choice(Problem(m, 256, 512, KernelTypes("f16", "f16", False), pattern, vector),
                                          weight_class(Pattern.parse(pattern)), lambda f, p: None)
        assert (planned[0].name, planned[1], planned[3].types) == (family.name, cfg, problem.types), (pattern, m)
