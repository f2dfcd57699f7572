// One metadata layout for every config of a weight: a tile K >= 128 kernel of the 16-bit sparse families reads the
// tile K 64 atom (two atoms a k-tile), which CUTLASS would make 128 columns wide, so all tile Ks share one copy.
namespace cutlass {
template <class ElementAMma_, class ElementEMma_>
struct Sm90GemmSparseConfig<ElementAMma_, cute::GMMA::Major::K, ElementEMma_, cute::Int<128>>
    : Sm90GemmSparseConfig<ElementAMma_, cute::GMMA::Major::K, ElementEMma_, cute::Int<64>> {};
}  // namespace cutlass

