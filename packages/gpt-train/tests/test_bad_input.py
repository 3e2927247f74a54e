"""Bad input: a one-line message, a non-zero exit, no traceback, and nothing already written lost."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from train_helpers import TINY, assert_one_line_error

import gpt_train.devices
from gpt_tasks.builtin.sort import SortParams, SortTask
from gpt_train.cli.group import _show_warning
from gpt_train.config import ConfigError, RunConfig, route
from gpt_train.devices import resolve_device
from gpt_train.distributed import DistributedError, Rank
from gpt_viz import RunLayout


def snapshot(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run_dir.iterdir())}


def test_unknown_task_lists_the_available_ones(cli):
    assert_one_line_error(cli("run", "--task", "sorting"), "unknown task 'sorting'", "sort")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA, so asking for it is not an error")
def test_unavailable_device_names_what_is_available(cli):
    assert_one_line_error(cli("run", "--task", "sort", "--device", "cuda"), "'cuda' is not available", "cpu")


def test_a_numbered_gpu_is_made_the_current_device(monkeypatch):
    """Triton kernels and CUDA graphs launch on the current device: `--device cuda:1` with cuda:0 current gave
    kernels cuda:1's pointers on cuda:0's stream."""
    made_current = []
    monkeypatch.setattr(gpt_train.devices, "available_devices", lambda: ["cpu", "cuda", "cuda:0", "cuda:1"])
    monkeypatch.setattr(torch.cuda, "set_device", made_current.append)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("cuda") == torch.device("cuda") and resolve_device("cpu") == torch.device("cpu")
    assert made_current == [torch.device("cuda", 1)]


def test_mps_0_as_torch_prints_an_mps_tensors_device_is_mps(monkeypatch):
    monkeypatch.setattr(gpt_train.devices, "available_devices", lambda: ["cpu", "mps"])
    assert resolve_device("mps:0") == resolve_device("MPS") == torch.device("mps")


def test_torchrun_on_mps_is_refused_in_one_line_before_anything_starts():
    """gloo and nccl carry CPU and CUDA tensors: each rank crashed in DistributedDataParallel with a traceback."""
    with pytest.raises(DistributedError, match=r"^torchrun runs on cpu \(gloo\) or cuda \(nccl\), not mps"):
        Rank(0, 0, 2).device_for(torch.device("mps"))
    assert Rank().device_for(torch.device("mps")) == torch.device("mps")


def test_auto_under_torchrun_on_a_mac_is_the_cpu(monkeypatch):
    monkeypatch.setattr(gpt_train.devices, "available_devices", lambda: ["cpu", "mps"])
    assert resolve_device("auto") == torch.device("mps")
    assert resolve_device("auto", distributed=True) == torch.device("cpu")


def test_nonsense_device_is_refused(cli):
    assert_one_line_error(cli("run", "--task", "sort", "--device", "tpu"), "unknown device 'tpu'")


def test_invalid_model_shape_is_explained(cli, tmp_path):
    result = cli("run", "--task", "sort", "--set", "n_embd=30", "--out", tmp_path / "r")
    assert_one_line_error(result, "invalid model shape", "divisible by n_head")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("flag", ["--steps", "--batch-size"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_non_positive_steps_or_batch_size(cli, flag, value, tmp_path):
    setting = flag.removeprefix("--").replace("-", "_")
    result = cli("run", "--task", "sort", flag, value, "--out", tmp_path / "r")
    assert_one_line_error(result, f"{setting} must be positive, got {value}")
    assert not (tmp_path / "r").exists()


def test_unknown_set_key_lists_known_keys(cli):
    assert_one_line_error(
        cli("run", "--task", "sort", "--set", "n_layers=3"), "unknown --set key 'n_layers'", "n_layer"
    )


def test_a_set_key_two_scopes_share_must_name_its_scope():
    """A plugin task's `seed` took `--set seed=5` from the training settings without a word."""

    @dataclasses.dataclass(frozen=True)
    class SeededParams(SortParams):
        seed: int = 0

    seeded = type("SeededTask", (SortTask,), {"Params": SeededParams})
    with pytest.raises(ConfigError, match="seed is both a task and a train key: write task.seed or train.seed"):
        route({"seed": "5"}, seeded)
    assert route({"task.seed": "5", "train.seed": "3"}, seeded) == {
        "task": {"seed": "5"},
        "model": {},
        "train": {"seed": "3"},
    }


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--steps", "3", "--set", "steps=0"], "--steps and --set steps both set steps; give it once"),
        (["--lr", "0.01", "--set", "train.lr=abc"], "--lr and --set train.lr both set lr"),
        (["--set", "n_layer=1", "--set", "model.n_layer=1"], "--set n_layer and --set model.n_layer both set model"),
    ],
    ids=["flag and key", "flag and scoped key", "key and scoped key"],
)
def test_a_setting_given_twice_is_refused_rather_than_one_value_dropped(cli, tmp_path, args, words):
    """The flag won and the other value was never even checked: --set steps=0 beside --steps 3 trained 3 steps."""
    assert_one_line_error(cli("run", "--task", "sort", *args, "--out", tmp_path / "r"), words)
    assert not (tmp_path / "r").exists()


