"""Hostile inputs to the run directory, the settings, the environment, inspect and serve: a read-only output
folder, float settings past float32, a record of a checkpoint that is not the final one, an --examples past the
split, a text run whose corpus is gone, config.json sizes and types its checkpoint does not hold, torchrun's
variables left behind, a damaged inspect record, and a model with nothing to patch. Each is one line (or the
right result), and nothing already written is lost."""

from __future__ import annotations

import errno
import hashlib
import json
import re
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from train_helpers import TINY, assert_one_line_error

from gpt_train.config import RunConfig
from gpt_train.files import WriteError, write_atomically
from gpt_train.lab.common import InspectError
from gpt_train.lab.inspect import Inspected, inspect_patch
from gpt_train.lab.serve import Explorer
from gpt_train.loading import load_run
from gpt_viz import RunLayout, VizError


def test_a_read_only_folder_is_the_write_error_not_the_clean_ups(tmp_path, monkeypatch):
    target = tmp_path / "config.json"
    target.write_text("old")

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(Path, "unlink", read_only)  # the clean-up fails as the write did
    with pytest.raises(WriteError, match=r"cannot write .*config.json \(Read-only file system\)"):
        write_atomically(target, read_only)
    assert target.read_text() == "old"


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("grokfast_lambda=1e39", "grokfast_lambda=1e+39 is outside what float32"),
        ("lr=1e39", "lr=1e+39"),
        ("min_lr=1e-50", "min_lr=1e-50"),
        ("weight_decay=3.5e38", "weight_decay=3.5e+38"),
        ("init_scale=1e300", "init_scale=1e+300"),
    ],
)
def test_a_float_setting_float32_cannot_hold_is_refused_before_anything_is_written(cli, tmp_path, setting, named):
    out = tmp_path / "run"
    assert_one_line_error(cli(*TINY, "--set", setting, "--out", out), named)
    assert not out.exists() or not any(out.iterdir())


def test_the_largest_float32_setting_is_accepted(cli, tmp_path):
    result = cli(*TINY, "--steps", "1", "--set", "grad_clip=3.4e38", "--out", tmp_path / "run")
    assert result.code == 0, result.err


def test_inspect_records_the_checkpoint_step_and_bounds_examples_by_the_split(cli, tmp_path):
    run_dir = tmp_path / "run"
    assert cli(*TINY, "--out", run_dir).code == 0
    result = cli("inspect", run_dir, "heads", "--examples", 50, "--device", "cpu")
    assert result.code == 0, result.err
    assert "inspecting the checkpoint of step 30" in result.out
    assert json.loads(RunLayout(run_dir).heads_ablation.read_text())["step"] == 30
    held = cli("inspect", run_dir, "heads", "--examples", 10**12, "--device", "cpu")
    assert_one_line_error(held, "--examples 1,000,000,000,000 is more than the", "held-out examples of this run")
    assert_one_line_error(cli("inspect", run_dir, "logit-lens", "--examples", 10**12), "is more than the")


