# A stand-in for a PyTorch built for NumPy 1.x (spec/first_hour_spec.lua): it asks for the NumPy 1 C API
# as its extension does, and warns as torch 1.13 does when that fails.
import warnings
try:
    import numpy.core._multiarray_umath as m
    m._ARRAY_API
except ImportError as e:
    warnings.warn("Failed to initialize NumPy: " + str(e).splitlines()[0])
__version__ = "1.13-fake"
