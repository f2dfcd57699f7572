// Prints CUTLASS's sm90 sparse metadata layout (Sm90GemmSparseConfig::fill_layoutE, K-major A of 16 or 8 bits)
// as "row col byte" lines, for tests/test_meta_layouts.py to compare with cutlass_nm.formats.meta_sm90.
// Usage: sm90_meta_layout ROWS K ATOM_K [BITS]
#include <cstdio>
#include <cstdlib>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cute/arch/mma_sm90_desc.hpp"
#include "cutlass/gemm/collective/builders/sm90_sparse_config.inl"

template <class ElementA, int AtomK>
int dump(int rows, int k) {
  using namespace cute;
  using Config = cutlass::Sm90GemmSparseConfig<sparse_elem<2, ElementA>, GMMA::Major::K, sparse_elem<8, uint8_t>,
                                               Int<AtomK>>;
  auto layout = Config::fill_layoutE(make_tuple(rows, 1, k, 1));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < k; c += 8)
      std::printf("%d %d %lld\n", r, c, static_cast<long long>(layout(r, c, 0)) / 8);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) return 2;
  int rows = std::atoi(argv[1]), k = std::atoi(argv[2]), atom = std::atoi(argv[3]);
  int bits = argc == 5 ? std::atoi(argv[4]) : 16;
  if (bits == 8) {
    switch (atom) {
      case 64: return dump<cutlass::float_e4m3_t, 64>(rows, k);
      case 128: return dump<cutlass::float_e4m3_t, 128>(rows, k);
      default: return 2;
    }
  }
  switch (atom) {
    case 32: return dump<cutlass::half_t, 32>(rows, k);
    case 64: return dump<cutlass::half_t, 64>(rows, k);
    case 128: return dump<cutlass::half_t, 128>(rows, k);
    default: return 2;
  }
}
