"""PyTorch 2 dtype names that llama.cpp's converter lists in tables, absent from Debian's
torch 1.13. The golden configs never produce tensors of these types; the names only have to
exist (as distinct keys) for the converter's modules to import."""
import torch

for _name in ("float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64"):
    if not hasattr(torch, _name):
        setattr(torch, _name, type(_name, (), {"__repr__": lambda self, n=_name: "torch." + n})())
