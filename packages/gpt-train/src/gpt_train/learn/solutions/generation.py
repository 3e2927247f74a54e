"""Step 13: generation. The model gives the logits of the next token at every position; generating is reading the
last position's, picking a token, appending it, and going again.

    logits = logits[:, -1, :] / temperature        (B, V): the last position's, divided BEFORE the softmax
    top-k:   every logit below the k-th best -> -inf   (k kept; all when top_k is None or >= V)
    probs = softmax(logits)                        (B, V)
    token = torch.multinomial(probs, 1, generator=generator)   (B, 1), one draw a row
    temperature 0 is greedy: token = logits.argmax(dim=-1), no draw at all

The KV cache: without it, each new token sends the whole sequence through the model again. With it, each block
keeps the keys and values it has made, and a step sends only the new token through: its query attends to every
key so far (step 2's attention, whose mask is aligned to the end of the keys, does exactly that), and its position
is the number of tokens already cached, not 0.

Check it with `gpt-train learn check generation`: it hands your generate the model step's GPT (model.wte, model.wpe,
model.blocks, each with ln1, attn (qkv, proj, n_head, attention), ln2 and mlp; model.ln_f, model.lm_head), and
compares the tokens with gpt-core's generate on the same weights, prompts and seeded generator: greedy, at a
temperature, with top-k, with the cache and without. The same draws give the same tokens when you draw as above,
once a token; with use_cache=True it also checks that only the new token goes through the blocks. It refuses
torch.softmax (write it as in step 1) and gpt-core's generate.
"""

import torch


@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature, top_k, use_cache, generator):
    """idx: (B, T) token ids -> (B, T + max_new_tokens): the prompt, then the new tokens.

    Hints: forward(model, idx, cache) below gives the logits, with cache = [] to start one (None: no cache); then
    for each new token: next_token on the last position's logits, torch.cat it onto the output, and forward again,
    the new token alone with the cache (token[:, None], (B, 1)), the whole output without.
    """
    # BEGIN SOLUTION
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
    # END SOLUTION


def next_token(logits, temperature, top_k, generator):
    """logits: (B, V) -> (B,) token ids.

    Hints: logits.topk(k, dim=-1).values[:, -1:] is each row's k-th best, (B, 1); logits.masked_fill(logits < kth,
    float("-inf")) keeps the k best (and ties). A temperature applied after the softmax changes nothing the draw
    sees, since multinomial normalises what it is given.
    """
    # BEGIN SOLUTION
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature  # before the softmax: T < 1 sharpens, T > 1 flattens
    if top_k is not None and top_k < logits.shape[-1]:
        kth_best = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth_best, float("-inf"))  # the k best kept
    exp = (logits - logits.amax(dim=-1, keepdim=True)).exp()
    return torch.multinomial(exp / exp.sum(dim=-1, keepdim=True), 1, generator=generator).squeeze(-1)
    # END SOLUTION


def forward(model, idx, cache):
    """The GPT's forward by hand: idx (B, T) -> logits (B, T, V). With a cache (a list, one (keys, values) pair per
    block, each (B, H, T_so_far, d)), idx holds only the new tokens, which sit after the cached positions.

        start = the number of positions already cached (0 for an empty cache or None)
        x = model.wte(idx) + model.wpe(torch.arange(start, start + T, device=idx.device))
        for each block, with attn = block.attn:
            q, k, v = attn.qkv(block.ln1(x)), split into heads as in step 9          (B, H, T, d) each
            k, v = the cached keys and values, then these, along the positions (torch.cat(..., dim=2)), kept
            x = x + attn.proj(attn.attention(q, k, v, True), heads merged)
            x = x + block.mlp(block.ln2(x))
        logits = model.lm_head(model.ln_f(x))
    """
    # BEGIN SOLUTION
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
    # END SOLUTION
