"""Shim of einops (rearrange, repeat) for running FlashAttention's rotary reference offline.

einops is not packaged for Debian. This covers the pattern language FlashAttention's
flash_attn/layers/rotary.py, bert_padding.py and tests/test_rotary.py use: named axes, one
`...`, parenthesised groups (composed on either side, `...` allowed inside one), the literal 1
(a new axis of size 1) and integer literals inside a group on the right of repeat (a new
anonymous axis of that size, e.g. "... d -> ... 1 (2 d)"). Sizes of axes the input does not
fix are given as keyword arguments, as in einops. Only torch tensors are accepted. The
operations move data only (reshape, permute, expand), so the values are the input's bits.
"""

import torch

__all__ = ["rearrange", "repeat"]


def _parse_side(text):
    """'b s (t h) ...' -> list of items; an item is a name, '...', an int, or a list of them."""
    items, group = [], None
    for tok in text.replace("(", " ( ").replace(")", " ) ").split():
        if tok == "(":
            if group is not None:
                raise ValueError(f"nested parentheses in einops pattern side {text!r}")
            group = []
        elif tok == ")":
            if group is None:
                raise ValueError(f"unbalanced ')' in einops pattern side {text!r}")
            items.append(group)
            group = None
        else:
            atom = int(tok) if tok.isdigit() else tok
            (group if group is not None else items).append(atom)
    if group is not None:
        raise ValueError(f"unbalanced '(' in einops pattern side {text!r}")
    return items


def _expand_ellipsis(items, n_ellipsis):
    names = [f"...{i}" for i in range(n_ellipsis)]
    out = []
    for it in items:
        if it == "...":
            out.extend(names)
        elif isinstance(it, list):
            sub = []
            for a in it:
                sub.extend(names if a == "..." else [a])
            out.append(sub)
        else:
            out.append(it)
    return out


def _atoms(items):
    for it in items:
        yield from (it if isinstance(it, list) else [it])


def _apply(tensor, pattern, sizes, allow_new):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    left_text, arrow, right_text = pattern.partition("->")
    if not arrow:
        raise ValueError(f"einops pattern must contain '->', got {pattern!r}")
    left, right = _parse_side(left_text), _parse_side(right_text)
    n_left_fixed = sum(1 for it in left if it != "...")
    n_ell = tensor.dim() - n_left_fixed if "..." in left else 0
    if n_ell < 0 or ("..." not in left and tensor.dim() != len(left)):
        raise ValueError(f"pattern {pattern!r} does not fit a tensor of shape {tuple(tensor.shape)}")
    left, right = _expand_ellipsis(left, n_ell), _expand_ellipsis(right, n_ell)

    # Sizes of the left side's elementary axes (a group's unknown member from the others).
    known = dict(sizes)
    elem = []
    for it, dim in zip(left, tensor.shape):
        members = it if isinstance(it, list) else [it]
        unknown = [a for a in members if a not in known]
        if len(unknown) > 1:
            raise ValueError(f"axes {unknown} of group {it} need sizes in pattern {pattern!r}")
        prod = 1
        for a in members:
            if a in known:
                prod *= known[a]
        if unknown:
            if dim % prod:
                raise ValueError(f"group {it} cannot split an axis of size {dim}")
            known[unknown[0]] = dim // prod
        elif prod != dim:
            raise ValueError(f"group {it} has size {prod}, the axis has size {dim}")
        elem.extend(members)
    x = tensor.reshape([known[a] for a in elem])

    # Right side: axes kept from the left (permuted) and new axes (repeat, or literal 1).
    order = [a for a in _atoms(right) if not isinstance(a, int) and a in elem]
    if sorted(order) != sorted(elem):
        raise ValueError(f"pattern {pattern!r} must keep every input axis once")
    x = x.permute([elem.index(a) for a in order])
    shape, expand, pos = [], [], 0
    for a in _atoms(right):
        if isinstance(a, str) and a in elem:
            shape.append(known[a])
            expand.append(known[a])
            pos += 1
            continue
        size = a if isinstance(a, int) else sizes.get(a)
        if size is None:
            raise ValueError(f"new axis {a!r} of pattern {pattern!r} needs its size")
        if size != 1 and not allow_new:
            raise ValueError(f"rearrange cannot create axis {a!r} of size {size}")
        x = x.unsqueeze(pos)
        shape.append(1)
        expand.append(size)
        pos += 1
    x = x.expand(expand)
    out_shape = []
    for it in right:
        members = it if isinstance(it, list) else [it]
        n = 1
        for a in members:
            n *= a if isinstance(a, int) else known.get(a, sizes.get(a, 1))
        out_shape.append(n)
    return x.reshape(out_shape)


def rearrange(tensor, pattern, **axes_lengths):
    return _apply(tensor, pattern, axes_lengths, allow_new=False)


def repeat(tensor, pattern, **axes_lengths):
    return _apply(tensor, pattern, axes_lengths, allow_new=True)
