// Prints CUTLASS's sm90 sparse metadata layout (Sm90GemmSparseConfig::fill_layoutE, 16-bit A, K-major)
// as "row col byte" lines, for tests/test_meta_layouts.py to compare with cutlass_nm.formats.meta_sm90.
// Usage: sm90_meta_layout ROWS K ATOM_K
#include <cstdio>
#include <cstdlib>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cute/arch/mma_sm90_desc.hpp"
#include "cutlass/gemm/collective/builders/sm90_sparse_config.inl"

template <int AtomK>
int dump(int rows, int k) {
  using namespace cute;
  using Config = cutlass::Sm90GemmSparseConfig<sparse_elem<2, cutlass::half_t>, GMMA::Major::K,
                                               sparse_elem<8, uint8_t>, Int<AtomK>>;
  auto layout = Config::fill_layoutE(make_tuple(rows, 1, k, 1));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < k; c += 8)
      std::printf("%d %d %lld\n", r, c, static_cast<long long>(layout(r, c, 0)) / 8);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  int rows = std::atoi(argv[1]), k = std::atoi(argv[2]), atom = std::atoi(argv[3]);
  switch (atom) {
    case 32: return dump<32>(rows, k);
    case 64: return dump<64>(rows, k);
    case 128: return dump<128>(rows, k);
    default: return 2;
  }
}