def test_a_key_given_again_takes_its_last_value_as_a_repeated_flag_does(cli, tmp_path):
    args = ("--task", "sort", "--steps", "1", "--steps", "2", "--set", "n_layer=3", "--set", "n_layer=1")
    assert cli("run", *args, "--quiet", "--no-pictures", "--out", tmp_path / "r").code == 0
    config = RunConfig.load(tmp_path / "r")
    assert (config.model.n_layer, config.train.steps) == (1, 2)


def test_an_lr_below_the_default_min_lr_names_that_default(cli):
    """The rule alone ("min_lr (0.0001) must not exceed lr (1e-05)") blamed a setting the user never gave."""
    assert_one_line_error(
        cli("run", "--task", "sort", "--lr", "1e-5"), "below the default min_lr 0.0001", "--set min_lr=1e-06"
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--set", "n_embd=99999999", "--set", "n_head=1"], "GiB for its weights, gradients and AdamW state alone"),
        (["--set", "n_layer=99999999999999999999"], "choose a smaller n_layer or n_embd"),
    ],
    ids=["wide", "deep"],
)
def test_a_model_too_large_for_the_memory_is_refused_before_anything_is_written(cli, tmp_path, args, words):
    """It allocated layer after layer until the system killed it, or ended in an allocator's traceback."""
    assert_one_line_error(cli("run", "--task", "sort", *args, "--out", tmp_path / "r"), words)
    assert not (tmp_path / "r").exists()


def test_running_out_of_memory_while_training_is_one_line(cli, tmp_path, monkeypatch):
    def allocate(self, step):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 99 bytes.")

    monkeypatch.setattr("gpt_train.trainer.Trainer.train_step", allocate)
    result = cli(*TINY, "--out", tmp_path / "r")
    assert_one_line_error(result, "out of memory (DefaultCPUAllocator", "a smaller batch_size", code=1)


