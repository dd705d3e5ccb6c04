"""tokroute: token-level routing between a small model on the device and a large model on a server, from Python.

A thin, typed layer over libtokroute.so (the public C API of include/tokroute.h, through ctypes: nothing of the
engine is implemented twice). Quick start::

    import tokroute
    with tokroute.Model("stories-student.gguf") as slm, tokroute.Model("stories260K.gguf") as big:
        ctx = slm.context()
        llm = tokroute.LLM.embedded(big)            # or LLM.server("http://127.0.0.1:8080"), LLM.openai(...), ...
        router = tokroute.Router.policy("maxprob")  # or Router.load("router.gguf", slm=slm)
        for tok in ctx.generate("Once upon a time", router=router, llm=llm, tau=0.5, n_predict=32):
            print(tok.text, end="", flush=True)

Errors raise tokroute.Error (the library's status and message). Threads: Model (and its vocab) may be shared;
Context, Router, LLM and a running generation belong to one thread at a time (tokroute.h, "Thread safety"). The
GIL is released while the library works. Collected data: tokroute.data; PyTorch routers: tokroute.torch.
"""
from ._lib import Error, library_path
from ._lib import lib as _clib
from .data import CollectedData, TrainData, open_collected
from .generate import Generation, Stats, Token, generate
from .llm import LLM, LLMStats
from .model import Context, Model, ModelInfo, Vocab, apply_chat_template
from .router import Router, write_mlp_router

__version__ = _clib.tr_version().decode()

__all__ = ["Error", "Model", "ModelInfo", "Vocab", "Context", "Router", "LLM", "LLMStats", "Generation", "Token",
           "Stats", "generate", "apply_chat_template", "write_mlp_router", "CollectedData", "TrainData",
           "open_collected", "library_path", "physical_cores"]


def physical_cores() -> int:
    """Physical CPU cores this process may use (the default thread count)."""
    return _clib.tr_physical_cores()
