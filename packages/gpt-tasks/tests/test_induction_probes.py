"""The induction probes on constructed cases whose right values are known: a model built to copy the token
one half-sequence back scores 1.0 on induction and predicts the repeated half; one built to read the
previous token scores 1.0 on previous-token; the ICL score of logits built to be right only late."""

from __future__ import annotations

import math

import pytest
import torch

from gpt_core import GPT, IGNORE_INDEX, GPTConfig
from gpt_tasks import ProbeCache, get_task, measure_probes
from gpt_tasks.probes import (
    icl_positions,
    icl_score,
    induction_probes,
    induction_scores,
    position_losses,
    previous_token_scores,
    repeated_random_tokens,
)
from gpt_tasks.task import Batch

V, T = 8, 16
SHARP = 40.0  # attention logit of the attended key; every other key gets 0


def offset_copier(offset: int) -> GPT:
    """A one-layer, one-head attention-only model whose head attends from position i to position i - offset
    alone and whose output is the attended token: positions and tokens are one-hot in separate dimensions
    of the residual stream, the query is the position, the key the position `offset` later, the value the
    token. (No residual, no LayerNorm: the logits are the head's output alone.)"""
    config = GPTConfig(vocab_size=V, block_size=T, n_layer=1, n_head=1, n_embd=T + V, bias=False,
                       layernorm=False, residual=False, mlp=False, tie_weights=False)  # fmt: skip
    model = GPT(config).double().eval()
    C, scale = config.n_embd, math.sqrt(SHARP * math.sqrt(config.n_embd))  # q.k / sqrt(d) = SHARP
    with torch.no_grad():
        model.wte.weight.copy_(torch.eye(C)[T:])  # token t -> dimension T + t
        model.wpe.weight.copy_(torch.eye(C)[:T])  # position j -> dimension j
        q, k, v = torch.zeros(C, C), torch.zeros(C, C), torch.zeros(C, C)
        q[:T, :T] = scale * torch.eye(T)
        for j in range(T - offset):
            k[j + offset, j] = scale  # key j carries position j + offset: the query there finds it
        v[T:, T:] = torch.eye(V)
        model.blocks[0].attn.qkv.weight.copy_(torch.cat((q, k, v)))
        model.blocks[0].attn.proj.weight.copy_(torch.eye(C))
        model.lm_head.weight.copy_(SHARP * torch.eye(C)[T:])  # logit of t: the token dimension t
    return model


def repeated_cache(model: GPT) -> ProbeCache:
    """A probe cache of the model's own outputs on repeated random tokens (targets: the next tokens)."""
    tokens = repeated_random_tokens(V, T)
    inputs, targets = tokens, torch.cat((tokens[:, 1:], torch.full_like(tokens[:, :1], IGNORE_INDEX)), dim=1)
    _, activations = model.run_with_cache(inputs)
    return ProbeCache(Batch(inputs, targets), activations)


