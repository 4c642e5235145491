# Ours (the subset): only the pure-Python layers of torchvision.ops the vision transformer uses.
from .misc import Conv2dNormActivation, MLP  # noqa: F401
