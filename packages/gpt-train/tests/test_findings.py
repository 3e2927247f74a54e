"""Findings in words: each rule of gpt_train.lab.findings on records built to sit either side of it, on
planted models whose right finding is known (a layer whose attention writes nothing, a head zeroed), and on
the default sort model, whose story (layer 1's attention hardly used, the answer appearing only after layer
1's MLP, carried at the position that writes it, layer 0's heads comparing) the findings must tell."""

from __future__ import annotations

import copy

import pytest
import torch
from lab_runs import trained_sort

from gpt_core import GPT
from gpt_tasks import get_task
from gpt_train.lab import InspectError, ablate_each_head, head_reads, logit_lens, patch
from gpt_train.lab.findings import (
    APPEARS_SHARE,
    CARRIES_SHARE,
    COMPARES_RATIO,
    NEEDED_COST,
    UNUSED_TOLERANCE,
    answer_depth,
    carrying_cells,
    comparison_ratio,
    head_findings,
    logit_lens_findings,
    minor_layers,
    needed_heads,
    patching_findings,
    reads_findings,
    unused_layers,
)
from gpt_train.lab.logit_lens import answer_sequences
from gpt_train.lab.patching import check_restorable
from gpt_train.loading import load_run
from gpt_viz.inspect_pictures import most_needed_head

CPU = torch.device("cpu")
SAMPLE = 500


def heads_record(
    baseline=1.0, zero=((0.5, 0.995), (1.0, 1.0)), layer_zero=(0.0, 1.0), higher_is_better=True, examples=100
):
    return {
        "metric": "exact_match",
        "examples": examples,
        "baseline": baseline,
        "zero": [list(row) for row in zero],
        "mean": [list(row) for row in zero],
        "layer_zero": list(layer_zero),
        "higher_is_better": higher_is_better,
    }


# the rules on records either side of them ---------------------------------------------------
def test_a_layer_whose_removal_improves_the_metric_is_used_not_nearly_unused():
    """Its cost, below 0, was under 1%: "nearly unused ... it costs -50.00%", and the reads left it out."""
    record = heads_record(baseline=0.4, zero=((0.4, 0.4), (0.4, 0.4)), layer_zero=(0.1, 0.6), examples=1000)
    assert minor_layers(record) == [] and head_findings(record)[1].startswith("layer 1's attention is used")


def test_a_layer_is_unused_within_a_tenth_of_a_percent_nearly_unused_within_one_percent():
    within, nearly, beyond = 1 - UNUSED_TOLERANCE / 2, 1 - NEEDED_COST / 2, 1 - 2 * NEEDED_COST
    record = heads_record(layer_zero=(beyond, within))
    assert unused_layers(record) == [1] and minor_layers(record) == [1]
    record = heads_record(layer_zero=(nearly, 1 - 2 * UNUSED_TOLERANCE))
    assert unused_layers(record) == [] and minor_layers(record) == [0, 1]
    text = head_findings(heads_record(layer_zero=(0.0016, 0.9996)))
    assert text[0] == "layer 0's attention is used: with all its heads removed exact_match is 0.0016 (clean 1.0000)"
    assert text[1] == (
        "layer 1's attention is unused: with all its heads removed exact_match is 0.9996 (clean 1.0000, within 0.1%)"
    )


def test_a_head_is_needed_when_removing_it_alone_costs_more_than_one_percent_and_a_lower_is_better_metric_counts_up():
    record = heads_record(zero=((0.5, 1 - 2 * NEEDED_COST), (1 - NEEDED_COST / 2, 1.2)))
    assert needed_heads(record) == [(0, 0), (0, 1)]
    assert most_needed_head(record) == (0, 0)
    loss = heads_record(baseline=0.1, zero=((0.1, 0.5), (0.3, 0.1)), layer_zero=(0.9, 0.1), higher_is_better=False)
    assert needed_heads(loss) == [(0, 1), (1, 0)] and most_needed_head(loss) == (0, 1)
    assert unused_layers(loss) == [1]
    assert head_findings(heads_record(zero=((1.0, 1.0), (1.0, 1.0))))[-1].startswith("no single head is needed")


