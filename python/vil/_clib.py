"""_clib.py: libvil.so through ctypes: finding it, its version, the structs of include/vil.h, the
calls' error checks, and the contexts the package keeps (one CPU context per thread count, one
CUDA context per GPU, each with its lock: include/vil.h's handles are not locked). Nothing here
imports torch; the library is opened at the first call that needs it, not at import."""
import ctypes
import ctypes.util
import os
import sys
import threading

# The library versions this package is written against: include/vil.h's VIL_VERSION_NUMBER,
# MAJOR * 10000 + MINOR * 100 + PATCH. The structs below are 0.9's; a 0.x minor may change them.
EXPECT_MIN = 900
EXPECT_BELOW = 1000

VIL_OK, VIL_ERR, VIL_ERR_ARG = 0, -1, -2
SCAN_LONGHORN, SCAN_MAMBA = 0, 1
RECURRENCES = {"longhorn": SCAN_LONGHORN, "mamba": SCAN_MAMBA}


class VilError(RuntimeError):
    """A libvil call failed; the message is vil_last_error()'s. code: VIL_ERR (-1: a file, the
    device, memory) or VIL_ERR_ARG (-2: the caller's misuse)."""

    def __init__(self, msg, code=VIL_ERR):
        super().__init__(msg)
        self.code = code


class LibraryNotFound(ImportError):
    """libvil.so could not be opened; the message lists where the package looked."""


# ---- the structs of include/vil.h (field for field; tests/python: test_structs compares the
# offsets with a C compiler's) ----
c_int, c_float, c_char_p, c_void_p = ctypes.c_int, ctypes.c_float, ctypes.c_char_p, ctypes.c_void_p
P_float = ctypes.POINTER(ctypes.c_float)


class LoadOpts(ctypes.Structure):
    _fields_ = [("img_size", c_int), ("ema", c_int)]


class ClassifierInfo(ctypes.Structure):
    _fields_ = [("family", c_char_p), ("recurrence", c_char_p), ("name", c_char_p),
                ("n_params", ctypes.c_longlong), ("n_classes", c_int), ("img_size", c_int),
                ("trained_img_size", c_int), ("in_chans", c_int), ("patch_size", c_int), ("stride", c_int),
                ("embed_dim", c_int), ("depth", c_int), ("d_state", c_int), ("d_inner", c_int),
                ("seq_len", c_int), ("cls_pos", c_int), ("crop_pct", c_float), ("crop_from", c_char_p),
                ("mean", c_float * 3), ("std", c_float * 3), ("step", ctypes.c_longlong),
                ("has_class_names", c_int)]


class Transform(ctypes.Structure):
    _fields_ = [("img_size", c_int), ("channels", c_int), ("crop_pct", c_float),
                ("mean", c_float * 3), ("std", c_float * 3)]


class ParamInfo(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("ndim", c_int), ("shape", ctypes.c_int64 * 4), ("numel", ctypes.c_size_t)]


_SHAPE = [("rec", c_int), ("B", c_int), ("L", c_int), ("E", c_int), ("N", c_int), ("dt_ld", c_int),
          ("xdbl_ld", c_int), ("ldz", c_int)]
_INPUTS = [("u", c_void_p * 2), ("delta", c_void_p * 2), ("xdbl", c_void_p * 2), ("z", c_void_p),
           ("D", P_float * 2), ("A_log", P_float * 2), ("h0", P_float)]


class ScanFwd(ctypes.Structure):
    _fields_ = _SHAPE + _INPUTS + [("out", c_void_p), ("hT", P_float)]


class ScanBwd(ctypes.Structure):
    _fields_ = _SHAPE + _INPUTS + [("dout", c_void_p), ("du", c_void_p * 2), ("ddelta", c_void_p * 2),
                                   ("dxdbl", c_void_p * 2), ("dz", c_void_p), ("dD", P_float * 2),
                                   ("dA_log", P_float * 2), ("ddelta_sum", P_float * 2)]


