"""Pick the array namespace `xp` the kernels run on, and move arrays back to the host.

Kernels take `xp` as their first argument so one source runs on numpy (CPU), cupy (GPU) and
array_api_strict (tests: it refuses anything outside the standard that cupy may lack).
"""
import functools
import types

import array_api_compat
import numpy as np

BACKENDS = ("numpy", "cupy", "auto")


def _cupy():
    try:
        import array_api_compat.cupy as xp
    except ImportError as e:
        raise ImportError(
            "backend 'cupy' needs the cupy package (e.g. pip install cupy-cuda12x) and a "
            "CUDA GPU; use backend 'numpy' or 'auto' on machines without one"
        ) from e
    return xp


def gpu_visible() -> bool:
    """Whether cupy is importable and sees a CUDA device."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # not installed, no driver, no device: all mean "no GPU here"
        return False


# Functions array_api_compat.numpy wraps although numpy 2 (pinned) has them with the standard's
# signature and meaning. Not among them: sort and argsort (numpy's default is not stable) and
# unique_values (numpy 2.3's is unsorted; callers here read it as sorted); nor astype, whose
# wrapper calls the method, faster than np.astype.
_NATIVE = ("arange", "asarray", "cumulative_sum", "empty", "full", "full_like",
           "iinfo", "nonzero", "ones", "ones_like", "zeros", "zeros_like")


@functools.cache
def _host():
    """array_api_compat.numpy with numpy's own functions where the wrapper only adds checks:
    a wrapper costs microseconds a call, and a driver step makes thousands of calls. Built at
    the first ask, as the plain import was (array_api_compat.numpy takes ~0.2 s to import)."""
    import array_api_compat.numpy as compat

    xp = types.ModuleType(compat.__name__)
    xp.__dict__.update(vars(compat))
    xp.__dict__.update({name: getattr(np, name) for name in _NATIVE})
    return xp


def namespace(name):
    """The array namespace for "numpy", "cupy", "strict" or "auto" (cupy if a GPU is visible)."""
    if name == "numpy":
        return _host()
    if name == "cupy":
        return _cupy()
    if name == "strict":
        import array_api_strict as xp

        return xp
    if name == "auto":
        return _cupy() if gpu_visible() else namespace("numpy")
    raise ValueError(f"unknown array backend {name!r}: expected one of {BACKENDS + ('strict',)}")


def to_numpy(xp, arr):
    """Host numpy copy (or view) of `arr`: for the Arrow boundary only, never inside kernels."""
    if array_api_compat.is_cupy_namespace(xp):
        return arr.get()
    return np.asarray(arr)
