"""The generation step's answer: greedy, temperature and top-k sampling, and cached decoding, where each block keeps
its keys and values and only the new token goes through the model."""

import torch


@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature, top_k, use_cache, generator):
    """idx (B, T) -> (B, T + max_new_tokens): the prompt and the tokens drawn after it."""
    cache = [] if use_cache else None  # per block, its keys and values so far: (B, H, T_so_far, d) each
    logits = forward(model, idx, cache)
    out = idx
    for i in range(max_new_tokens):
        token = next_token(logits[:, -1, :], temperature, top_k, generator)  # (B,)
        out = torch.cat((out, token[:, None]), dim=1)
        if i == max_new_tokens - 1:
            break  # the last token is never read
        logits = forward(model, token[:, None], cache) if use_cache else forward(model, out, None)
    return out


def next_token(logits, temperature, top_k, generator):
    """logits (B, V) -> (B,): the argmax at temperature 0, else one draw from softmax(logits / T) over the top k."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature  # before the softmax: T < 1 sharpens, T > 1 flattens
    if top_k is not None and top_k < logits.shape[-1]:
        kth_best = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth_best, float("-inf"))  # the k best kept
    exp = (logits - logits.amax(dim=-1, keepdim=True)).exp()
    return torch.multinomial(exp / exp.sum(dim=-1, keepdim=True), 1, generator=generator).squeeze(-1)


def forward(model, idx, cache):
    """The GPT's forward on idx (B, T) -> logits (B, T, V). With a cache (a list, empty at first), idx holds the
    new tokens alone: they sit after the positions cached, and each block's keys and values are added to it."""
    B, T = idx.shape
    start = cache[0][0].shape[2] if cache else 0  # positions already in the cache
    x = model.wte(idx) + model.wpe(torch.arange(start, start + T, device=idx.device))  # (B, T, C)
    for i, block in enumerate(model.blocks):
        attn = block.attn
        q, k, v = attn.qkv(block.ln1(x)).view(B, T, 3, attn.n_head, -1).permute(2, 0, 3, 1, 4)  # (B, H, T, d)
        if cache is not None:
            if i < len(cache):
                k, v = torch.cat((cache[i][0], k), dim=2), torch.cat((cache[i][1], v), dim=2)  # (B, H, start + T, d)
                cache[i] = (k, v)
            else:
                cache.append((k, v))
        y = attn.attention(q, k, v, True)  # the queries are the last T keys: step 2's end-aligned mask
        x = x + attn.proj(y.transpose(1, 2).reshape(B, T, -1))
        x = x + block.mlp(block.ln2(x))
    return model.lm_head(model.ln_f(x))