def test_running_out_of_memory_while_sampling_names_the_tokens_asked_for(cli, tiny_run, monkeypatch):
    """A model without a position limit caches every new token: the advice is fewer tokens, not a smaller batch."""

    def allocate(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 99 bytes.")

    monkeypatch.setattr("gpt_train.cli.trained.generate", allocate)
    result = cli("sample", tiny_run, "--prompt", "1234", "--max-new-tokens", "1000000000")
    assert_one_line_error(result, "out of memory (DefaultCPUAllocator", "fewer --max-new-tokens", code=1)


def test_set_value_of_the_wrong_type(cli):
    assert_one_line_error(cli("run", "--task", "sort", "--set", "n_layer=three"), "n_layer must be an integer")
    assert_one_line_error(cli("run", "--task", "sort", "--set", "layernorm=maybe"), "layernorm must be true or false")


def test_a_task_parameters_wrong_value_is_quoted_whole(cli, tiny_run):
    """The task's own message, its closing quote kept (an outer quote strip once ate it)."""
    for command in (("run", "--task", "sort", "--set", "length=abc"), ("eval", tiny_run, "--set", "length=abc")):
        result = cli(*command)
        assert_one_line_error(result, "length must be an integer, got 'abc'")
        assert result.err.strip().endswith("got 'abc'")


@pytest.mark.parametrize(
    ("settings", "fragments"),
    [
        (["min_length=3"], ["min_length below length needs separator=true"]),
        (["separator=true", "min_length=0"], ["min_length must be between 1 and length (6), got 0"]),
        (["randomized_positions=true"], ["invalid model shape", "needs max_positions larger than block_size (11)"]),
        (["pos=none", "randomized_positions=true", "max_positions=64"], ["needs pos=learned or pos=rope"]),
        (["max_positions=5"], ["invalid model shape", "max_positions (5) must be 0 (block_size) or at least"]),
        (["pos=rope", "max_positions=64"], ["with pos=rope and randomized_positions off it would do nothing"]),
    ],
)
def test_length_generalisation_options_out_of_range(cli, tmp_path, settings, fragments):
    result = cli("run", "--task", "sort", *(a for s in settings for a in ("--set", s)), "--out", tmp_path / "r")
    assert_one_line_error(result, *fragments)
    assert not (tmp_path / "r").exists()


def test_set_without_equals_sign(cli):
    assert_one_line_error(cli("run", "--task", "sort", "--set", "pos"), "key=value")


def test_flag_of_the_wrong_type_is_one_line(cli):
    assert_one_line_error(cli("run", "--task", "sort", "--steps", "many"), "'many' is not a valid integer")


def test_existing_run_is_refused_and_left_intact(cli, tiny_run):
    before = snapshot(tiny_run)
    assert_one_line_error(cli(*TINY, "--out", tiny_run), "already holds a finished run", "--force")
    assert "--resume" not in cli(*TINY, "--out", tiny_run).err  # a finished run cannot be resumed
    assert snapshot(tiny_run) == before


@pytest.mark.parametrize(
    ("given", "named"),
    [
        (["grokfast_alpha=0.5"], "grokfast_alpha weighs Grokfast's gradient average, and grokfast_lambda is 0"),
        (["pos=rope", "decay_position_embedding=true"], "and pos=rope has none"),
        (["early_eval_every=10"], "give one below it"),
        (["early_eval_every=0", "early_eval_until=100"], "early_eval_until ends the early evaluations"),
    ],
)
def test_a_training_setting_the_run_would_never_read_is_refused(cli, tmp_path, given, named):
    """Each trained a run bit for bit the same as without it, and said nothing."""
    settings = [arg for setting in given for arg in ("--set", setting)]
    assert_one_line_error(cli(*TINY, *settings, "--out", tmp_path / "run"), named)
    assert not (tmp_path / "run").exists()


def test_a_setting_set_as_it_acts_or_left_at_a_default_the_run_does_not_read_is_accepted(cli, tmp_path):
    extra = ("--steps", "2", "--set", "grokfast_lambda=1", "--set", "grokfast_alpha=0.5", "--set", "min_lr=1e-5")
    assert cli(*TINY, *extra, "--set", "early_eval_every=5", "--out", tmp_path / "run").code == 0


def test_a_config_whose_unverified_kernels_are_not_among_its_kernels_is_refused_by_every_reader(
    cli, tiny_run, tmp_path
):
    """`export` ended in a KeyError traceback; eval and sample took it."""
    path = RunLayout(tiny_run).config
    path.write_text(json.dumps(json.loads(path.read_text()) | {"unverified_kernels": ["attention"]}))
    for command in (("export", tiny_run, tmp_path / "hf"), ("eval", tiny_run), ("sample", tiny_run)):
        assert_one_line_error(cli(*command), "unverified_kernels names attention, which kernels does not")


def test_force_replaces_an_existing_run(cli, tiny_run):
    assert cli(*TINY, "--out", tiny_run, "--force", "--seed", "7").code == 0
    assert '"seed": 7' in (tiny_run / RunLayout.CONFIG).read_text()


def test_force_drops_the_pictures_and_page_gpt_viz_drew_of_the_replaced_model(cli, tiny_run):
    """They stayed beside the new run, showing the old model's attention."""
    views = ["explore.html", "attention-layer0.png", "attention-layer0.svg", "curves.svg", "grokking.svg"]
    for name in views:
        (tiny_run / name).write_text("the replaced model's")
    (tiny_run / "notes.txt").write_text("the user's own")
    assert cli(*TINY, "--out", tiny_run, "--force", "--no-pictures").code == 0
    assert [name for name in views if (tiny_run / name).exists()] == []
    assert (tiny_run / "notes.txt").read_text() == "the user's own"


def test_resume_of_a_missing_directory(cli, tmp_path):
    assert_one_line_error(cli("run", "--resume", tmp_path / "nowhere"), "does not exist")


def test_eval_of_a_missing_directory(cli, tmp_path):
    assert_one_line_error(cli("eval", tmp_path / "nowhere"), "does not exist")


def test_resume_or_eval_of_a_file_says_it_is_not_a_directory(cli, tmp_path):
    (tmp_path / "a-file").write_text("not a run")
    assert_one_line_error(cli("run", "--resume", tmp_path / "a-file"), "a-file is not a directory")
    assert_one_line_error(cli("eval", tmp_path / "a-file"), "a-file is not a directory")


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [truncate, flip_last_byte], ids=["truncated", "corrupted"])
@pytest.mark.parametrize("command", ["resume", "eval"])
def test_damaged_checkpoint_is_reported_and_kept(cli, tiny_run, damage, command):
    checkpoint = tiny_run / RunLayout.CHECKPOINT
    damage(checkpoint)
    before = snapshot(tiny_run)
    args = ("run", "--resume", tiny_run) if command == "resume" else ("eval", tiny_run)
    assert_one_line_error(cli(*args), "checkpoint", "corrupted")
    assert snapshot(tiny_run) == before


