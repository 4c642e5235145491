from .transforms import *
from .autoaugment import *
