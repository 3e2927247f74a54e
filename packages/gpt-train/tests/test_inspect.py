"""gpt-train inspect: head ablation, the logit lens and activation patching on a trained sort model, the
probes logged while it trained, and every bad input as one line."""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from lab_runs import trained_sort
from train_helpers import assert_one_line_error, read_metrics

from gpt_core import GPT, block_hook, cross_entropy, generate
from gpt_tasks import (
    DIGITS,
    CharVocab,
    Defaults,
    IndexedSplit,
    PromptAnswerTask,
    as_bytes,
    digits_of,
    evaluating,
    get_task,
    measure_probes,
    one_digit_changes,
)
from gpt_train.lab import (
    InspectError,
    ablated_metrics,
    ablation_hooks,
    baseline_and_means,
    corrupted_pairs,
    head_reads,
    logit_lens,
    patch,
)
from gpt_train.lab.explain import explain_prompt
from gpt_train.lab.heads import HeadMeans
from gpt_train.lab.logit_lens import answer_sequences, decode
from gpt_train.loading import load_run
from gpt_viz import HELDOUT, RunLayout, parse_metric_key, probe_key

CPU = torch.device("cpu")
SAMPLE = 500


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory) -> Path:
    """One trained run for the whole module (the cli fixture is per test)."""
    return trained_sort(tmp_path_factory.mktemp("inspect") / "sort")


@pytest.fixture(scope="module")
def trained(trained_dir):
    run = load_run(trained_dir, CPU)
    return run.task, run.model


@pytest.fixture
def run_copy(trained_dir, tmp_path) -> Path:
    """A copy of the trained run this test may write into."""
    return Path(shutil.copytree(trained_dir, tmp_path / "sort"))


# head ablation -------------------------------------------------------------------------------
def test_ablating_every_head_drops_exact_match_to_near_zero_and_ablating_none_changes_nothing(trained):
    task, model = trained
    baseline, means = baseline_and_means(task, model, CPU, SAMPLE)
    assert baseline == task.evaluate(model, "heldout", CPU, SAMPLE)
    assert baseline["exact_match"] > 0.99
    assert ablated_metrics(task, model, CPU, [], "zero", SAMPLE) == baseline
    every = [(layer, head) for layer in range(2) for head in range(2)]
    assert ablated_metrics(task, model, CPU, every, "zero", SAMPLE)["exact_match"] < 0.05
    assert ablated_metrics(task, model, CPU, every, "mean", SAMPLE, means)["exact_match"] < 0.05


def test_zero_ablating_a_head_equals_zeroing_its_columns_of_the_output_projection(trained):
    task, model = trained
    model = copy.deepcopy(model).double()
    layer, head, d = 1, 1, model.config.head_dim
    cut = copy.deepcopy(model)
    with torch.no_grad():
        cut.blocks[layer].attn.proj.weight[:, head * d : (head + 1) * d] = 0.0
    inputs = answer_sequences(task, 64)[:, :-1]
    with evaluating(model), model.hooks(ablation_hooks(model, [(layer, head)], "zero")):
        hooked = model(inputs).logits
    with evaluating(cut):
        expected = cut(inputs).logits
    assert (hooked - expected).abs().max() <= 1e-12
    assert (hooked - model(inputs).logits).abs().max() > 1e-3  # the head did something


def test_mean_ablation_uses_each_heads_mean_z_per_position_over_the_scored_sample(trained):
    task, model = trained
    model = copy.deepcopy(model).double()
    _, means = baseline_and_means(task, model, CPU, SAMPLE)  # recorded during KV-cached generation
    prompts = answer_sequences(task, SAMPLE)[:, : task.prompt_length]
    generated = generate(model, prompts, task.answer_length, temperature=0.0)  # what the scoring read
    with torch.no_grad():
        _, cache = model.run_with_cache(generated[:, :-1], names=[block_hook(layer, "z") for layer in range(2)])
    for layer in range(2):
        by_hand = cache[block_hook(layer, "z")].mean(dim=0)  # (H, T, d)
        assert (means.of(layer) - by_hand).abs().max() <= 1e-12