@pytest.mark.parametrize("lost", ["gone", "changed"])
def test_a_text_run_whose_corpus_cannot_be_read_samples_with_its_recorded_tokenizer(cli, tmp_path, lost):
    """Gone, or changed since the run (an edited file; a shakespeare run's download absent): --prompt still samples."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 200)
    run_dir = tmp_path / "run"
    small = ("--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_head=2", "--set", "block_size=16")
    train = ("--set", "chunk_size=64", "--set", "final_eval_limit=8", "--set", "eval_limit=8", "--quiet")
    result = cli("run", "--task", "text", "--data", corpus, "--steps", "2", *small, *train, "--out", run_dir)
    assert result.code == 0, result.err
    before = RunConfig.load(run_dir).build_sampler()
    if lost == "gone":
        corpus.unlink()
    else:
        corpus.write_text(corpus.read_text() + "one more line\n")
    problem = (
        r"text corpus not found: .* \(moved\? .*eval takes --set data=NEW_PATH\)"
        if lost == "gone"
        else "is not the text"
    )
    with pytest.warns(UserWarning, match=f"{problem}.*; sampling with the tokenizer the run recorded"):
        after = RunConfig.load(run_dir).build_sampler()
    assert after.encode("the fox") == before.encode("the fox")
    assert after.decode(before.encode("lazy dog")) == "lazy dog"
    sampled = cli("sample", run_dir, "--prompt", "the", "--max-new-tokens", "3")
    assert sampled.code == 0 and sampled.out.startswith("the -> "), sampled.err
    unprompted = cli("sample", run_dir)  # a traceback
    assert unprompted.code == 2 and "Traceback" not in unprompted.err
    assert unprompted.err.splitlines()[-1].endswith("which is not at hand: give --prompt")


def edit_config(run_dir: Path, change) -> None:
    path = run_dir / RunLayout.CONFIG
    config = json.loads(path.read_text())
    change(config)
    path.write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("setting", "value", "said"),
    [
        ("n_embd", 10**9, "config.json's vocab_size x n_embd is (10, 1000000000), but checkpoint"),
        ("n_layer", 10**6, "config.json has n_layer=1000000, but checkpoint"),
        ("vocab_size", 10**9, "config.json's vocab_size x n_embd is (1000000000, 32)"),
        ("block_size", 10**9, "config.json's block_size x n_embd is (1000000000, 32)"),
        ("max_positions", 10**9, "config.json's max_positions x n_embd is (1000000000, 32)"),
    ],
)
def test_config_sizes_the_checkpoint_does_not_hold_are_one_line_and_no_model_is_built(
    cli, tiny_run, monkeypatch, setting, value, said
):
    edit_config(tiny_run, lambda config: config["model"].update({setting: value}))

    def never(*args, **kwargs):
        raise AssertionError("a model was built from config.json before its checkpoint was compared")

    monkeypatch.setattr("gpt_train.loading.GPT", never)
    for command in (["eval", tiny_run], ["sample", tiny_run], ["run", "--resume", tiny_run]):
        assert_one_line_error(cli(*command, "--device", "cpu"), said, f"{RunLayout(tiny_run).checkpoint}")


@pytest.mark.parametrize(
    ("setting", "value", "said"),
    [("n_head", 4, "n_head=4, but checkpoint"), ("residual", False, "residual=False, but checkpoint")],
)
def test_a_model_setting_edited_in_config_json_is_refused_not_computed_with_the_trained_weights(
    cli, tiny_run, setting, value, said
):
    """The weights' shapes do not pin n_head or the residual stream: such an edit loaded and scored a new model."""
    trained = json.loads((tiny_run / RunLayout.CONFIG).read_text())["model"][setting]
    edit_config(tiny_run, lambda config: config["model"].update({setting: value}))
    for command in (["eval", tiny_run], ["sample", tiny_run], ["run", "--resume", tiny_run]):
        result = cli(*command, "--device", "cpu")
        assert_one_line_error(result, f"config.json has {said}", f"was trained with {setting}={trained!r}")


def test_a_setting_that_only_shapes_training_may_differ_from_the_checkpoints(cli, tiny_run):
    edit_config(tiny_run, lambda config: config["model"].update(dropout=0.3, init_scale=2.0))
    assert cli("eval", tiny_run, "--device", "cpu").code == 0


def test_a_checkpoint_holding_a_nan_weight_is_refused_not_scored(cli, tiny_run):
    from gpt_train.checkpoint import load_checkpoint, save_checkpoint

    path = RunLayout(tiny_run).checkpoint
    state = load_checkpoint(path, "sort")
    state.model["wte.weight"][0, 0] = float("nan")
    save_checkpoint(path, state)  # a whole file, its checksum of these very tensors
    for command in (["eval", tiny_run], ["sample", tiny_run], ["export", tiny_run, tiny_run.parent / "hf"]):
        assert_one_line_error(cli(*command), "weight wte.weight holds nan or inf")


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda c: c.update(kernels=["attention"]), "kernels must be a mapping, got [\"attention\"]"),
        (lambda c: c.update(model=[1, 2]), "model must be a mapping"),
        (lambda c: c.update(eval_splits="heldout"), "eval_splits must be a list"),
        (lambda c: c.update(kernel_folders={"gelu": 5}), 'kernel_folders must hold strings only, got {"gelu": 5}'),
        (lambda c: c["model"].update(bias="yes"), 'model setting bias must be bool, got "yes"'),
        (lambda c: c["model"].update(n_layer=1.5), "model setting n_layer must be int, got 1.5"),
        (lambda c: c["task_params"].update(length=10**9), "vocab ** length must stay below 2**62"),
        (lambda c: c["task_params"].update(length=5), "make a sort task of vocab_size 10, block_size 9"),
    ],
    ids=["kernels a list", "model a list", "splits a string", "a folder a number", "a string for a bool",
         "a float for an int",
         "an absurd task size", "a task size not the model's"],
)  # fmt: skip
def test_a_config_field_of_the_wrong_type_or_size_is_one_line(cli, tiny_run, change, said):
    edit_config(tiny_run, change)
    for command in (["eval", tiny_run, "--limit", "10"], ["sample", tiny_run, "--prompt", "1234"]):
        assert_one_line_error(cli(*command, "--device", "cpu"), said)


