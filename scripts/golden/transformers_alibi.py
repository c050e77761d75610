#!/usr/bin/python3
"""transformers_alibi: golden values of ALiBi from transformers' Bloom, Falcon and MPT, run unchanged.

    scripts/golden/transformers_alibi.py --transformers CHECKOUT \
        --out tests/golden/transformers/alibi.json

Runs transformers' own code (imported through scripts/golden/transformers.py's setup and shims):

- Bloom's `build_alibi_tensor` for every head count H = 1 .. 128 over a batch whose second row is
  left-padded (the tensor is slope * (cumsum(mask) - 1), so its entry at the first real token after
  position 0 is the slope as transformers computes it, in float32): the slopes per H, and the
  positions the padded row gets.
- Falcon's `build_alibi_tensor`, the same formula with the slopes rounded to bfloat16 first.
- MPT's `build_mpt_alibi_tensor` for H = 1 .. 128 at alibi_bias_max 8 (MPT's default) and 16:
  the slopes per H (the entry at distance 1).
- BloomAttention.forward itself, in float64 with random weights, on a left-padded batch (H = 12,
  not a power of two, so the interleaved second sequence of slopes is used): its q, k, v (its own
  query_key_value and _reshape), the additive mask it is given, its attention probabilities and
  its context (the input of its dense layer). Bloom adds slope * key position (not the distance)
  and relies on the softmax being shift-invariant per row; the probabilities are those of causal
  ALiBi at the positions cumsum(mask) - 1.

Not run by CI: the tests (tests/python/test_golden_transformers_alibi.py) read what it wrote.
"""
import json

import transformers_sweep as sweep  # noqa: E402  (it loads scripts/golden/transformers.py)

golden = sweep.golden

HEADS = list(range(1, 129))


def main():
    a = golden.parse_checkout_and_out(__doc__)
    import torch
    from transformers.models.bloom import modeling_bloom
    from transformers.models.bloom.configuration_bloom import BloomConfig
    from transformers.models.falcon import modeling_falcon
    from transformers.models.mpt import modeling_mpt

    # Row 0: 9 real tokens; row 1: 3 pads then 6 real tokens.
    mask = torch.tensor([[1] * 9, [0] * 3 + [1] * 6])
    bloom, falcon, mpt = {}, {}, {}
    padded_positions = None
    for H in HEADS:
        t = modeling_bloom.build_alibi_tensor(mask, H, torch.float32).view(2, H, 9)
        # Row 0, position 1: slope * 1, exactly the float32 slope.
        bloom[H] = [float(x) for x in t[0, :, 1]]
        # Row 1's positions, from head 0 (slope s): s * pos / s.
        if padded_positions is None:
            padded_positions = [round(float(x / t[1, 0, 4])) for x in t[1, 0]]
        f = modeling_falcon.build_alibi_tensor(mask, H, torch.float32).view(2, H, 9)
        falcon[H] = [float(x) for x in f[0, :, 1]]
    for bias_max in (8, 16):
        rows = {}
        for H in HEADS:
            m = modeling_mpt.build_mpt_alibi_tensor(H, 5, alibi_bias_max=bias_max)  # (H, 1, 5)
            # Entries are slope * (j - 4), j = 0..4: the one at j = 3 is -slope.
            rows[H] = [-float(x) for x in m[:, 0, 3]]
        mpt[bias_max] = rows

    # BloomAttention.forward in float64.
    torch.manual_seed(0)
    H, D, T = 12, 16, 10
    cfg = BloomConfig(hidden_size=H * D, n_head=H, attention_dropout=0.0, hidden_dropout=0.0)
    att = modeling_bloom.BloomAttention(cfg, layer_idx=0).double().eval()
    amask = torch.tensor([[1] * T, [0] * 4 + [1] * (T - 4)])
    hidden = torch.randn(2, T, H * D, dtype=torch.float64)
    alibi = modeling_bloom.build_alibi_tensor(amask, H, torch.float64)
    # The additive mask the model gives its layers: causal, and the pads of each row masked.
    neg = torch.finfo(torch.float64).min
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    allowed = causal[None, None] & amask.bool()[:, None, None, :]
    add = torch.zeros(2, 1, T, T, dtype=torch.float64).masked_fill(~allowed, neg)
    captured = {}
    att.dense.register_forward_pre_hook(lambda mod, inp: captured.setdefault("ctx", inp[0]))
    with torch.no_grad():
        q, k, v = att._reshape(att.query_key_value(hidden))  # (B, H, T, D) each
        _, probs = att(hidden, torch.zeros_like(hidden), alibi, add, output_attentions=True)
    attention = {
        "H": H, "D": D, "T": T, "mask": amask.tolist(),
        "q": q.tolist(), "k": k.tolist(), "v": v.tolist(),
        "probs": probs.tolist(),  # (B, H, T, T)
        "context": captured["ctx"].tolist(),  # (B, T, H * D)
    }
    out = {"transformers_commit": golden.commit_of(a.transformers),
           "environment": golden.ENVIRONMENT, "heads": HEADS,
           "bloom_slopes": {str(h): bloom[h] for h in HEADS},
           "bloom_padded_positions": padded_positions,
           "falcon_slopes": {str(h): falcon[h] for h in HEADS},
           "mpt_slopes": {str(b): {str(h): rows[h] for h in HEADS} for b, rows in mpt.items()},
           "bloom_attention": attention}
    with open(a.out, "w") as f:
        json.dump(out, f)
        f.write("\n")


if __name__ == "__main__":
    main()