def test_mean_ablation_over_a_sample_of_one_changes_nothing(trained):
    """With one example, each head's mean z is that example's own z at every position, so replacing it is
    the identity: a check that the positions of KV-cached decoding steps are tracked right."""
    task, model = trained
    model = copy.deepcopy(model).double()
    baseline, means = baseline_and_means(task, model, CPU, 1)
    every = [(layer, head) for layer in range(2) for head in range(2)]
    sequence = answer_sequences(task, 1)[:, :-1]
    with evaluating(model):
        plain = model(sequence).logits
        with model.hooks(ablation_hooks(model, every, "mean", means)):
            ablated = model(sequence).logits
    assert (ablated - plain).abs().max() <= 1e-10
    assert ablated_metrics(task, model, CPU, every, "mean", 1, means) == baseline


def test_head_means_place_one_token_prompts_and_their_cached_steps_at_their_positions(trained):
    """Two generations from one-token prompts: each call's z is placed by the model's hook offset, so the
    second prompt is position 0 again (a guess from the call's length would have put it after the first)."""
    _, model = trained
    model = copy.deepcopy(model).double()
    prompts = torch.tensor([[1], [3]])
    means = HeadMeans()
    with model.hooks(means.hooks(model)):
        generated = torch.cat([generate(model, prompt[None], 4, temperature=0.0) for prompt in prompts])
    with torch.no_grad():
        _, cache = model.run_with_cache(generated[:, :-1], names=[block_hook(layer, "z") for layer in range(2)])
    for layer in range(2):
        by_hand = cache[block_hook(layer, "z")].mean(dim=0)  # (H, 4, d)
        assert means.of(layer).shape == by_hand.shape
        assert (means.of(layer) - by_hand).abs().max() <= 1e-12


def test_ablation_refuses_a_layer_or_head_the_model_lacks(trained):
    task, model = trained
    with pytest.raises(InspectError, match=r"layer 2 is out of range: the model has 2 layers \(0..1\)"):
        ablation_hooks(model, [(2, 0)], "zero")
    with pytest.raises(InspectError, match=r"head 5 is out of range: each layer has 2 heads \(0..1\)"):
        ablation_hooks(model, [(0, 5)], "zero")


# logit lens ----------------------------------------------------------------------------------
def test_logit_lens_at_the_last_layer_is_the_models_own_logits_and_metric(trained):
    task, model = trained
    lens = logit_lens(task, model, CPU, SAMPLE)
    assert lens.depths == ["embeddings", "0: + attention", "0: + MLP", "1: + attention", "1: + MLP"]
    metrics = task.evaluate(model, "heldout", CPU, SAMPLE)  # greedy generation, the same sample
    assert lens.examples == metrics["examples"] == SAMPLE
    assert lens.exact_match[-1] == metrics["exact_match"]
    assert lens.accuracy[-1] == [metrics[f"{name}_accuracy"] for name in task.answer_position_names()]
    sequences = answer_sequences(task, SAMPLE)
    with evaluating(model):
        logits, cache = model.run_with_cache(sequences[:, :-1], names=[block_hook(1, "resid_post")])
        assert torch.equal(decode(model, cache[block_hook(1, "resid_post")]), logits)
    queries = task.answer_queries()
    answer_logits = logits[:, queries].reshape(-1, logits.shape[-1])
    expected_loss = float(cross_entropy(answer_logits, sequences[:, queries.start + 1 : queries.stop + 1].flatten()))
    assert lens.loss[-1] == pytest.approx(expected_loss, rel=1e-5)
    assert lens.exact_match[0] < 0.05 < lens.exact_match[-1]  # the embeddings alone do not sort


# patching ------------------------------------------------------------------------------------
def test_corrupted_pairs_differ_in_one_prompt_token_and_first_change_the_answer_where_asked(trained):
    task, _ = trained
    pairs = corrupted_pairs(task, 200, corrupted_position=2, answer_position=1)
    assert len(pairs.clean) == 200
    prompt, p = pairs.clean[:, : task.prompt_length], task.prompt_length
    differs = prompt != pairs.corrupted[:, :p]
    assert differs[:, 2].all() and differs.sum(dim=1).eq(1).all()
    assert torch.equal(pairs.corrupted[:, p:], pairs.corrupted[:, :4].sort(dim=1).values)  # a true sort
    assert (
        torch.equal(pairs.clean[:, p], pairs.corrupted[:, p])
        and (pairs.clean[:, p + 1] != pairs.corrupted[:, p + 1]).all()
    )