@pytest.mark.parametrize(
    ("variables", "said"),
    [
        ({"RANK": "0", "WORLD_SIZE": "2"}, "RANK=0 and WORLD_SIZE=2 are set but MASTER_ADDR and MASTER_PORT not"),
        ({"RANK": "0", "WORLD_SIZE": "two"}, "WORLD_SIZE='two' is not what torchrun sets (a whole number, 1 or more)"),
        ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "gpu0"}, "LOCAL_RANK='gpu0' is not what torchrun sets"),
        ({"RANK": "-1", "WORLD_SIZE": "1"}, "RANK='-1' is not what torchrun sets (a whole number, 0 or more)"),
        ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "x", "MASTER_PORT": "1"}, "RANK=2 is not below WORLD_SIZE=2"),
        (
            {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "x", "MASTER_PORT": "http"},
            "MASTER_PORT='http' is not what torchrun sets (a port, 1 to 65535)",
        ),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "x", "MASTER_PORT": "70000"}, "MASTER_PORT='70000'"),
        (
            {"RANK": "0", "WORLD_SIZE": "9" * 20, "MASTER_ADDR": "x", "MASTER_PORT": "1"},
            "past what torchrun sets (at most 2,147,483,647)",
        ),
    ],
    ids=[
        "no rendezvous",
        "not a number",
        "a device for a rank",
        "negative",
        "rank past the world",
        "a port not a number",
        "a port past 65535",
        "a world past a C int",
    ],
)
def test_torchruns_variables_left_or_malformed_are_one_line_and_nothing_is_written(
    cli, tmp_path, monkeypatch, variables, said
):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    run_dir = tmp_path / "run"
    assert_one_line_error(cli(*TINY, "--out", run_dir), said, "start with torchrun, or unset")
    assert not run_dir.exists()


def test_serve_drops_a_head_record_whose_grid_is_not_numbers_and_opens_on_the_first_layer(tiny_run):
    heads = {"metric": "exact_match", "split": "heldout", "examples": 10, "baseline": 0.9, "step": 30,
             "zero": [["a", "b"]], "mean": [[0.1, 0.1]], "layer_zero": [0.1]}  # fmt: skip
    RunLayout(tiny_run).heads_ablation.write_text(json.dumps(heads))
    explorer = Explorer(tiny_run, torch.device("cpu"))
    assert "heads" not in explorer.summary["records"]
    assert explorer.summary["open"] == {"layer": 0, "head": 0, "by": "first layer"}


def tiny_records() -> dict[str, dict]:
    """A usable record of each kind for the tiny run's model (1 layer of 2 heads, 4-digit sort), by file name."""
    return {
        RunLayout.HEADS_ABLATION: {"metric": "exact_match", "split": "heldout", "examples": 10, "baseline": 0.9,
                                   "step": 30, "zero": [[0.1, 0.8]], "mean": [[0.2, 0.7]], "layer_zero": [0.1]},
        RunLayout.LOGIT_LENS: {"examples": 10, "depths": ["embeddings", "0: + attention", "0: + MLP"],
                               "answer_positions": ["0", "1"], "exact_match": [0.0, 0.5, 0.9], "loss": [2.0, 1.0, 0.5],
                               "accuracy": [[0.1, 0.1], [0.5, 0.6], [0.9, 0.9]], "position_loss": [[1, 1]] * 3},
        RunLayout.READS: {"examples": 10, "values": ["1", "2"], "reads": [[[[1.0, 2.0], [0.5, 1.5]]] * 2],
                          "counts": [[3, 4], [5, 6]], "on_answer": [[0.2, 0.3]], "prompt_length": 4},
        f"{RunLayout.PATCHING_PREFIX}resid_pre.json": {
            "point": "resid_pre", "examples": 5, "corrupted_position": 1, "answer_position": 0,
            "positions": ["p0", "p1"], "clean_difference": 3.0, "corrupted_difference": -1.0,
            "restored": [[0.1, 0.95]], "example": {"clean": "1234", "corrupted": "1734"}},
    }  # fmt: skip


def write_records(run_dir: Path, records: dict[str, dict]) -> None:
    for name, record in records.items():
        (run_dir / name).write_text(json.dumps(record))  # Python's json writes NaN and Infinity as they are


def test_serve_keeps_usable_records_of_every_kind(tiny_run):
    write_records(tiny_run, tiny_records())
    summary = Explorer(tiny_run, torch.device("cpu")).summary
    assert {"heads", "logit_lens", "reads"} <= set(summary["records"]) and list(summary["records"]["patching"]) == [
        "resid_pre"
    ]
    assert summary["left_out"] == [] and summary["open"] == {"layer": 0, "head": 0, "by": "ablation"}


