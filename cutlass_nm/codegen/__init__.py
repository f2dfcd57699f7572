"""Code generation: the only place that imports ``cutlass_library``.

Kernel bodies come from CUTLASS's own emitters; our templates in ``templates/`` wrap them in a
small C ABI (``cnm_*`` functions) that ctypes loads. Only validated integers and enum members
reach these functions, never free-form strings.
"""