def test_a_prompt_position_whose_token_never_varies_cannot_be_corrupted():
    addition = get_task("addition", digits=2)  # "12+34=": position 2 is always "+"
    pairs = corrupted_pairs(addition, 50, corrupted_position=0, answer_position=None)
    assert (pairs.clean[:, 2] == pairs.corrupted[:, 2]).all() and len(pairs.clean) == 50
    with pytest.raises(InspectError, match="no single-token change of prompt position 2 changes the answer"):
        corrupted_pairs(addition, 50, corrupted_position=2, answer_position=None)


def test_patching_the_clean_residual_restores_all_at_the_answer_position_and_at_the_corrupted_token(trained):
    task, model = trained
    after = patch(task, model, CPU, "resid_post", 200, corrupted_position=0)
    query = len(after.positions) - 1
    assert after.clean_difference > 0 > after.corrupted_difference
    assert after.restored[-1][query] == pytest.approx(1.0, abs=1e-9)  # the last residual is all the head reads
    before = patch(task, model, CPU, "resid_pre", 200, corrupted_position=0)
    assert before.restored[0][0] == pytest.approx(1.0, abs=1e-9)  # the only position where the inputs differ
    assert all(abs(share) < 1e-9 for share in before.restored[0][1:])  # identical positions: nothing to restore


@dataclass(frozen=True)
class OutsideSortParams:
    corruptible: bool = True


class OutsideSort(PromptAnswerTask):
    """A prompt-answer task written outside gpt-tasks' built-ins, as a plugin would: 4 digits then them sorted
    (what the fixture model learned), numbered and split its own way; `corruptible` says whether it names its
    single-token corruptions."""

    name = "outside-sort"
    Params = OutsideSortParams
    primary_metric = "exact_match"
    vocab = CharVocab(DIGITS[:10])
    prompt_length = answer_length = 4

    def __init__(self, params: OutsideSortParams):
        super().__init__(params)
        self.split = IndexedSplit(10**4, lambda ids: as_bytes(digits_of(ids, 4, 10)), 0.25, salt=b"outside")

    def defaults(self) -> Defaults:
        return Defaults(model=self.model_config(n_layer=2, n_head=2, n_embd=32))

    def sequences(self, ids: torch.Tensor) -> torch.Tensor:
        digits = digits_of(ids, 4, 10)  # (N, 4)
        return torch.cat((digits, digits.sort(dim=1).values), dim=1)

    def single_token_corruptions(self, ids: torch.Tensor) -> torch.Tensor | None:
        return one_digit_changes(ids, 4, 10) if self.params.corruptible else super().single_token_corruptions(ids)


def test_patch_corrupts_a_third_party_task_by_its_own_method_and_refuses_one_without_it(trained):
    _, model = trained
    task = OutsideSort(OutsideSortParams())
    patched = patch(task, model, CPU, "resid_pre", 100, corrupted_position=1)
    assert patched.examples == 100 and patched.clean_difference > 0 > patched.corrupted_difference
    assert patched.restored[0][1] == pytest.approx(1.0, abs=1e-9)  # the one position where the inputs differ
    assert all(abs(share) < 1e-9 for i, share in enumerate(patched.restored[0]) if i != 1)
    silent = OutsideSort(OutsideSortParams(corruptible=False))
    message = r"^patch needs prompts that differ in one token, and task 'outside-sort' does not say how to make them"
    with pytest.raises(InspectError, match=message):
        patch(silent, model, CPU, "resid_pre", 100)


def test_patch_refuses_a_point_blocks_lack_and_positions_out_of_range(trained):
    task, model = trained
    with pytest.raises(InspectError, match="unknown hook name 'resid'; each block's are: attn_out"):
        patch(task, model, CPU, "resid", 10)
    with pytest.raises(InspectError, match=r"corrupted position 4 is out of range: prompts have 4 tokens"):
        patch(task, model, CPU, "resid_pre", 10, corrupted_position=4)
    with pytest.raises(InspectError, match=r"answer position 9 is out of range"):
        patch(task, model, CPU, "resid_pre", 10, answer_position=9)


# probes --------------------------------------------------------------------------------------
def test_probes_are_logged_at_every_evaluation_and_in_the_final_metrics(trained_dir):
    key = probe_key("source_attention")
    evaluated = [record for record in read_metrics(trained_dir) if "heldout_exact_match" in record]
    early = [25, 50, 75, 125, 150, 175, 225, 250]  # sort's early evaluations, every 25 steps to step 250
    assert [record["step"] for record in evaluated] == sorted([100, 200, 300, *early])
    assert all(0.0 <= record[key] <= 1.0 for record in evaluated)
    final = json.loads((trained_dir / RunLayout.FINAL).read_text())
    assert final[key] == evaluated[-1][key] > 0.5  # a sorting model reads the digit it writes


