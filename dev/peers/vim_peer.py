"""vim_peer.py: the official ViM's Python code (github hustvl/Vim, a plain copy in .peers/Vim) made
importable beside the extensions dev/peers/vim_build.sh built, for bench_torch_ops.py:

    mods = vim_peer.setup(".peers/Vim", "/tmp/vim_build/ext")   # raises ImportError saying why
    mods.selective_scan_fn, mods.create_vim_tiny()

What it adds to the path: the extensions' folder (selective_scan_cuda, causal_conv1d_cuda), the
fork's mamba-1p1p1 (mamba_ssm) and causal-conv1d (causal_conv1d) packages, vim/ (models_mamba and
its rope), and .peers/einops where einops is not installed. Two modules of the fork serve its
language model, not the image model: utils/generation.py (text generation) and utils/hf.py (the
Hugging Face hub), both imported by models_mamba.py and by mamba_ssm/__init__.py (through
MambaLMHeadModel); they need transformers, and the generation names they take from it are gone
from today's transformers. Both become placeholders here (their names fail if called) and
mamba_ssm's package body (those imports only) is skipped; nothing the image model runs goes
through them."""
import importlib
import os
import sys
import types

TINY = "vim_tiny_patch16_224_bimambav2_final_pool_mean_abs_pos_embed_with_midclstok_div2"


def _placeholder(name):
    def fail(*a, **k):
        raise RuntimeError(f"vim_peer: {name} is a placeholder (the fork's language-model utilities are not loaded)")
    return type(name, (), {"__init__": fail}) if name[0].isupper() else fail


def _skip_lm_modules(repo):
    """mamba_ssm as a bare package of the fork's folder, and its two language-model modules as
    placeholders"""
    pkg = types.ModuleType("mamba_ssm")
    pkg.__path__ = [os.path.join(repo, "mamba-1p1p1", "mamba_ssm")]
    sys.modules["mamba_ssm"] = pkg
    for mod, names in (("mamba_ssm.utils.generation", ("GenerationMixin",)),
                       ("mamba_ssm.utils.hf", ("load_config_hf", "load_state_dict_hf"))):
        m = types.ModuleType(mod)
        for n in names:
            setattr(m, n, _placeholder(n))
        sys.modules[mod] = m


def setup(repo, ext_dir):
    """the official modules, imported; ImportError with the reason when something is missing"""
    repo, ext_dir = os.path.abspath(repo), os.path.abspath(ext_dir)
    for f in ("selective_scan_cuda.so", "causal_conv1d_cuda.so"):
        if not os.path.exists(os.path.join(ext_dir, f)):
            raise ImportError(f"no {ext_dir}/{f} (sh dev/peers/vim_build.sh builds it)")
    for d in ("mamba-1p1p1", "causal-conv1d", "vim"):
        if not os.path.isdir(os.path.join(repo, d)):
            raise ImportError(f"no {repo}/{d} (a plain copy of github hustvl/Vim)")
    paths = [ext_dir, os.path.join(repo, "mamba-1p1p1"), os.path.join(repo, "causal-conv1d"), os.path.join(repo, "vim")]
    try:
        import einops  # noqa: F401
    except ImportError:
        paths.append(os.path.join(os.path.dirname(repo), "einops"))
    for p in reversed(paths):
        if p not in sys.path:
            sys.path.insert(0, p)
    _skip_lm_modules(repo)
    ssi = importlib.import_module("mamba_ssm.ops.selective_scan_interface")
    importlib.import_module("models_mamba")  # registers the models with timm
    import timm
    ln = importlib.import_module("mamba_ssm.ops.triton.layer_norm")
    return types.SimpleNamespace(selective_scan_fn=ssi.selective_scan_fn,
                                 create_vim_tiny=lambda **kw: timm.create_model(TINY, **kw), layer_norm=ln, name=TINY)