UNUSABLE = {
    "a NaN": (RunLayout.HEADS_ABLATION, "baseline", float("nan")),
    "an infinity in a grid": (RunLayout.HEADS_ABLATION, "zero", [[0.1, float("inf")]]),
    "a number as text": (RunLayout.HEADS_ABLATION, "baseline", "0.9"),
    "a bool for a number": (RunLayout.HEADS_ABLATION, "mean", [[True, 0.1]]),
    "an int past any float": (RunLayout.HEADS_ABLATION, "layer_zero", [10**400]),
    "a row short": (RunLayout.HEADS_ABLATION, "mean", [[0.1]]),
    "another model's layers": (RunLayout.HEADS_ABLATION, "layer_zero", [0.1, 0.2]),
    "a NaN where only the page reads it": (RunLayout.LOGIT_LENS, "accuracy", [[0.1, 0.1], [0.5, float("nan")], [1, 1]]),
    "a depth too few": (RunLayout.LOGIT_LENS, "exact_match", [0.0, 0.5]),
    "a label not text": (RunLayout.LOGIT_LENS, "depths", ["embeddings", 1, 2]),
    "an example not a mapping": (f"{RunLayout.PATCHING_PREFIX}resid_pre.json", "example", "1234 / 1734"),
    "a point not text": (f"{RunLayout.PATCHING_PREFIX}resid_pre.json", "point", ["resid_pre"]),
    "a negative count": (RunLayout.READS, "counts", [[3, -4], [5, 6]]),
    "a head's table missing": (RunLayout.READS, "reads", [[[[1.0, 2.0], [0.5, 1.5]]]]),
}


@pytest.mark.parametrize(("name", "key", "value"), UNUSABLE.values(), ids=UNUSABLE.keys())
def test_serve_leaves_out_a_record_with_a_field_of_the_wrong_type_value_or_shape_and_says_so(
    tiny_run, name, key, value
):
    records = tiny_records()
    records[name][key] = value
    write_records(tiny_run, records)
    explorer = Explorer(tiny_run, torch.device("cpu"))
    summary = json.loads(explorer.summary_json)  # strict JSON: what the page parses
    assert summary["left_out"] == [name]
    files = {"heads": RunLayout.HEADS_ABLATION, "logit_lens": RunLayout.LOGIT_LENS, "reads": RunLayout.READS}
    kept = {files[kind] for kind in summary["records"] if kind != "patching"}
    kept |= {f"{RunLayout.PATCHING_PREFIX}{point}.json" for point in summary["records"]["patching"]}
    assert kept == set(records) - {name}


def test_serve_sends_only_the_fields_it_checked(tiny_run):
    records = tiny_records()
    records[RunLayout.LOGIT_LENS]["position_loss"] = [[float("nan")] * 2] * 3  # a field the page never reads
    write_records(tiny_run, records)
    summary = json.loads(Explorer(tiny_run, torch.device("cpu")).summary_json)
    assert "logit_lens" in summary["records"] and "position_loss" not in summary["records"]["logit_lens"]


def test_a_viz_error_in_a_command_is_one_line(cli, tiny_run, monkeypatch):
    def bad_grid(*args, **kwargs):
        raise VizError("'zero' must be rows of numbers of equal length")

    monkeypatch.setattr("gpt_train.lab.inspect.save", bad_grid)
    result = cli("inspect", tiny_run, "heads", "--examples", "20", "--device", "cpu")
    assert result.code == 2 and "Traceback" not in result.err, result.err
    assert result.err.endswith("gpt-train: error: 'zero' must be rows of numbers of equal length\n")  # after the bar


@pytest.mark.parametrize(
    ("fill", "said"),
    [
        (0.0, "logit difference is 0 on clean and corrupted inputs alike: its answer does not depend on"),
        (float("nan"), "logit differences are not finite (clean nan, corrupted nan): its weights hold NaN or inf"),
    ],
    ids=["zero weights", "nan weights"],
)
def test_patching_a_model_with_nothing_to_restore_is_refused_in_words_and_writes_nothing(tiny_run, fill, said):
    run = load_run(tiny_run, "cpu")
    model = run.model
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(fill)
    layout = RunLayout(tiny_run)
    with pytest.raises(InspectError, match=re.escape(said)):
        inspect_patch(Inspected(run.task, model, torch.device("cpu"), 30, layout), "resid_pre", 50)
    assert not layout.patching("resid_pre").exists() and not layout.patching_picture("resid_pre").exists()


