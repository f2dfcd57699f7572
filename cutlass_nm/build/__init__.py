"""Compile emitted sources with nvcc into an on-disk cache of shared libraries, and load them."""

from .compiler import Artifact, BuildEvent, build, build_many, cache_dir

__all__ = ["Artifact", "BuildEvent", "build", "build_many", "cache_dir"]