def test_a_cost_exactly_at_a_threshold_is_judged_by_the_rule_not_by_rounding():
    """10 of 1,000 examples lost is 1%: (1 - 0.99) / 1 is 0.010000000000000009 in floating point, which was
    "more than 1%"; 1 of 1,000 is within 0.1%."""
    record = heads_record(zero=((0.99, 0.995), (1.0, 1.0)), layer_zero=(0.999, 0.99))
    assert needed_heads(record) == [] and unused_layers(record) == [0] and minor_layers(record) == [0, 1]


def test_an_ablation_too_small_to_judge_leaves_no_layer_minor_for_reads_to_call_left_out():
    """A 30-step model scoring 0.0: heads says the ablation shows nothing, and reads must not then say a layer's
    heads are left out "removing them all costs at most 1%"."""
    untrained = heads_record(baseline=0.0, zero=((0.0, 0.0), (0.0, 0.0)), layer_zero=(0.0, 0.0))
    assert "the heads show nothing" in head_findings(untrained)[0]
    assert minor_layers(untrained) == []  # what reads_findings is handed as the layers to call left out


def test_the_answer_appears_at_the_first_depth_reaching_99_percent_of_the_models_exact_match():
    depths = ["embeddings", "0: + attention", "0: + MLP", "1: + attention", "1: + MLP"]
    record = {"depths": depths, "exact_match": [0.0, 0.0, 0.003, 0.004, 1.0], "examples": 1000}
    assert answer_depth(record) == 4
    assert logit_lens_findings(record) == [
        "the answer appears after layer 1's MLP: read out there, exact match is 1.0000 "
        "(at least 99% of the model's 1.0000)",
        "read out any earlier, exact match is at most 0.0040 (after layer 1's attention)",
    ]
    record["exact_match"] = [0.0, 0.0, APPEARS_SHARE * 0.8, 0.79, 0.8]
    assert answer_depth(record) == 2
    record["exact_match"][2] = APPEARS_SHARE * 0.8 - 1e-6
    assert answer_depth(record) == 4
    assert answer_depth({"depths": depths, "exact_match": [0.0] * 5, "examples": 1000}) is None


def test_a_layer_and_position_carry_the_answer_when_patching_there_restores_90_percent():
    record = {
        "point": "resid_pre",
        "positions": ["prompt 0", "prompt 1", "answer 0"],
        "answer_position": 1,
        "restored": [[1.0, 0.0, 0.0], [0.005, CARRIES_SHARE - 0.001, CARRIES_SHARE]],
    }
    assert carrying_cells(record) == [(0, 0), (1, 2)]
    assert patching_findings(record) == [
        "resid_pre of layer 0 carries the answer's difference at prompt 0 (1.000)",
        "resid_pre of layer 1 carries the answer's difference at answer 0 (0.900, the position that writes answer 1)",
    ]
    record["restored"][1] = [0.0, 0.5, 0.2]
    assert patching_findings(record)[1] == (
        "resid_pre of layer 1 carries it at no single position: the most any restores is 0.500 "
        "(prompt 1; the rule is 90%)"
    )


