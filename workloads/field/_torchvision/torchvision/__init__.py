# A pure-Python subset of torchvision 0.28.0 (BSD-3-Clause, ../LICENSE), vendored for the field corpus:
# the PyPI wheel of torchvision 0.28.0 is a CUDA build whose compiled ops do not load beside the CPU torch
# 2.13.0 ("operator torchvision::nms does not exist"), so the files the corpus scripts use are copied
# verbatim from that wheel; only the package __init__ files are ours (they import just those files).
__version__ = "0.28.0-subset"
from . import datasets, models, transforms, utils  # noqa: E402,F401
