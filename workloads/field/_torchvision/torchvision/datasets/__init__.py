# Ours (the subset): the synthetic dataset the scripts' --dummy paths use.
from .fakedata import FakeData  # noqa: F401
from .vision import VisionDataset  # noqa: F401
