"""Weight formats: prune, compress, decompress and validate, one module per packing format."""

from .sparse24 import Sparse24Weight, compress_24, mask_24, prune_24, validate_24

__all__ = ["Sparse24Weight", "compress_24", "mask_24", "prune_24", "validate_24"]
