# Ours (the subset): the model families the field corpus trains (vgg: torchmetrics imports it), and the builder API they register into.
from .resnet import *  # noqa: F401,F403
from .vgg import *  # noqa: F401,F403
from .vision_transformer import *  # noqa: F401,F403
from ._api import get_model, get_model_builder, get_model_weights, get_weight, list_models, Weights, WeightsEnum  # noqa: F401