def rewrite_checkpoint(run_dir: Path, change) -> None:
    """The run's checkpoint as `change(tensors, metadata)` leaves it, its checksum recomputed as anyone can."""
    path = RunLayout(run_dir).checkpoint
    with safe_open(str(path), framework="pt") as archive:
        tensors = {name: archive.get_tensor(name) for name in archive.keys()}  # noqa: SIM118 (not a dict)
        metadata = archive.metadata()
    change(tensors, metadata)
    digest = hashlib.sha256()
    for name in sorted(tensors):
        digest.update(name.encode())
        digest.update(tensors[name].contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    save_file(tensors, str(path), metadata=metadata | {"sha256": digest.hexdigest()})


def _renamed(old: str, new: str):
    def change(tensors, metadata):
        name = next(name for name in tensors if name.startswith(old))
        tensors[new + name.removeprefix(old)] = tensors.pop(name)

    return change


def _optimiser_state_reshaped(tensors, metadata):
    name = next(name for name in tensors if name.endswith("/exp_avg"))
    tensors[name] = tensors[name].reshape(-1)[:1].clone()


TAMPERED = {
    "optimiser number not a number": (_renamed("optim/0/", "optim/x/"), "'optim/x/"),
    "optimiser slot unknown": (_renamed("optim/0/exp_avg_sq", "optim/0/momentum"), "'optim/0/momentum'"),
    "tensor of no kind": (_renamed("rng/cpu", "random/cpu"), "'random/cpu' is of no kind"),
    "rng state of 3 bytes": (lambda t, m: t.update({"rng/cpu": torch.zeros(3, dtype=torch.uint8)}), "holds 3 bytes"),
    "rng state of floats": (lambda t, m: t.update({"rng/cpu": torch.zeros(5056)}), "'rng/cpu' is not a random"),
    "bool weights": (lambda t, m: t.update({k: v > 0 for k, v in t.items() if k.startswith("model/")}), "not a float"),
    "int optimiser state": (
        lambda t, m: t.update({k: v.long() for k, v in t.items() if k.endswith("exp_avg")}), "not a float"),
    "negative step": (lambda t, m: m.update(step="-5"), "step '-5' is not a whole number"),
    "step not a number": (lambda t, m: m.update(step="ten"), "step 'ten' is not a whole number"),
    "elapsed not finite": (lambda t, m: m.update(elapsed="nan"), "elapsed nan is not seconds"),
    "cool-down start not a number": (lambda t, m: m.update(cooldown_from="x"), "cooldown_from 'x' is not a whole"),
    "cool-down start after the step": (lambda t, m: m.update(cooldown_from="99"), "cooldown_from 99 is after step"),
    "processes not a number": (lambda t, m: m.update(world_size="two"), "world_size 'two' is not a whole number"),
    "no processes": (lambda t, m: m.update(world_size="0"), "world_size 0 is not a count of one or more"),
    "no threads": (lambda t, m: m.update(threads="0"), "threads 0 is not a count of one or more"),
    "loss not a number": (lambda t, m: m.update(loss="low"), "unreadable metadata"),
    "param_groups not groups": (lambda t, m: m.update(param_groups='{"lr": 1}'), "param_groups is not"),
    "a learning rate as text": (
        lambda t, m: m.update(param_groups=m["param_groups"].replace('"lr": ', '"lr": "0.1", "x": ', 1)),
        "param_groups is not"),
    "an optimiser state of another shape": (_optimiser_state_reshaped, "has shape (1,)"),
}  # fmt: skip


@pytest.mark.parametrize(("change", "said"), TAMPERED.values(), ids=TAMPERED.keys())
def test_a_checkpoint_tampered_with_its_checksum_recomputed_is_one_line_and_the_run_keeps_its_history(
    cli, tiny_run, change, said
):
    config = json.loads((tiny_run / "config.json").read_text())
    config["train"]["steps"] = 40  # more to train: the resume reads the checkpoint
    (tiny_run / "config.json").write_text(json.dumps(config))
    rewrite_checkpoint(tiny_run, change)
    layout = RunLayout(tiny_run)
    kept = {path: path.read_bytes() for path in (layout.checkpoint, layout.metrics, layout.final)}
    assert_one_line_error(cli("run", "--resume", tiny_run, "--quiet"), said)
    assert {path: path.read_bytes() for path in kept} == kept
    if "has shape" not in said:  # eval reads no optimiser state
        assert_one_line_error(cli("eval", tiny_run, "--device", "cpu", "--limit", "10"), said)