@pytest.mark.parametrize("command", ["resume", "eval"])
def test_missing_checkpoint(cli, tiny_run, command):
    (tiny_run / RunLayout.CHECKPOINT).unlink()
    args = ("run", "--resume", tiny_run) if command == "resume" else ("eval", tiny_run)
    assert_one_line_error(cli(*args), "no checkpoint")


def test_resume_as_another_task_is_refused(cli, tiny_run):
    assert_one_line_error(
        cli("run", "--task", "addition", "--resume", tiny_run), "is a run of task 'sort', not 'addition'"
    )


def test_checkpoint_of_another_task_is_refused(cli, tiny_run, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    config = (tiny_run / RunLayout.CONFIG).read_text().replace('"task": "sort"', '"task": "addition"', 1)
    (other / RunLayout.CONFIG).write_text(config)
    (other / RunLayout.CHECKPOINT).write_bytes((tiny_run / RunLayout.CHECKPOINT).read_bytes())
    assert_one_line_error(cli("eval", other), "belongs to a run of task 'sort', not 'addition'")


def test_resume_refuses_changed_settings(cli, tiny_run):
    assert_one_line_error(cli("run", "--resume", tiny_run, "--lr", "0.1"), "drop --lr")
    elsewhere = tiny_run.parent / "elsewhere"  # --resume trained on in tiny_run and never made it
    assert_one_line_error(cli("run", "--resume", tiny_run, "--out", elsewhere), "drop --out")
    assert not elsewhere.exists()


def test_eval_with_learned_positions_past_their_table(cli, tiny_run):
    result = cli("eval", tiny_run, "--set", "length=6")
    assert_one_line_error(result, "learned positions have no vectors past their table")


@pytest.mark.parametrize("key", ["n_layer", "model.n_layer", "bogus", "task.bogus"])
def test_eval_set_of_a_key_that_is_no_task_parameter_names_the_ones_eval_takes(cli, tiny_run, key):
    result = cli("eval", tiny_run, "--set", f"{key}=2")
    assert_one_line_error(result, f"eval --set takes the sort task's parameters (length, min_length), not {key}")


def test_eval_set_that_changes_the_vocabulary_is_refused(cli, tiny_run, tmp_path):
    """modadd's p sets its vocabulary: a smaller p scored other symbols in silence, a larger one indexed past the
    embedding."""
    modadd = tmp_path / "modadd"
    small = ("--set", "p=11", "--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_head=2", "--no-pictures")
    trained = cli("run", "--task", "modadd", "--device", "cpu", "--quiet", "--steps", "2", *small, "--out", modadd)
    assert trained.code == 0, trained.err
    for p, tokens in ((7, 8), (13, 14)):
        refused = cli("eval", modadd, "--set", f"p={p}")
        assert_one_line_error(refused, f"--set p={p} gives the modadd task a vocabulary of {tokens} tokens", "of 12")
    assert_one_line_error(cli("eval", tiny_run, "--set", "vocab=5"), "cannot change vocab of a trained sort run")


def test_eval_set_that_keeps_the_vocabularys_size_but_not_what_its_ids_mean_is_refused(cli, tiny_run):
    """sort with vocab 9 and the separator has 10 ids, as vocab 10 without: id 9 would be '=' to the evaluation."""
    refused = cli("eval", tiny_run, "--set", "vocab=9", "--set", "separator=true")
    assert_one_line_error(refused, "cannot change separator, vocab of a trained sort run", "what the token ids mean")


def test_eval_set_that_changes_the_held_out_split_is_refused(cli, tiny_run):
    """A larger heldout_fraction makes training examples held out: the run would be scored on what it learned."""
    assert_one_line_error(cli("eval", tiny_run, "--set", "heldout_fraction=0.5"), "cannot change heldout_fraction")


def test_a_very_long_prompt_is_refused_in_a_short_line(cli, tiny_run):
    """A 5,000-digit prompt was echoed whole: one line of 5,073 characters."""
    result = cli("sample", tiny_run, "--prompt", "9" * 5000)
    assert_one_line_error(result, f"prompt {'9' * 40!r}... (5,000 characters): 5000 tokens, and the model reads")
    assert len(result.err) < 200


def test_sample_prompt_outside_the_vocabulary(cli, tiny_run):
    assert_one_line_error(cli("sample", tiny_run, "--prompt", "12x4"), "not in the vocabulary")


def test_compile_without_a_cpu_compiler_is_explained(cli, tmp_path, monkeypatch):
    import gpt_train.compiling

    monkeypatch.setattr(gpt_train.compiling.shutil, "which", lambda name: None)
    result = cli(*TINY, "--compile", "--out", tmp_path / "run")
    assert_one_line_error(result, "--compile on CPU needs a C++ compiler")
    assert not (tmp_path / "run").exists()


def test_resume_of_a_finished_run_is_refused(cli, tiny_run):
    before = snapshot(tiny_run)
    refused = cli("run", "--resume", tiny_run)
    assert_one_line_error(refused, "already finished (30 of 30 steps)")
    assert refused.out == ""  # not "continuing sort in ..." before the error
    assert snapshot(tiny_run) == before


@pytest.mark.parametrize("final", [True, False], ids=["finished", "stopped-in-its-final-evaluation"])
def test_resume_of_a_checkpoint_past_the_steps_config_json_sets_is_refused(cli, tiny_run, final):
    """A hand-edited train.steps below the checkpoint's step "finished" the run at the checkpoint's step, writing a
    final.json of 30 steps for a config.json of 20, or called it finished at "30 of 20 steps"."""
    config = json.loads((tiny_run / RunLayout.CONFIG).read_text())
    config["train"]["steps"] = 20
    (tiny_run / RunLayout.CONFIG).write_text(json.dumps(config))
    if not final:
        (tiny_run / RunLayout.FINAL).unlink()
    before = snapshot(tiny_run)
    refused = cli("run", "--resume", tiny_run)
    assert_one_line_error(refused, "its checkpoint is at step 30, past the run's last step 20", "train.steps is 20")
    assert snapshot(tiny_run) == before


def test_missing_data_file_is_one_line(cli, tmp_path):
    result = cli("run", "--task", "shakespeare", "--data", tmp_path / "nowhere.txt", "--out", tmp_path / "run")
    assert_one_line_error(result, "task 'shakespeare'", "nowhere.txt")
    assert not (tmp_path / "run").exists()


def test_unwritable_output_directory(cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert_one_line_error(cli(*TINY, "--out", blocker / "run"), "cannot use", "as a run directory")
    assert blocker.read_text() == "not a directory"


def test_sample_with_an_empty_prompt(cli, tiny_run):
    assert_one_line_error(cli("sample", tiny_run, "--prompt", ""), "--prompt must not be empty")


def test_a_task_whose_defaults_raise_is_one_line(cli, tmp_path, monkeypatch):
    """A plugin's defaults() with a shape GPTConfig refuses (n_head=3 of n_embd=32) was a traceback."""

    def defaults(self):
        return self.model_config(n_layer=1, n_head=3, n_embd=32)

    monkeypatch.setattr(SortTask, "defaults", defaults)
    result = cli("run", "--task", "sort", "--out", tmp_path / "r")
    assert_one_line_error(result, "task 'sort': its defaults() raised ValueError", "divisible by n_head")
    assert not (tmp_path / "r").exists()


def test_sample_says_when_the_models_positions_cut_an_answer_short(cli, tiny_run):
    """A 6-digit prompt to a 4-digit sort model (7 learned positions) was answered with 2 digits without a word."""
    result = cli("sample", tiny_run, "--prompt", "314159")
    assert result.code == 0 and len(result.out.split(" -> ")[1].strip()) == 2
    assert "note: the answer is cut to 2 of its 6 tokens: the model reads 7 positions" in result.err


def test_under_torchrun_another_ranks_error_names_its_rank_and_its_warnings_are_left_to_rank_0(
    cli, monkeypatch, capsys
):
    """Each rank printed every error and warning: N copies of one line on N GPUs. An error may be a rank's own (a
    GPU that rank lacks), so it is kept and named; a warning is the same on every rank."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert_one_line_error(cli("run", "--task", "sort", "--set", "n_layr=1"), "[rank 1] ")
    _show_warning("a configuration note", UserWarning, "f.py", 1)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "0")
    _show_warning("a configuration note", UserWarning, "f.py", 1)
    assert capsys.readouterr().err == "gpt-train: warning: a configuration note\n"
