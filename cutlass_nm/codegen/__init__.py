"""Code generation: the only place that imports ``cutlass_library``.

Kernel bodies come from CUTLASS's own emitters; each family's template (``families/<name>/kernel.cu``) wraps
them in a small C ABI (``cnm_*`` functions) that ctypes loads. Only validated integers and enum members reach
these functions, never free-form strings. ``sparse_mainloop.cuh`` is device code shared by the sm90 templates,
``stream_loads.cuh`` by the decode templates.
"""