def test_repeated_random_tokens_are_a_fixed_random_half_written_twice():
    tokens = repeated_random_tokens(V, T)
    assert tokens.shape == (64, T) and torch.equal(tokens[:, : T // 2], tokens[:, T // 2 :])
    assert torch.equal(tokens, repeated_random_tokens(V, T))
    assert len(set(tokens[:, : T // 2].flatten().tolist())) == V  # uniform over the vocabulary
    assert repeated_random_tokens(V, 15).shape == (64, 14)  # an odd block leaves its last position out


def test_a_model_built_to_copy_one_half_back_scores_one_on_induction_and_predicts_the_repeated_half():
    model = offset_copier(offset=T // 2 - 1)  # from i to i - half + 1: the token after i's earlier occurrence
    with torch.no_grad():
        probes = induction_probes(model, repeated_cache(model))
    assert probes["induction_l0h0"] == pytest.approx(1.0, abs=1e-9)
    assert probes["previous_token_l0h0"] < 0.6  # only queries before the offset spread onto key i - 1
    assert probes["repeated_loss"] == pytest.approx(0.0, abs=1e-9)


def test_a_previous_token_head_scores_one_on_previous_token_and_not_on_induction():
    model = offset_copier(offset=1)
    with torch.no_grad():
        probes = induction_probes(model, repeated_cache(model))
    assert probes["previous_token_l0h0"] == pytest.approx(1.0, abs=1e-9)
    assert probes["induction_l0h0"] == pytest.approx(0.0, abs=1e-9)
    assert probes["repeated_loss"] > 10  # it predicts the current token again: wrong in a random sequence


def test_head_scores_read_the_diagonals_of_a_pattern():
    pattern = torch.zeros(2, 3, 8, 8)  # (N, H, T, T), half = 4
    i = torch.arange(8)
    pattern[:, 0, i, (i - 3).clamp(min=0)] = 1.0  # head 0: induction
    pattern[:, 1, i, (i - 1).clamp(min=0)] = 1.0  # head 1: previous token
    pattern[:, 2] = torch.ones(8, 8).tril() / torch.arange(1, 9)[:, None]  # head 2: everything alike
    assert induction_scores(pattern).tolist() == pytest.approx([1.0, 0.0, sum(1 / q for q in range(5, 9)) / 4])
    # head 0's query 1 reads key 0 (clamped), its previous token: 1 of 7 queries
    assert previous_token_scores(pattern).tolist() == pytest.approx([1 / 7, 1.0, sum(1 / q for q in range(2, 9)) / 7])


def test_icl_positions_scale_olssons_tokens_50_and_500_of_512_to_the_block():
    assert icl_positions(512) == (50, 500)
    assert icl_positions(64) == (6, 62)
    assert icl_positions(128) == (12, 125)
    assert icl_positions(8) == (1, 7)  # the late position stays inside the block


def test_icl_score_of_logits_right_only_late_in_the_context_is_minus_the_loss_early():
    targets = torch.randint(V, (5, 64))
    logits = torch.zeros(5, 64, V)  # uniform everywhere: loss ln V
    late = torch.arange(32, 64)
    logits[:, late] = torch.nn.functional.one_hot(targets[:, late], V).float() * 50  # about 0 loss late
    assert position_losses(logits, targets)[6].item() == pytest.approx(math.log(V))
    assert icl_score(logits, targets) == pytest.approx(-math.log(V), abs=1e-6)
    targets[:, 6] = IGNORE_INDEX  # nothing scored early: no score, rather than a wrong one
    assert math.isnan(icl_score(logits, targets))


def test_the_repeats_task_logs_the_induction_probes_of_every_head():
    task = get_task("repeats")
    model = GPT(task.defaults().model)
    probes = measure_probes(task, model, "cpu")
    config = model.config
    heads = [f"l{layer}h{head}" for layer in range(config.n_layer) for head in range(config.n_head)]
    names = {f"{kind}_{h}" for kind in ("induction", "previous_token") for h in heads}
    assert set(probes) == names | {"icl_score", "repeated_loss"}
    assert probes["repeated_loss"] == pytest.approx(math.log(task.vocab_size), abs=0.1)  # untrained: chance


def test_a_repeats_sequence_ends_in_a_copy_of_an_earlier_segment_and_only_the_copy_is_scored_for_copying():
    task = get_task("repeats")
    sequences = task.draw(500, torch.Generator().manual_seed(0))
    T = task.block_size
    for row, start in zip(sequences.tokens.tolist(), sequences.copy_starts.tolist(), strict=True):
        length = T + 1 - start
        assert T // 4 <= length <= T // 2
        copy = row[start:]
        sources = [a for a in range(start - length + 1) if row[a : a + length] == copy]
        assert sources  # the copy repeats a segment that ends before it
    batch = task.examples(sequences[:1], copyable_only=True)
    scored = (batch.targets[0] != IGNORE_INDEX).nonzero().flatten().tolist()
    start = int(sequences.copy_starts[0])
    assert scored == list(range(start, T))  # the target after each copied token, the copy's first excluded


def test_repeats_training_never_draws_a_held_out_sequence_and_evaluation_reads_only_held_out_ones():
    task = get_task("repeats")
    train = task.sample("train", 2000, torch.Generator().manual_seed(1))
    assert not task.heldout(train).any()
    assert task.heldout(task.fixed("heldout")).all()
    assert 0.05 < float(task.heldout(task.draw(4000, torch.Generator().manual_seed(2))).float().mean()) < 0.15


def test_the_text_task_logs_the_induction_probes_on_held_out_windows(shakespeare_task):
    batch = shakespeare_task.probe_batch()
    assert len(batch.inputs) > 100 and bool((batch.targets != IGNORE_INDEX).all())
    model = GPT(GPTConfig(vocab_size=shakespeare_task.vocab_size, block_size=8, n_layer=1, n_head=2, n_embd=16))
    probes = measure_probes(shakespeare_task, model, "cpu")
    assert {"icl_score", "repeated_loss", "induction_l0h1", "previous_token_l0h0"} <= set(probes)
    assert all(math.isfinite(value) for value in probes.values())


def test_a_bigram_text_model_with_a_block_of_one_token_has_no_probes_to_measure(small_corpus):
    task = get_task("text", data=str(small_corpus), block_size=1, chunk_size=32)
    model = GPT(GPTConfig(vocab_size=task.vocab_size, block_size=1, n_layer=1, n_head=2, n_embd=16))
    assert measure_probes(task, model, "cpu") == {}
    assert math.isfinite(task.evaluate(model, "heldout", "cpu", 50)["loss"])
