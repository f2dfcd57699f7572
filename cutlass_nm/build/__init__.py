"""Compile emitted sources with nvcc into an on-disk cache of shared libraries, and load them."""

from .compiler import Artifact, build, build_many, cache_dir

__all__ = ["Artifact", "build", "build_many", "cache_dir"]