def test_a_head_compares_when_it_reads_one_side_of_the_value_just_written_twice_as_much():
    values = ["0", "1", "2"]
    counts = [[1, 1, 1], [1, 1, 1], [1, 1, 1]]
    upper = [[1.0, 1.0, 1.0], [0.1, 1.0, 1.0], [0.1, 0.1, 1.0]]  # at or above: 1.0, below: 0.1
    assert comparison_ratio(upper, counts, values) == pytest.approx(10.0)
    lower = [[0.1, 0.1, 0.1], [1.0, 0.1, 0.1], [1.0, 1.0, 0.1]]
    assert comparison_ratio(lower, counts, values) == pytest.approx(0.1)
    assert comparison_ratio(upper, counts, ["a", "b", "c"]) is None  # the rule is for digits
    flat = [[1.0] * 3] * 3
    record = {"values": values, "counts": counts, "reads": [[upper, lower, flat]], "on_answer": [[0.05, 0.2, 0.5]]}
    assert reads_findings(record) == [
        "head 0.0 compares: it reads prompt values at or above the one just written 10.0x as much as those below; "
        "0.05 of its weight on the answer written so far",
        "head 0.1 compares: it reads prompt values below the one just written 10.0x as much as those at or above; "
        "0.20 of its weight on the answer written so far",
        "head 0.2 reads prompt values alike whatever was written (ratio 1.0); "
        "0.50 of its weight on the answer written so far",
    ]
    assert reads_findings(record, unused=[0])[0].startswith("layer 0's heads are left out")
    assert COMPARES_RATIO == 2.0


# planted models ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run = load_run(trained_sort(tmp_path_factory.mktemp("findings") / "sort"), CPU)
    return run.task, run.model


def test_a_layer_whose_attention_writes_nothing_is_found_unused_and_its_heads_not_needed(default_sort_run):
    run = load_run(default_sort_run, CPU)  # a model that still sorts without layer 1's attention
    task, model = run.task, run.model
    planted = copy.deepcopy(model)
    with torch.no_grad():
        planted.blocks[1].attn.proj.weight.zero_()  # layer 1's heads now add only the projection's bias
    record = ablate_each_head(task, planted, CPU, SAMPLE).to_json()
    assert unused_layers(record) == [1]
    assert all(head[0] == 0 for head in needed_heads(record))
    assert head_findings(record)[1].startswith("layer 1's attention is unused")


def test_a_zeroed_head_is_not_needed_and_the_explorer_does_not_open_on_it(trained):
    task, model = trained
    planted = copy.deepcopy(model)
    d = planted.config.head_dim
    with torch.no_grad():
        planted.blocks[0].attn.proj.weight[:, 0:d] = 0.0  # head 0.0 writes nothing
    record = ablate_each_head(task, planted, CPU, SAMPLE).to_json()
    assert record["zero"][0][0] == record["baseline"]
    assert (0, 0) not in needed_heads(record)
    assert most_needed_head(record) != (0, 0)


def test_reads_are_each_heads_mean_weight_by_value_pair_as_counted_by_hand(trained):
    task, model = trained
    reads = head_reads(task, model, CPU, 200)
    inputs = answer_sequences(task, 200)[:, :-1]
    with torch.no_grad():
        _, cache = model.run_with_cache(inputs, names=["blocks.1.pattern"])
    pattern, p = cache["blocks.1.pattern"], task.prompt_length  # (N, H, T, T)
    written, read = 3, 5  # digits
    total, count = 0.0, 0
    for n in range(len(inputs)):
        for query in range(p, p + task.answer_length - 1):
            for key in range(p):
                if inputs[n, query] == task.encode(str(written))[0] and inputs[n, key] == task.encode(str(read))[0]:
                    total += float(pattern[n, 1, query, key])
                    count += 1
    column, row = reads.values.index(str(read)), reads.values.index(str(written))
    assert count > 0 and reads.counts[row][column] == count
    assert reads.reads[1][1][row][column] == pytest.approx(p * total / count, rel=1e-9)
    on_answer = sum(
        float(pattern[n, 0, q, p : q + 1].double().sum())  # in float64, as reads sums
        for n in range(len(inputs))
        for q in range(p, p + task.answer_length - 1)
    ) / (len(inputs) * (task.answer_length - 1))
    assert reads.on_answer[1][0] == pytest.approx(on_answer, rel=1e-9)


