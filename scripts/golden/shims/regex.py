"""`regex` as the standard library's `re`: transformers' utils (docstring processing) import
regex at module level and use only patterns that `re` accepts."""

from re import *  # noqa: F401,F403
from re import __all__  # noqa: F401
