"""nvcc compile checks (CPU only): one sm90 and one sm80 variant, in parallel, through the cache."""

import ctypes

import pytest

from cutlass_nm.families import KernelTypes, get_family
from cutlass_nm.kernels import precompile

pytestmark = pytest.mark.nvcc


def test_compile_sm90_and_sm80_then_hit_cache(isolated_cache):
    sm90, sm80 = get_family("sptc24_sm90"), get_family("sptc24_sm80")
    cfg90 = sm90.Config(tile_m=128, tile_n=128, tile_k=128, cluster_m=1, cluster_n=2, scheduler="streamk",
                        raster="n")
    kids = [("sptc24_sm90", cfg90, KernelTypes("f16", "f16", True)),
            ("sptc24_sm80", sm80.Config(), KernelTypes("bf16", "bf16", False))]
    first = precompile(kids, workers=2)
    assert all(not isinstance(r, Exception) for r in first), first
    assert all(r.built and r.path.exists() for r in first)
    again = precompile(kids, workers=2)
    assert [r.built for r in again] == [False, False]
    assert [r.path for r in again] == [r.path for r in first]
    lib90 = ctypes.CDLL(str(first[0].path))
    assert lib90.cnm_abi_version() == 4  # cnm_run and cnm_plan take the metadata pitch
    lib90.cnm_plan_bytes.restype = ctypes.c_size_t
    assert lib90.cnm_plan_bytes() >= 4 * 128  # a plan holds the TMA descriptors of A, E, B and D
    assert lib90.cnm_workspace_size(256, 256, 16384, 132, 1, 2) > 0  # 4 tiles on 132 SMs: stream-K splits K
    assert lib90.cnm_meta_atom_k() == 64  # tile K 128 reads the tile K 64 atom: one metadata copy a weight
    lib80 = ctypes.CDLL(str(first[1].path))
    assert lib80.cnm_elements_per_meta() > 0


def test_a_compile_error_is_reported_with_its_log(isolated_cache):
    from cutlass_nm import BuildError
    from cutlass_nm.build import build

    with pytest.raises(BuildError, match="full log"):
        build("this is not C++;", "sm_90a", name="broken")


def test_compile_nm_decode(isolated_cache):
    dec = get_family("nm_decode_simt")
    cfg = dec.Config(max_tokens=16, warps=4, rows=2)
    (res,) = precompile([("nm_decode_simt", cfg, KernelTypes("bf16", "f32", True))])
    assert not isinstance(res, Exception), res
    lib = ctypes.CDLL(str(res.path))
    assert lib.cnm_abi_version() == 3 and lib.cnm_block_rows() == cfg.warps * cfg.rows
    assert hasattr(lib, "cnm_max_active_clusters")  # abi 3: the occupancy query, and cnm_run's pdl flag


_TEMPLATE_STATIC = """
template <int K> int remember(int value) { static int kept = 0; int old = kept; if (value) kept = value; return old; }
extern "C" int probe_{name}(int value) {{ return remember<1>(value); }}
"""


def test_each_library_keeps_its_own_template_statics(isolated_cache):
    """Two kernels built with the same header template (a launch helper's "attribute set" flag, say) do not share
    its static: each library loaded in the process keeps its own (no STB_GNU_UNIQUE merging)."""
    from cutlass_nm.build import build

    libs = {}
    for name in ("first", "second"):
        source = _TEMPLATE_STATIC.replace("{{", "{").replace("}}", "}").replace("{name}", name)
        libs[name] = ctypes.CDLL(str(build(source, "sm_90a", name=name).path))
    assert libs["first"].probe_first(7) == 0
    assert libs["second"].probe_second(0) == 0  # merged, it would read the first library's 7
    assert libs["first"].probe_first(0) == 7
