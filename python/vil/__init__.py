"""vil from PyTorch: ViL and ViM as torch modules with vil's parameter names and math, vil's files
and evaluation transform, and vil's bidirectional Longhorn and Mamba scans as autograd
functions, all through libvil's C API with ctypes (nothing is compiled against torch).

    import vil
    model = vil.load("out/run", device="cuda")        # any file vil reads -> a torch.nn.Module
    x = vil.read_image("cat.jpg", model)[None]        # vil classify's transform, (1, C, H, W)
    logits = model(x.cuda())
    vil.save(model, "tuned.safetensors")              # what `vil eval` and `vil classify` read
    out = vil.ops.scan_bidir(u, delta, xdbl, z, D, A_log, recurrence="mamba", dt_ld=R, N=16)

libvil.so is found through $VIL_LIB, the build folders of the vil checkout this package sits in,
or the install prefix (vil.library_path() says which); README.md has the details."""
from . import ops, reference
from ._clib import LibraryNotFound, VilError, library_path
from .files import load, metadata, read_image, save
from .model import Classifier, make_config

__version__ = "0.9.0"
__all__ = ["Classifier", "LibraryNotFound", "VilError", "library_path", "library_version", "load", "make_config",
           "metadata", "ops", "read_image", "reference", "save"]


def library_version():
    """libvil's version text ("vil 0.9.0 (git ...)")"""
    from . import _clib
    return _clib.text(_clib.lib().vil_version_text())