def test_reads_pass_over_prompt_positions_that_hold_no_written_value_such_as_additions_plus():
    task = get_task("addition", digits=2)  # "07+59=066": "+" and "=" are never written, so never read as a value
    torch.manual_seed(0)
    model = GPT(task.model_config(n_layer=1, n_head=2, n_embd=16))
    reads = head_reads(task, model, CPU, 64)
    inputs, p = answer_sequences(task, 64)[:, :-1], task.prompt_length
    digits = set(task.encode("0123456789"))
    pairs = sum(
        int(inputs[n, query]) in digits and int(inputs[n, key]) in digits
        for n in range(len(inputs))
        for query in range(p, p + task.answer_length - 1)
        for key in range(p)
    )
    assert sum(map(sum, reads.counts)) == pairs > 0


def test_heads_and_depths_are_judged_only_where_the_metric_is_worth_a_hundred_examples():
    """A 1% share needs at least 100 right examples to be more than one of them: a model that gets 2 of 2,500
    right showed "unused" layers, "needed" heads and a depth where its answer appears that were its noise."""
    few = heads_record(baseline=0.0008, zero=((0.0006, 0.0008), (0.0008, 0.0008)), examples=2500)
    assert head_findings(few) == [
        "exact_match is 0.0008 on 2,500 examples, worth under 100 of them: a 1% cost could not be told from one "
        "example, so the heads show nothing: score more examples (--examples) or train longer"
    ]
    assert len(head_findings(heads_record(baseline=0.04, examples=2500))) > 1  # 100 examples: judged
    assert len(head_findings(heads_record(baseline=0.0, higher_is_better=False))) > 1  # a loss of 0 is the best
    lens = {"depths": ["embeddings", "0: + MLP"], "exact_match": [0.0, 0.0008], "examples": 2500}
    assert answer_depth(lens) is None
    assert logit_lens_findings(lens) == [
        "the model answers 2 of 2,500 sequences exactly right, under 100: too few to place where the answer appears "
        "(score more examples, --examples, or train longer)"
    ]
    assert answer_depth(lens | {"exact_match": [0.0, 0.04]}) == 1


def test_patching_refuses_a_logit_difference_too_small_to_apportion():
    check_restorable(2.0, -2.0)  # a model that has learned: its answer depends on the token
    with pytest.raises(InspectError, match="under 0.01 apart: its answer barely depends on the corrupted token"):
        check_restorable(-0.0033648, -0.0033247)


# the default sort model ----------------------------------------------------------------------
def test_the_default_sort_model_sorts_with_layer_0s_heads_and_answers_only_after_layer_1s_mlp(default_sort_run):
    run = load_run(default_sort_run, CPU)
    task, model = run.task, run.model
    heads = ablate_each_head(task, model, CPU, 2000).to_json()
    assert heads["layer_zero"][0] < 0.05  # layer 0's attention is what the model sorts with ...
    assert heads["layer_zero"][1] > 0.5  # ... layer 1's helps, though no head of it is needed alone (below)
    assert {layer for layer, _ in needed_heads(heads)} == {0} and most_needed_head(heads) == (0, 3)
    lens = logit_lens(task, model, CPU, 2000).to_json()
    assert lens["depths"][answer_depth(lens)] == "1: + MLP"
    resid = patch(task, model, CPU, "resid_pre", 500).to_json()
    answer_query = len(resid["positions"]) - 1
    assert carrying_cells(resid) == [(0, 0), (1, answer_query)]  # the changed digit, then the writing position
    attn = patch(task, model, CPU, "attn_out", 500).to_json()
    assert carrying_cells(attn) == [(0, answer_query)]  # moved there by layer 0's attention
    reads = head_reads(task, model, CPU, 2000).to_json()
    ratios = [comparison_ratio(reads["reads"][0][head], reads["counts"], reads["values"]) for head in range(4)]
    assert ratios[1] >= COMPARES_RATIO and ratios[2] >= COMPARES_RATIO  # read digits at or above the one written
    assert ratios[3] < COMPARES_RATIO  # head 0.3 reads them alike ...
    assert max(reads["on_answer"][0]) == reads["on_answer"][0][3]  # ... and reads the answer written so far most