SMALL_TASKS = [("sort", {"length": 4}), ("addition", {"digits": 2}), ("modadd", {"p": 11})]


@pytest.mark.parametrize(("name", "params"), SMALL_TASKS)
def test_every_builtin_probe_name_reads_back_as_a_probe_summary(name, params):
    task = get_task(name, **params)
    torch.manual_seed(0)
    probes = measure_probes(task, GPT(task.defaults().model), CPU)
    assert probes, f"{name} has built-in probes"
    for probe in probes:
        parsed = parse_metric_key(probe_key(probe))
        assert parsed.is_probe and not parsed.is_position_detail and parsed.name == f"probe_{probe}"


# the command ---------------------------------------------------------------------------------
def test_inspect_heads_prints_the_table_and_writes_the_record_and_picture(cli, run_copy):
    result = cli("inspect", run_copy, "heads", "--examples", 200, "--device", "cpu")
    assert result.code == 0, result.err
    assert "nothing ablated" in result.out and "zero-ablated  mean-ablated" in result.out
    record = json.loads(RunLayout(run_copy).heads_ablation.read_text())
    assert set(record) == {
        "metric", "split", "examples", "baseline", "zero", "mean", "layer_zero", "higher_is_better", "step"
    }  # fmt: skip
    assert "all heads zero-ablated" in result.out and "findings:" in result.out
    assert record["metric"] == "exact_match" and record["split"] == "heldout" and record["examples"] == 200
    assert len(record["zero"]) == len(record["mean"]) == 2 and all(len(row) == 2 for row in record["zero"])
    assert RunLayout(run_copy).heads_picture.stat().st_size > 10_000


def test_inspect_heads_ablate_all_scores_the_model_without_attention(cli, run_copy):
    result = cli("inspect", run_copy, "heads", "--examples", 200, "--ablate", "all", "--device", "cpu")
    assert result.code == 0, result.err
    assert "with heads 0.0, 0.1, 1.0, 1.1 zero-ablated" in result.out
    assert not RunLayout(run_copy).heads_ablation.exists()  # a combination is printed, not recorded


def test_inspect_logit_lens_and_patch_write_their_records_and_pictures_one_per_patched_point(cli, run_copy):
    layout = RunLayout(run_copy)
    assert cli("inspect", run_copy, "logit-lens", "--examples", 200, "--device", "cpu").code == 0
    assert json.loads(layout.logit_lens.read_text())["depths"][-1] == "1: + MLP"
    for point in ("attn_out", "resid_pre"):
        result = cli("inspect", run_copy, "patch", "--examples", 100, "--hook", point, "--device", "cpu")
        assert result.code == 0, result.err
    for point in ("attn_out", "resid_pre"):  # the second did not overwrite the first
        assert json.loads(layout.patching(point).read_text())["point"] == point
        assert layout.patching_picture(point).is_file()
    assert layout.logit_lens_picture.is_file()


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("patch", "--hook", "blocks.0.nope"), ("unknown hook name 'blocks.0.nope'",)),
        (("heads", "--ablate", "2.0"), ("layer 2 is out of range",)),
        (("heads", "--ablate", "0.7"), ("head 7 is out of range",)),
        (("heads", "--ablate", "first"), ("--ablate takes LAYER.HEAD",)),
        (("heads", "--ablate", "\u00b2.0"), ("--ablate takes LAYER.HEAD",)),  # '²'.isdigit(), and int('²') raises
        (("heads", "--ablate", "0.0", "--ablate", "0.0"), ("--ablate names head 0.0 more than once",)),
        (("heads", "--ablate", "all", "--ablate", "1.1"), ("--ablate names head 1.1 more than once",)),
        (("patch", "--corrupt", "-1"), ("corrupted position -1 is out of range",)),
        (("patch", "--answer-position", "4"), ("answer position 4 is out of range",)),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(cli, run_copy, args, fragments):
    before = sorted(p.name for p in run_copy.iterdir())
    assert_one_line_error(cli("inspect", run_copy, *args, "--device", "cpu"), *fragments)
    assert sorted(p.name for p in run_copy.iterdir()) == before