_CONV = [("B", c_int), ("L", c_int), ("E", c_int), ("K", c_int), ("ldx", c_int), ("x", c_void_p),
         ("w", P_float * 2), ("b", P_float * 2)]


class ConvFwd(ctypes.Structure):
    _fields_ = _CONV + [("u", c_void_p * 2)]


class ConvBwd(ctypes.Structure):
    _fields_ = _CONV + [("du", c_void_p * 2), ("dx", c_void_p), ("dw", P_float * 2), ("db", P_float * 2)]


STRUCTS = {"vil_load_opts": LoadOpts, "vil_classifier_info": ClassifierInfo, "vil_transform": Transform,
           "vil_param_info": ParamInfo, "vil_scan_fwd": ScanFwd, "vil_scan_bwd": ScanBwd, "vil_conv_fwd": ConvFwd,
           "vil_conv_bwd": ConvBwd}

# name: (restype, argtypes); an int restype is a status checked by check()
_H = c_void_p  # vil_ctx *, vil_classifier *
_SIGS = {
    "vil_version_number": (c_int, []),
    "vil_version_text": (c_char_p, []),
    "vil_last_error": (c_char_p, []),
    "vil_ctx_new": (c_int, [c_char_p, c_int, c_int, ctypes.POINTER(_H)]),
    "vil_ctx_free": (c_int, [_H]),
    "vil_ctx_device_name": (c_char_p, [_H]),
    "vil_ctx_sync": (c_int, [_H]),
    "vil_classifier_load": (c_int, [_H, c_char_p, ctypes.POINTER(LoadOpts), ctypes.POINTER(_H)]),
    "vil_classifier_free": (None, [_H]),
    "vil_classifier_get_info": (c_int, [_H, ctypes.POINTER(ClassifierInfo)]),
    "vil_classifier_class_name": (c_char_p, [_H, c_int]),
    "vil_classifier_input_size": (ctypes.c_size_t, [_H]),
    "vil_classifier_get_transform": (c_int, [_H, ctypes.POINTER(Transform)]),
    "vil_classifier_transform_file": (c_int, [_H, c_char_p, c_float, c_void_p]),
    "vil_transform_file": (c_int, [ctypes.POINTER(Transform), c_char_p, c_void_p]),
    "vil_transform_pixels": (c_int, [ctypes.POINTER(Transform), c_void_p, c_int, c_int, c_int, ctypes.c_size_t,
                                     c_void_p]),
    "vil_classifier_forward": (c_int, [_H, c_void_p, c_int, c_void_p]),
    "vil_classifier_param_count": (c_int, [_H]),
    "vil_classifier_param_get_info": (c_int, [_H, c_int, ctypes.POINTER(ParamInfo)]),
    "vil_classifier_param_read": (c_int, [_H, c_char_p, c_void_p, ctypes.c_size_t, c_int]),
    "vil_classifier_param_write": (c_int, [_H, c_char_p, c_void_p, ctypes.c_size_t, c_int]),
    "vil_classifier_save": (c_int, [_H, c_char_p]),
    "vil_scan_forward": (c_int, [_H, ctypes.POINTER(ScanFwd), c_void_p]),
    "vil_scan_backward": (c_int, [_H, ctypes.POINTER(ScanBwd), c_void_p]),
    "vil_conv_forward": (c_int, [_H, ctypes.POINTER(ConvFwd), c_void_p]),
    "vil_conv_backward": (c_int, [_H, ctypes.POINTER(ConvBwd), c_void_p]),
}

_lock = threading.Lock()
_lib = None
_lib_path = None


def _package_root():
    return os.path.dirname(os.path.abspath(__file__))


