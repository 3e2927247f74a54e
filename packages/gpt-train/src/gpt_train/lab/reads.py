"""What each head reads: from the positions that read back an answer token, its attention on each prompt token by
that token's value and the value just written, times the prompt length (1.0: even over the prompt). A head comparing
the two shows it here (sort's layer-0 heads read digits at or above the one just written)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpt_core import GPT, block_hook
from gpt_tasks import PromptAnswerTask, Task, evaluating
from gpt_train.lab.common import InspectError, Record, position_ids, prompt_answer_task, seeded
from gpt_train.lab.logit_lens import CHUNK, answer_sequences
from gpt_viz import HELDOUT


@dataclass(frozen=True)
class HeadReads(Record):
    """reads[layer][head][written][read]: a head's mean attention, times the prompt length, on a prompt token of value
    values[read] from an answer position reading values[written] (a pair never seen: 0 with count 0);
    on_answer[layer][head]: its mean weight on the answer written so far. `to_json` is inspect_reads.json."""

    examples: int
    values: list[str]
    reads: list[list[list[list[float]]]]
    counts: list[list[int]]  # [written][read]: how many (query, key) pairs each mean is over, per head
    on_answer: list[list[float]]
    prompt_length: int
    split: str = HELDOUT


def read_values(task: PromptAnswerTask, sequences: torch.Tensor) -> list[int]:
    """The token ids both in prompts and among the answer tokens read back: the table's axes."""
    prompt = set(sequences[:, : task.prompt_length].unique().tolist())
    written = set(sequences[:, task.prompt_length : -1].unique().tolist())
    return sorted(prompt & written)


def head_reads(task: Task, model: GPT, device: torch.device, examples: int) -> HeadReads:
    """The reads table of every head on `examples` held-out sequences, teacher-forced."""
    task = prompt_answer_task(task, "reads")
    if task.answer_length < 2:
        raise InspectError("reads needs answers of at least two tokens: it reads from the answer token just written")
    sequences = answer_sequences(task, examples)
    values = read_values(task, sequences)
    if not values:
        raise InspectError(
            f"the {len(sequences)} held-out example(s) never write a token their prompts hold; there is nothing to "
            "read by value (a larger --examples may find some)"
        )
    c, p, V = model.config, task.prompt_length, len(values)
    index = torch.full((int(sequences.max()) + 1,), -1, dtype=torch.long, device="cpu")
    index[torch.tensor(values, device="cpu")] = torch.arange(V, device="cpu")
    totals = torch.zeros(c.n_layer, c.n_head, V, V, dtype=torch.float64, device="cpu")
    counts = torch.zeros(V, V, dtype=torch.float64, device="cpu")
    on_answer = torch.zeros(c.n_layer, c.n_head, dtype=torch.float64, device="cpu")
    queries = range(p, p + task.answer_length - 1)  # input positions holding an answer token just written
    names = [block_hook(layer, "pattern") for layer in range(c.n_layer)]
    generator = seeded()
    with evaluating(model):
        for chunk in sequences.split(CHUNK):
            inputs = chunk[:, :-1]
            positions = position_ids(model, len(inputs), inputs.shape[1], generator)
            _, cache = model.run_with_cache(inputs.to(device), names=names, positions=positions)
            pattern = torch.stack([cache[name].cpu().double() for name in names])  # (L, n, H, T, T)
            for query in queries:
                written = index[inputs[:, query]]  # (n,)
                for key in range(p):
                    read = index[inputs[:, key]]
                    seen = (written >= 0) & (read >= 0)
                    cell = written[seen] * V + read[seen]
                    weights = pattern[:, seen, :, query, key].permute(0, 2, 1).flatten(0, 1)  # (L * H, seen)
                    totals.view(-1, V * V).index_add_(1, cell, weights)
                    counts.view(-1).index_add_(0, cell, torch.ones(len(cell), dtype=torch.float64, device="cpu"))
                on_answer += pattern[:, :, :, query, p : query + 1].sum(-1).sum(1)
    means = p * totals / counts.clamp(min=1)
    return HeadReads(
        examples=len(sequences),
        values=task.token_labels(values),
        reads=means.tolist(),
        counts=counts.long().tolist(),
        on_answer=(on_answer / (len(sequences) * len(queries))).tolist(),
        prompt_length=p,
    )