def test_a_missing_run_directory_is_one_line(cli, tmp_path):
    assert_one_line_error(cli("inspect", tmp_path / "absent", "heads"), "does not exist")


def test_patch_and_logit_lens_refuse_a_task_without_prompt_answer_shape(cli, tmp_path):
    run_dir = tmp_path / "modadd"
    trained = cli(
        "run", "--task", "modadd", "--set", "p=11", "--steps", "2", "--device", "cpu", "--quiet", "--out", run_dir
    )
    assert trained.code == 0, trained.err
    for command in ("patch", "logit-lens", "reads"):
        for examples in ((), ("--examples", "999999")):  # the task named, not --examples: none would do
            result = cli("inspect", run_dir, command, "--device", "cpu", *examples)
            assert_one_line_error(result, f"{command} needs a prompt-answer task", "'modadd'")
    heads = cli("inspect", run_dir, "heads", "--device", "cpu")  # ablation needs only the task's own scoring
    assert heads.code == 0, heads.err
    assert json.loads(RunLayout(run_dir).heads_ablation.read_text())["metric"] == "accuracy"


# randomized positions: every analysis reads the ids the model trained at ------------------------------------------


@pytest.fixture(scope="module")
def randomized(tmp_path_factory):
    """The two-layer sort run trained with randomized position ids (max_positions 24 for its 8 tokens)."""
    run_dir = tmp_path_factory.mktemp("randomized") / "sort"
    trained_sort(run_dir, "--set", "randomized_positions=true", "--set", "max_positions=24")
    return load_run(run_dir, CPU)


def test_a_randomized_models_logit_lens_ends_at_its_own_exact_match(randomized):
    """Read at positions 0..T-1, which it never trained at, the model scored 0.0006 where it scores 0.27."""
    scored = randomized.task.evaluate(randomized.model, HELDOUT, CPU, 1000)["exact_match"]
    lens = logit_lens(randomized.task, randomized.model, CPU, 1000)
    assert scored > 0.1 and lens.exact_match[-1] == pytest.approx(scored, abs=0.03)


@pytest.mark.parametrize("analysis", ["logit-lens", "reads", "patch"])
def test_every_forward_of_an_analysis_of_a_randomized_model_reads_drawn_position_ids(randomized, analysis):
    model, seen = randomized.model, []
    forward = model.forward

    def spying(idx, *args, positions=None, **kwargs):
        seen.append(positions)
        return forward(idx, *args, positions=positions, **kwargs)

    model.forward = spying
    try:
        if analysis == "logit-lens":
            logit_lens(randomized.task, model, CPU, 50)
        elif analysis == "reads":
            head_reads(randomized.task, model, CPU, 50)
        else:
            patch(randomized.task, model, CPU, "resid_pre", 50)
    finally:
        del model.forward
    assert seen and all(ids is not None and (ids[..., 1:] > ids[..., :-1]).all() for ids in seen)


def test_the_explorer_explains_a_randomized_models_answer_at_the_ids_it_was_generated_with(randomized):
    """Generated at drawn ids and explained at 0..T-1, the page's probabilities were not the answer's."""
    view = explain_prompt(randomized.config.build_sampler(), randomized.model, CPU, "3914")
    best = view.lens_probability[-1][3:]  # the last depth's top probability at the answer's queries
    assert len(view.answer_probability) == 4 and view.answer_probability == pytest.approx(best, abs=1e-6)


def test_reads_leaves_out_only_the_layers_this_checkpoints_head_ablation_finds_nearly_unused(cli, run_copy):
    """A head ablation of an earlier checkpoint (the run resumed since) decided which layers the reads left out."""
    assert cli("inspect", run_copy, "heads", "--examples", 200, "--device", "cpu").code == 0
    path = RunLayout(run_copy).heads_ablation
    record = json.loads(path.read_text())
    path.write_text(json.dumps(record | {"layer_zero": [0.0, record["baseline"]]}))  # layer 1: nearly unused
    reads = cli("inspect", run_copy, "reads", "--examples", 200, "--device", "cpu")
    assert reads.code == 0 and "layer 1's heads are left out" in reads.out
    path.write_text(json.dumps(record | {"layer_zero": [0.0, record["baseline"]], "step": record["step"] - 1}))
    reads = cli("inspect", run_copy, "reads", "--examples", 200, "--device", "cpu")
    assert reads.code == 0 and "left out" not in reads.out
