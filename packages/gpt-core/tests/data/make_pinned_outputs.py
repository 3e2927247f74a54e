"""Write pinned_outputs.pt: a few small seeded models' weights and what they compute, for
`test_pinned_outputs.py` to hold every later version of the model to: the weights bit for bit, what they
compute in float64 (so the pins hold on any CPU), the tokens exactly.

    python packages/gpt-core/tests/data/make_pinned_outputs.py

Regenerating replaces the pins with whatever the installed gpt_core computes: do it only on purpose,
when the default model is meant to change.
"""

from __future__ import annotations

from pathlib import Path

import torch

from gpt_core import GPT, GPTConfig, generate

SHAPE = {"vocab_size": 7, "block_size": 8, "n_layer": 2, "n_head": 2, "n_embd": 8}
CONFIGS = {
    "learned": {},
    "rope": {"pos": "rope"},
    "learned_dropout_randomized": {"dropout": 0.1, "max_positions": 12, "randomized_positions": True},
}
"""Each: GPTConfig fields on top of SHAPE. The last runs in training mode: its dropout masks and
sampled position ids come from the global RNG, seeded before the forward."""


def pinned(name: str, fields: dict) -> dict[str, torch.Tensor]:
    config = GPTConfig(**SHAPE, **fields)
    torch.manual_seed(0)
    model = GPT(config)
    out = {f"state.{key}": value.clone() for key, value in model.state_dict().items()}
    model.double()
    data = torch.Generator().manual_seed(1)
    idx = torch.randint(7, (2, 8), generator=data)
    targets = torch.randint(7, (2, 8), generator=data)
    targets[:, :2] = -100
    model.train(bool(config.dropout))
    torch.manual_seed(2)
    result = model(idx, targets)
    result.loss.backward()
    out["logits"], out["loss"] = result.logits.detach(), result.loss.detach()
    out.update({f"grad.{key}": p.grad.clone() for key, p in model.named_parameters()})
    model.eval()
    with torch.no_grad():
        cache = model.new_cache(2, 8)
        steps = [model(idx[:, :3], cache=cache).logits]
        steps += [model(idx[:, t : t + 1], cache=cache).logits for t in range(3, 8)]
    out["cached_logits"] = torch.cat(steps, dim=1)
    prompt = idx[:, :3]
    torch.manual_seed(4)  # a randomized model's decoding position ids come from the global RNG
    out["greedy"] = generate(model, prompt, 4, temperature=0.0)
    for use_cache in (True, False):
        sampler = torch.Generator().manual_seed(3)
        key = "sampled_cached" if use_cache else "sampled_uncached"
        out[key] = generate(model, prompt, 4, temperature=1.0, top_k=3, use_cache=use_cache, generator=sampler)
    return out


def main() -> None:
    tensors = {
        f"{name}.{key}": value for name, fields in CONFIGS.items() for key, value in pinned(name, fields).items()
    }
    torch.save(tensors, Path(__file__).with_name("pinned_outputs.pt"))


if __name__ == "__main__":
    main()
