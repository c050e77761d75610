#!/usr/bin/python3
"""transformers_t5: golden values of T5's relative attention bias from transformers' own code.

    scripts/golden/transformers_t5.py --transformers CHECKOUT --out tests/golden/transformers/t5.json

Runs transformers' T5Attention unchanged (imported through scripts/golden/transformers.py's
setup and shims): `_relative_position_bucket` over offsets -300..300 for T5's sizes (32 buckets,
max distance 128) and the case tables' (16, 20), in both directions; and `compute_bias` of an
encoder layer (is_decoder False) and a decoder layer (True) with a known table, which is the
convention posenc's `t5_bidirectional` default ("not causal") follows. Not run by CI.
"""
import json

import transformers_sweep as sweep  # noqa: E402  (it loads scripts/golden/transformers.py)

golden = sweep.golden


def main():
    a = golden.parse_checkout_and_out(__doc__)
    import torch
    from transformers.models.t5 import modeling_t5
    from transformers.models.t5.configuration_t5 import T5Config

    offsets = list(range(-300, 301))
    rel = torch.tensor(offsets)
    buckets = []
    for nb, md in ((32, 128), (16, 20)):
        for bidi in (True, False):
            b = modeling_t5.T5Attention._relative_position_bucket(
                rel, bidirectional=bidi, num_buckets=nb, max_distance=md)
            buckets.append({"num_buckets": nb, "max_distance": md, "bidirectional": bidi,
                            "buckets": [int(x) for x in b]})
    biases = []
    H, nb, md, T = 3, 16, 20, 40
    table = [[((7 * b + 3 * h) % 11 - 5) / 4 for h in range(H)] for b in range(nb)]
    for decoder in (False, True):
        cfg = T5Config(d_model=8, d_kv=4, num_heads=H, relative_attention_num_buckets=nb,
                       relative_attention_max_distance=md, is_decoder=decoder)
        att = modeling_t5.T5Attention(cfg, has_relative_attention_bias=True)
        with torch.no_grad():
            att.relative_attention_bias.weight.copy_(torch.tensor(table, dtype=torch.float32))
            bias = att.compute_bias(T, T)  # (1, H, T, T)
        biases.append({"is_decoder": decoder, "T": T, "bias": bias[0].double().tolist()})
    out = {"transformers_commit": golden.commit_of(a.transformers),
           "environment": golden.ENVIRONMENT, "offsets": offsets, "buckets": buckets,
           "table": table, "num_buckets": nb, "max_distance": md, "biases": biases}
    with open(a.out, "w") as f:
        json.dump(out, f)
        f.write("\n")


if __name__ == "__main__":
    main()
