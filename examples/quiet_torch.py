"""import_torch(): PyTorch, or None where it is not installed, without the NumPy-1.x noise.

A PyTorch built against NumPy 1.x (Debian 12's python3-torch 1.13) imported beside NumPy >= 2
makes NumPy print a 10-line "A module that was compiled using NumPy 1.x cannot be run in NumPy
2..." message with a traceback to stderr, then torch warns "Failed to initialize NumPy". Nothing
breaks for DLPack: torch only loses torch.from_numpy / t.numpy(), and torch.from_dlpack and
numpy.from_dlpack exchange through the DLPack protocol instead. This import keeps exactly that
message and warning out of stderr and lets anything else through.
"""
import contextlib
import io
import sys
import warnings

_NUMPY_1X_MESSAGE = "A module that was compiled using NumPy 1.x cannot be run in"


def import_torch():
    captured = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(captured):
            warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
            import torch
    except ImportError:
        torch = None
    text = captured.getvalue()
    if text and _NUMPY_1X_MESSAGE not in text:
        sys.stderr.write(text)  # not the known message: say it
    return torch
