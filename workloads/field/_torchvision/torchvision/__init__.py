"""Load the installed torchvision beside the CPU build of torch.

torchvision 0.28.0 (the release that matches torch 2.13.0) is published on PyPI as a CUDA build: its
compiled ``_C.so`` links ``libtorch_cuda.so`` and does not load beside the CPU torch, and then
``import torchvision`` dies registering a fake kernel for the operator ``torchvision::nms``, which only
``_C.so`` would have defined. The field corpus's scripts use only torchvision's Python (models, FakeData,
transforms, save_image), so this package — first on the scripts' ``PYTHONPATH`` — defines the schemas of
the two operators that import needs (``nms``, ``qnms``, exactly as torchvision declares them) and then runs
the installed torchvision's own ``__init__`` as this package. Nothing of torchvision is copied or changed;
calling ``torchvision.ops.nms`` still fails, as it does with that wheel anywhere without CUDA.
"""

import os
import sys

import torch


def _installed_torchvision() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(os.path.abspath(entry or "."), "torchvision")
        if candidate != here and os.path.isfile(os.path.join(candidate, "__init__.py")):
            return candidate
    raise ImportError("torchvision is not installed (pip install -c constraints.txt -e '.[test]')")


def _define_missing_schemas(real: str) -> None:
    """Define the ops' schemas only where torchvision's own ``_C.so`` cannot load (a CPU torch)."""
    try:
        torch.ops.load_library(os.path.join(real, "_C.so"))
        return  # a torch it was built for: torchvision defines its operators itself
    except (OSError, RuntimeError):
        pass
    schemas = torch.library.Library("torchvision", "DEF")
    schemas.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    schemas.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    globals()["_schemas"] = schemas  # a Library deregisters its definitions when collected


_real = _installed_torchvision()
_define_missing_schemas(_real)
__path__ = [_real]
__file__ = os.path.join(_real, "__init__.py")
with open(__file__, encoding="utf-8") as _source:
    exec(compile(_source.read(), __file__, "exec"), globals())