def candidates():
    """Where the library is looked for, in order, as (what, path): $VIL_LIB alone when it is set;
    else the build folders of the vil checkout this package sits in (python/vil inside it), then
    the install prefix (the loader's path through ctypes.util.find_library, $PREFIX/lib,
    sys.prefix/lib, /usr/local/lib: `make install`'s default)."""
    env = os.environ.get("VIL_LIB")
    if env:
        return [("$VIL_LIB", env)]
    out = []
    repo = os.path.normpath(os.path.join(_package_root(), "..", ".."))
    if os.path.isfile(os.path.join(repo, "include", "vil.h")):
        for b in ("build", os.path.join("build", "cpu")):
            out.append((f"the checkout's {b}/lib", os.path.join(repo, b, "lib", "libvil.so")))
    found = ctypes.util.find_library("vil")
    if found:
        out.append(("the loader's path (ldconfig)", found))
    for what, prefix in (("$PREFIX/lib", os.environ.get("PREFIX")), ("sys.prefix/lib", sys.prefix),
                         ("/usr/local/lib", "/usr/local")):
        if prefix:
            out.append((what, os.path.join(prefix, "lib", "libvil.so")))
    return out


def _open(path):
    lib = ctypes.CDLL(path)
    for name, (res, args) in _SIGS.items():
        f = getattr(lib, name)  # AttributeError: not a libvil of this API
        f.restype, f.argtypes = res, args
    return lib


def lib():
    """The opened library (opened once), after its version check."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for what, path in candidates():
            if what != "$VIL_LIB" and os.sep in path and not os.path.exists(path):
                tried.append(f"  {what}: {path} (no such file)")
                continue
            try:
                lb = _open(path)
            except (OSError, AttributeError) as e:
                tried.append(f"  {what}: {path} ({e})")
                if what == "$VIL_LIB":
                    break
                continue
            v = lb.vil_version_number()
            if not EXPECT_MIN <= v < EXPECT_BELOW:
                have = f"{v // 10000}.{v // 100 % 100}.{v % 100}"
                raise LibraryNotFound(
                    f"vil: {path} is libvil {have} ({lb.vil_version_text().decode()}); this package is written "
                    f"for libvil {EXPECT_MIN // 10000}.{EXPECT_MIN // 100 % 100}.x: build the vil that came "
                    f"with this package, or point VIL_LIB at its build/lib/libvil.so")
            _lib, _lib_path = lb, path
            return _lib
        raise LibraryNotFound(
            "vil: libvil.so not found. Build it (`make` in the vil checkout: build/lib/libvil.so; "
            "`make CUDA=0 BUILD=build/cpu build/cpu/lib/libvil.so` for a CPU-only one), install it "
            "(`make install`), or set VIL_LIB to the file. Looked at:\n" + "\n".join(tried))


def library_path():
    lib()
    return _lib_path


def last_error():
    return (lib().vil_last_error() or b"").decode("utf-8", "replace")


def check(rc, what):
    """rc of a libvil call: raises VilError (ValueError's message for VIL_ERR_ARG) unless VIL_OK.
    Read on the calling thread (vil_last_error is per thread)."""
    if rc != VIL_OK:
        msg = last_error() or f"{what} failed ({rc})"
        raise VilError(msg, rc)


def text(b):
    return b.decode("utf-8", "replace") if b else ""


# ---- contexts ----
class Context:
    """A vil_ctx and the lock its calls take (a context is used by one thread at a time)."""

    def __init__(self, device, index=0, threads=0):
        h = c_void_p()
        lb = lib()
        check(lb.vil_ctx_new(device.encode(), index, threads, ctypes.byref(h)), f"vil_ctx_new({device})")
        self.h, self.device, self.index, self.threads = h, device, index, threads
        self.lock = threading.Lock()
        self.pinned = False  # a CUDA graph holds kernels that use this context's scratch memory

    def name(self):
        return text(lib().vil_ctx_device_name(self.h))


_cpu_ctxs = {}
_ctx_lock = threading.Lock()


def cpu_context(threads):
    """The CPU context with that many OpenMP threads (one per count, kept for the process)."""
    threads = max(1, int(threads))
    with _ctx_lock:
        c = _cpu_ctxs.get(threads)
        if c is None:
            c = _cpu_ctxs[threads] = Context("cpu", 0, threads)
        return c
