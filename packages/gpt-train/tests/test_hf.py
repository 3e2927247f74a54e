"""GPT-2 directories without transformers: `export` writes one that gpt-train reads back
bit-identically, `sample --hf` samples from it with its tokenizer.json as the run itself does, `run
--init-from` starts from its weights and tokenizer, and every directory that is not a GPT-2 gpt-core can
load is one line. (Parity with transformers itself: test_gpt2_parity.py, in `nox -s gpt2`.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from train_helpers import TINY, assert_one_line_error

from gpt_train.config import RunConfig
from gpt_train.hf import load_model
from gpt_train.loading import load_run
from gpt_train.trainer import initial_model
from gpt_viz import RunLayout

ONE_STEP = ("--steps", "1", "--set", "eval_every=1", "--set", "eval_limit=8", "--set", "final_eval_limit=8")


def export(cli, run_dir: Path, out: Path) -> Path:
    result = cli("export", run_dir, out)
    assert result.code == 0, result.err
    assert ("no tokenizer exported" in result.out) == (not (out / "tokenizer.json").exists())  # said iff so
    return out


@pytest.fixture
def exported(cli, tiny_run, tmp_path) -> Path:
    return export(cli, tiny_run, tmp_path / "hf")


def test_export_writes_config_and_safetensors_that_load_back_bit_identical(cli, tiny_run, exported):
    config = json.loads((exported / "config.json").read_text())
    assert (config["model_type"], config["architectures"], config["activation_function"]) == (
        "gpt2", ["GPT2LMHeadModel"], "gelu_new",
    )  # fmt: skip
    assert config["n_ctx"] == config["n_positions"]  # the name llama.cpp's converter reads
    assert sorted(p.name for p in exported.iterdir()) == ["config.json", "model.safetensors"]  # no tokenizer for sort
    trained = load_run(tiny_run, torch.device("cpu")).model
    loaded = load_model(exported)
    assert loaded.config == trained.config
    for name, param in trained.named_parameters():
        assert torch.equal(param, dict(loaded.named_parameters())[name]), name


def test_export_without_a_tokenizer_says_to_sample_the_run_itself(cli, tiny_run, tmp_path):
    result = cli("export", tiny_run, tmp_path / "hf")
    assert result.code == 0, result.err
    last = result.out.strip().splitlines()[-1]
    assert last == f"no tokenizer exported (not a BPE text run): sample with `gpt-train sample {tiny_run}`"


WRONG_ATTENTION = "attention=kernel_examples:scale_over_d"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (("--set", "pos=rope"), "pos=rope"),
        (("--set", "layernorm=false"), "layernorm=False"),
        (("--set", "bias=false"), "bias=False"),
        (("--kernel", WRONG_ATTENTION, "--unverified"), f"unverified kernels ({WRONG_ATTENTION})"),
    ],
)
def test_export_refuses_a_run_that_is_no_gpt2(cli, tmp_path, options, named):
    """Another architecture, or logits from an unverified kernel (a verified one computes gpt-core's own to 1e-12)."""
    run_dir = tmp_path / "run"
    assert cli(*TINY, *ONE_STEP, *options, "--out", run_dir).code == 0
    result = cli("export", run_dir, tmp_path / "out")
    assert_one_line_error(result, "cannot export as GPT-2", named)
    assert not (tmp_path / "out").exists()


def test_export_takes_a_run_whose_unverified_kernel_only_samples(cli, tmp_path):
    """sampling_softmax is no part of the logits: the weights are GPT-2's."""
    run_dir = tmp_path / "run"
    choice = "sampling_softmax=kernel_examples:hotter_sampling_softmax"
    assert cli(*TINY, *ONE_STEP, "--kernel", choice, "--unverified", "--out", run_dir).code == 0
    result = cli("export", run_dir, tmp_path / "out")
    assert result.code == 0, result.err


@pytest.mark.parametrize(
    ("final", "said"),
    [
        ("deleted", "the run is unfinished)"),
        ("a shorter run's", "the run is unfinished (its final.json is of step 20))"),
        ("damaged", "the run is unfinished, or its final.json is damaged)"),  # it may well have finished
    ],
)
def test_export_of_an_unfinished_run_names_the_step_it_writes(cli, tiny_run, tmp_path, final, said):
    path = tiny_run / RunLayout.FINAL
    if final == "deleted":
        path.unlink()
    elif final == "damaged":
        path.write_text("{bad")
    else:  # the run was resumed with more steps and stopped: final.json is the shorter run's
        path.write_text(json.dumps(json.loads(path.read_text()) | {"step": 20}))
    result = cli("export", tiny_run, tmp_path / "hf")
    assert result.code == 0, result.err
    assert f"(the weights of step 30: {said}" in result.out.splitlines()[0]


def test_export_into_a_non_empty_directory_is_refused_and_touches_nothing(cli, tiny_run, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert_one_line_error(cli("export", tiny_run, out), "not an empty directory")
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"


def test_export_under_a_file_or_to_a_dangling_link_names_what_is_in_the_way(cli, tiny_run, tmp_path):
    (tmp_path / "file").write_text("kept")
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    result = cli("export", tiny_run, tmp_path / "file" / "sub")
    assert_one_line_error(result, f"{tmp_path / 'file'} is a file, not a directory")
    for out in (tmp_path / "link", tmp_path / "link" / "sub"):
        result = cli("export", tiny_run, out)
        assert_one_line_error(result, f"{tmp_path / 'link'} is a link to {tmp_path / 'nowhere'}, which does not exist")
    assert (tmp_path / "file").read_text() == "kept" and not (tmp_path / "nowhere").exists()


def test_export_into_an_empty_directory_writes_into_that_directory_itself(cli, tiny_run, tmp_path, monkeypatch):
    """`.`, a link to an empty folder, a folder with its own permissions: each is written into, never replaced."""
    here, target = tmp_path / "here", tmp_path / "target"
    here.mkdir()
    target.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(target)
    monkeypatch.chdir(here)
    export(cli, tiny_run, Path("."))
    export(cli, tiny_run, tmp_path / "link")
    for folder in (here, target):
        assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    assert (tmp_path / "link").is_symlink() and target.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("into", ["a new folder", "an empty folder"])
def test_an_export_interrupted_after_its_config_leaves_nothing_behind(cli, tiny_run, tmp_path, monkeypatch, into):
    from gpt_train import hf

    write_json = hf.write_json_atomically

    def interrupted(path, data):  # Ctrl-C (or SIGTERM) right after config.json is written
        write_json(path, data)
        raise KeyboardInterrupt

    out = tmp_path / "parent" / "hf"
    if into == "an empty folder":
        out.mkdir(parents=True)
    monkeypatch.setattr(hf, "write_json_atomically", interrupted)
    result = cli("export", tiny_run, out)
    assert (result.code, result.err.strip()) == (130, "gpt-train: aborted")
    assert list(out.iterdir()) == [] if into == "an empty folder" else not (tmp_path / "parent").exists()
    monkeypatch.undo()
    export(cli, tiny_run, out)  # not refused as "not an empty directory"


# sample --hf and --init-from on a BPE text model ------------------------------------------------------
@pytest.fixture
def bpe_export(cli, tmp_path) -> tuple[Path, Path]:
    """A trained BPE text run and its export (config.json, model.safetensors, tokenizer.json)."""
    pytest.importorskip("tokenizers", reason="the bpe extra (pip install 'gpt-tasks[bpe]') is not installed")
    from test_text_runs import bpe_run

    run_dir = bpe_run(cli, tmp_path)
    return run_dir, export(cli, run_dir, tmp_path / "hf")


def test_sample_hf_gives_what_the_run_itself_gives(cli, bpe_export):
    run_dir, out = bpe_export
    assert {"tokenizer.json", "tokenizer_config.json"} <= {p.name for p in out.iterdir()}
    args = ("--prompt", "the night", "--max-new-tokens", "12", "--device", "cpu")
    from_run, from_hf = cli("sample", run_dir, *args), cli("sample", "--hf", out, *args)
    assert from_hf.code == 0, from_hf.err
    assert from_hf.out == from_run.out and from_hf.out.startswith("the night -> ")
    cached = cli("sample", "--hf", out, *args, "--no-cache")
    assert cached.out == from_hf.out


def test_a_prompt_that_is_not_utf8_is_one_line_from_a_bpe_run_and_from_its_export(cli, bpe_export):
    """A shell prompt such as $'the \\xff' reaches Python as a lone surrogate, which BPE refuses by name."""
    run_dir, out = bpe_export
    prompt = b"the \xff".decode("utf-8", errors="surrogateescape")
    for source in ((run_dir,), ("--hf", out)):
        result = cli("sample", *source, "--prompt", prompt, "--device", "cpu")
        assert_one_line_error(result, "the text is not valid UTF-8", "surrogates not allowed")


def test_init_from_starts_from_the_directorys_weights_and_tokenizer(cli, bpe_export, tmp_path):
    source_run, out = bpe_export
    corpus = tmp_path / "corpus.txt"  # bpe_run's corpus
    run_dir = tmp_path / "tuned"
    result = cli(
        "run", "--task", "text", "--data", corpus, "--init-from", out, "--device", "cpu", "--quiet", "--steps", "2",
        "--set", "block_size=8", "--set", "chunk_size=128", "--set", "dropout=0.1", "--set", "eval_every=1",
        "--set", "eval_limit=4", "--out", run_dir,
    )  # fmt: skip
    assert result.code == 0, result.err
    config = RunConfig.load(run_dir)
    assert config.init_from == str(out.absolute())
    assert (config.task_params["tokenizer"], config.task_params["vocab_size"]) == ("bpe", 300)
    assert RunLayout(run_dir).task_file("tokenizer_file").read_bytes() == (out / "tokenizer.json").read_bytes()
    # The model keeps the source's 16 positions while training on windows of 8, and the dropout asked for.
    assert (config.model.block_size, config.model.max_positions, config.model.dropout) == (8, 16, 0.1)
    source = load_run(source_run, torch.device("cpu")).model
    start = initial_model(config)
    for name, param in source.named_parameters():
        assert torch.equal(param, dict(start.named_parameters())[name]), name


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (("--set", "n_layer=2"), "--init-from"),
        (("--set", "tokenizer=char"), "brings its own tokenizer.json; drop --set tokenizer"),
        (("--set", "block_size=17"), "block_size 17 is longer than the model's 16 positions"),
    ],
)
def test_init_from_settings_that_do_not_fit_the_model_are_one_line(cli, bpe_export, tmp_path, extra, named):
    _, out = bpe_export
    run_dir = tmp_path / "tuned"
    base = ("run", "--task", "text", "--data", tmp_path / "corpus.txt", "--init-from", out, "--quiet")
    settings = ("--set", "chunk_size=128", "--set", "block_size=8")
    assert_one_line_error(cli(*base, *settings, *extra, "--out", run_dir), named)
    assert not run_dir.exists()


def test_init_from_a_model_of_another_vocabulary_is_one_line(cli, bpe_export, tmp_path):
    _, out = bpe_export
    result = cli("run", "--task", "sort", "--set", "length=4", "--init-from", out, "--out", tmp_path / "sort")
    assert_one_line_error(result, "the task has 10 tokens, but the model in", "has 300")


def test_init_from_an_exported_sort_model_continues_training_it(cli, tiny_run, exported, tmp_path):
    """A task with its own vocabulary takes a model of that vocabulary: the run's own export, continued."""
    run_dir = tmp_path / "more"
    result = cli(
        "run", "--task", "sort", "--quiet", "--set", "length=4", *ONE_STEP, "--init-from", exported, "--out", run_dir
    )
    assert result.code == 0, result.err
    source = load_run(tiny_run, torch.device("cpu")).model
    start = dict(initial_model(RunConfig.load(run_dir)).named_parameters())
    assert all(torch.equal(param, start[name]) for name, param in source.named_parameters())


def test_force_over_a_run_keeps_it_when_the_init_from_weights_are_refused(cli, tiny_run, exported, tmp_path):
    """The weights were read only once the run's directory had been cleared: --force had already removed the run."""
    tensors = tensors_of(exported)
    tensors["transformer.ln_f.weight"][0] = float("nan")
    save_file(tensors, exported / "model.safetensors")
    before = sorted(path.name for path in tiny_run.iterdir())
    sort = ("run", "--task", "sort", "--set", "length=4", *ONE_STEP, "--init-from", exported, "--force")
    assert_one_line_error(cli(*sort, "--out", tiny_run), "'transformer.ln_f.weight' holds values that are not finite")
    assert sorted(path.name for path in tiny_run.iterdir()) == before and RunLayout(tiny_run).final.exists()


def test_init_from_a_directory_that_is_not_there_is_one_line(cli, tmp_path):
    base = ("run", "--task", "text", "--data", tmp_path / "corpus.txt", "--init-from", tmp_path / "nowhere")
    assert_one_line_error(cli(*base, "--out", tmp_path / "run"), "nowhere is not a directory")


def test_resume_refuses_init_from(cli, tiny_run, exported):
    assert_one_line_error(cli("run", "--resume", tiny_run, "--init-from", exported), "drop --init-from")


# directories that are not a GPT-2 gpt-core loads ----------------------------------------------------
def edit_config(directory: Path, **changes) -> None:
    path = directory / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


def sample_hf(cli, directory: Path):
    return cli("sample", "--hf", directory, "--prompt", "12", "--device", "cpu")


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (
            lambda d: edit_config(d, model_type="llama"),
            "config.json: not a GPT-2 gpt-core can compute: model_type is 'llama'",
        ),
        (lambda d: edit_config(d, activation_function="relu"), "activation_function is 'relu'"),
        (lambda d: (d / "config.json").unlink(), "has no config.json"),
        (lambda d: (d / "config.json").write_text("{not json"), "cannot read"),
        (lambda d: (d / "model.safetensors").unlink(), "has no model.safetensors"),
        (lambda d: (d / "model.safetensors").write_bytes(b"\x00" * 64), "not a readable safetensors file"),
        (lambda d: edit_config(d, n_embd=64), "config.json's vocab_size x n_embd is (10, 64)"),
        (lambda d: edit_config(d, n_layer=2), "config.json has n_layer=2, model.safetensors holds 1 layers"),
        (lambda d: (d / "tokenizer.json").unlink(missing_ok=True), "has no tokenizer.json"),
    ],
)
def test_a_directory_that_is_not_a_loadable_gpt2_is_one_line(cli, exported, damage, named):
    damage(exported)
    assert_one_line_error(sample_hf(cli, exported), named)


def test_a_pickle_checkpoint_is_refused_unread(cli, exported):
    (exported / "model.safetensors").rename(exported / "pytorch_model.bin")
    assert_one_line_error(sample_hf(cli, exported), "holds only pytorch_model.bin, a pickle checkpoint")


def test_a_sharded_checkpoint_and_a_missing_directory_are_one_line(cli, exported, tmp_path):
    assert_one_line_error(sample_hf(cli, tmp_path / "nowhere"), "is not a directory")
    shutil.move(exported / "model.safetensors", exported / "model-00001-of-00001.safetensors")
    (exported / "model.safetensors.index.json").write_text("{}")
    assert_one_line_error(sample_hf(cli, exported), "sharded checkpoint")


def test_a_tensor_gpt2_does_not_have_is_named(cli, exported):
    from safetensors.torch import load_file

    tensors = load_file(exported / "model.safetensors") | {"score.weight": torch.zeros(2, 32)}
    save_file(tensors, exported / "model.safetensors")
    assert_one_line_error(sample_hf(cli, exported), "'score.weight' is not part of a GPT-2 language model")


def test_sample_takes_a_run_or_hf_and_hf_needs_a_prompt(cli, tiny_run, exported):
    assert_one_line_error(cli("sample"), "RUN_DIR or --hf DIR")
    assert_one_line_error(cli("sample", tiny_run, "--hf", exported), "RUN_DIR or --hf DIR")
    assert_one_line_error(cli("sample", "--hf", exported), "sample --hf needs --prompt")


def test_export_has_help_with_an_example(cli):
    result = cli("export", "--help")
    assert result.code == 0 and "gpt-train export sort exported/sort" in result.out


# hostile directories: shapes no file holds, weights that are no GPT-2's, settings of the wrong type ------------
def tensors_of(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(directory / "model.safetensors")


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"n_embd": 10**9}, "vocab_size x n_embd is (10, 1000000000), but model.safetensors holds wte.weight"),
        ({"n_embd": 10**9, "vocab_size": 7}, "vocab_size x n_embd is (7, 1000000000)"),
        ({"n_layer": 10**6}, "config.json has n_layer=1000000, model.safetensors holds 1 layers"),
        ({"n_positions": 10**12}, "n_positions x n_embd is (1000000000000, 32)"),
    ],
)
def test_a_config_larger_than_its_weights_is_refused_before_anything_is_built(
    cli, exported, tmp_path, monkeypatch, changes, named
):
    import gpt_core.gpt2

    def never(config):
        raise AssertionError("a model was built")

    edit_config(exported, **changes)
    monkeypatch.setattr(gpt_core.gpt2, "expected_shapes", never)
    assert_one_line_error(sample_hf(cli, exported), named)
    result = cli("run", "--task", "sort", "--init-from", exported, "--steps", "1", "--out", tmp_path / "r")
    assert_one_line_error(result, named)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("convert", "dtype"),
    [
        (lambda t: t > 0, "BOOL"),
        (lambda t: t.to(torch.int64), "I64"),
        (lambda t: t.to(torch.complex64), "C64"),
        (lambda t: t.to(torch.float8_e4m3fn), "F8_E4M3"),
    ],
)
def test_weights_of_a_dtype_gpt2_never_has_are_refused_by_name(cli, exported, convert, dtype):
    tensors = tensors_of(exported)
    tensors["transformer.h.0.mlp.c_fc.weight"] = convert(tensors["transformer.h.0.mlp.c_fc.weight"])
    save_file(tensors, exported / "model.safetensors")
    assert_one_line_error(sample_hf(cli, exported), f"'transformer.h.0.mlp.c_fc.weight' is {dtype}")


def test_reading_the_weights_alone_refuses_a_tensor_that_is_not_float(exported):
    """A resumed --init-from run reads the weights without the config's header check first."""
    from gpt_train.hf import HFError, read_config, read_weights

    config = read_config(exported)
    tensors = tensors_of(exported)
    tensors["transformer.h.0.mlp.c_fc.weight"] = tensors["transformer.h.0.mlp.c_fc.weight"].to(torch.int64)
    save_file(tensors, exported / "model.safetensors")
    with pytest.raises(HFError, match="'transformer.h.0.mlp.c_fc.weight' is torch.int64; GPT-2 weights are floats"):
        read_weights(exported, config)


def test_every_weight_dtype_gpt2_is_stored_in_loads(exported):
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        save_file({k: v.to(dtype) for k, v in tensors_of(exported).items()}, exported / "model.safetensors")
        assert load_model(exported).lm_head.weight.dtype == torch.float32


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_weights_that_are_not_finite_are_refused_by_name(cli, exported, bad):
    tensors = tensors_of(exported)
    tensors["transformer.ln_f.weight"][3] = bad
    save_file(tensors, exported / "model.safetensors")
    assert_one_line_error(sample_hf(cli, exported), "'transformer.ln_f.weight' holds values that are not finite")


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings must be true or false, got 'yes'"),
        ({"tie_word_embeddings": 1}, "tie_word_embeddings must be true or false, got 1"),
        ({"scale_attn_weights": "true"}, "scale_attn_weights must be true or false"),
        ({"add_cross_attention": 0}, "add_cross_attention must be true or false"),
        ({"resid_pdrop": "0.1"}, "resid_pdrop must be a number, got '0.1'"),
        ({"layer_norm_epsilon": True}, "layer_norm_epsilon must be a number"),
    ],
)
def test_config_settings_of_the_wrong_type_are_one_line(cli, exported, changes, named):
    edit_config(exported, **changes)
    assert_one_line_error(sample_hf(cli, exported), named)


# exports that fail part-way ---------------------------------------------------------------------
def test_an_export_that_fails_part_way_leaves_nothing_and_can_be_run_again(cli, tiny_run, tmp_path, monkeypatch):
    import errno

    import gpt_train.hf

    def disk_full(tensors, path, metadata=None):
        Path(path).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    out = tmp_path / "exports" / "out"
    with monkeypatch.context() as patched:
        patched.setattr(gpt_train.hf, "save_file", disk_full)
        result = cli("export", tiny_run, out)
    assert_one_line_error(result, f"cannot export to {out} (No space left on device); nothing was left there")
    assert not out.parent.exists()  # the folder made for `out` removed as well
    export(cli, tiny_run, out)
    out.joinpath("config.json").unlink()
    out.joinpath("model.safetensors").unlink()  # an empty directory: the export is written into it
    with monkeypatch.context() as patched:
        patched.setattr(gpt_train.hf, "save_file", disk_full)
        assert_one_line_error(cli("export", tiny_run, out), "No space left on device")
    assert list(out.iterdir()) == []
    export(cli, tiny_run, out)


def test_an_export_needs_only_the_weights_not_the_runs_kernel_module(cli, tiny_run, tmp_path):
    config = json.loads((tiny_run / "config.json").read_text())
    config["kernels"] = {"layer_norm": "no_such_module_anywhere:layer_norm"}
    (tiny_run / "config.json").write_text(json.dumps(config))
    assert_one_line_error(cli("eval", tiny_run), "no_such_module_anywhere")
    export(cli, tiny_run, tmp_path / "hf")
    from gpt_train.checkpoint import load_checkpoint

    saved = load_checkpoint(RunLayout(tiny_run).checkpoint, "sort").model
    assert all(torch.equal(p, saved[name]) for name, p in load_model(tmp_path / "hf").named_parameters())


def test_a_failed_export_removes_the_parent_folders_it_made_and_only_those(cli, tiny_run, tmp_path, monkeypatch):
    """`nothing was left there` holds of the folders mkdir(parents=True) would have left too."""
    import errno

    import gpt_train.hf

    def disk_full(tensors, path, metadata=None):
        raise OSError(errno.ENOSPC, "No space left on device")

    (tmp_path / "kept").mkdir()
    out = tmp_path / "kept" / "made" / "also made" / "out"
    monkeypatch.setattr(gpt_train.hf, "save_file", disk_full)
    assert_one_line_error(cli("export", tiny_run, out), "(No space left on device); nothing was left there")
    assert (tmp_path / "kept").is_dir() and list((tmp_path / "kept").iterdir()) == []


def test_an_export_into_an_empty_folder_on_a_read_only_filesystem_is_one_line(cli, tiny_run, tmp_path, monkeypatch):
    """Removing a file that was never written says EROFS there, not ENOENT: no traceback, the first error named."""
    import errno

    import gpt_train.hf

    out = tmp_path / "mounted"
    out.mkdir()

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    real_unlink = Path.unlink

    def unlink(path, missing_ok=False):
        if path.parent == out:
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        real_unlink(path, missing_ok=missing_ok)

    monkeypatch.setattr(gpt_train.hf, "write_json_atomically", read_only)
    monkeypatch.setattr(Path, "unlink", unlink)
    result = cli("export", tiny_run, out)
    assert_one_line_error(result, f"cannot export to {out} (Read-only file system); nothing was left there")


# config.json and model.safetensors that say one thing twice ----------------------------------------------------
ALIASES = {"num_attention_heads": "n_head", "hidden_size": "n_embd", "num_hidden_layers": "n_layer"}


def test_a_config_giving_settings_by_transformers_other_names_loads_as_they_say(cli, tiny_run, exported):
    """transformers' GPT2Config reads num_attention_heads as n_head (and so on): so does gpt-train."""
    path = exported / "config.json"
    config = json.loads(path.read_text())
    for alias, name in ALIASES.items():
        config[alias] = config.pop(name)
    config["max_position_embeddings"] = config.pop("n_positions")
    path.write_text(json.dumps(config))
    assert load_model(exported).config == load_run(tiny_run, torch.device("cpu")).model.config  # 2 heads, not 12


def test_a_setting_given_under_both_names_with_different_values_is_one_line(cli, exported):
    edit_config(exported, num_attention_heads=4)
    assert_one_line_error(sample_hf(cli, exported), "n_head is 2 but num_attention_heads, its other name, is 4")


def test_a_tensor_stored_with_and_without_the_prefix_is_one_line_naming_both(cli, exported):
    """Whichever copy came last was read, its shape checked as the embedding's; neither is chosen now."""
    tensors = tensors_of(exported)
    save_file(tensors | {"wte.weight": torch.zeros(3, 3)}, exported / "model.safetensors")
    assert_one_line_error(
        sample_hf(cli, exported), "tensors 'transformer.wte.weight' and 'wte.weight' are one GPT-2 tensor, stored twice"
    )
    save_file(
        tensors | {"wte.weight": torch.randn_like(tensors["transformer.wte.weight"])}, exported / "model.safetensors"
    )
    assert_one_line_error(sample_hf(cli, exported), "'transformer.wte.weight' and 'wte.weight' are one GPT-2 tensor")


def test_a_tied_head_that_is_not_the_embedding_is_one_line(cli, exported):
    """A (3, 3) head was skipped unread; a head of other values was dropped for the embedding's."""
    assert json.loads((exported / "config.json").read_text())["tie_word_embeddings"] is True
    tensors = tensors_of(exported)
    save_file(tensors | {"lm_head.weight": torch.zeros(3, 3)}, exported / "model.safetensors")
    assert_one_line_error(sample_hf(cli, exported), "'lm_head.weight' has shape (3, 3); config.json's model needs")
    other = torch.randn_like(tensors["transformer.wte.weight"])
    save_file(tensors | {"lm_head.weight": other}, exported / "model.safetensors")
    assert_one_line_error(
        sample_hf(cli, exported),
        "'lm_head.weight' differs from 'transformer.wte.weight'",
        "set tie_word_embeddings to false",
    )
    save_file(tensors | {"lm_head.weight": tensors["transformer.wte.weight"].clone()}, exported / "model.safetensors")
    assert load_model(exported).config.tie_weights  # the embedding's own values: the tied model it says


DIFFERING_RATES = {"resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.0}


def test_dropout_rates_that_differ_do_not_stop_inference(exported):
    """`sample --hf` loads through load_model: a model in eval mode, where no dropout rate plays any part."""
    edit_config(exported, **DIFFERING_RATES)
    model = load_model(exported)
    assert not model.training and model.config.dropout == 0.0


def test_init_from_a_config_with_dropout_rates_that_differ_takes_the_one_set(cli, exported, tmp_path):
    edit_config(exported, **DIFFERING_RATES)
    sort = ("run", "--task", "sort", "--quiet", "--set", "length=4", *ONE_STEP, "--init-from", exported)
    assert_one_line_error(
        cli(*sort, "--out", tmp_path / "unset"),
        "gpt-core has one dropout rate; config.json has resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.0",
        "--set dropout=RATE",
    )
    assert not (tmp_path / "unset").exists()
    for rate in (0.0, 0.2):
        result = cli(*sort, "--set", f"dropout={rate}", "--out", tmp_path / f"set-{rate}")
        assert result.code == 0, result.err
        assert RunConfig.load(tmp_path / f"set-{rate}").model.dropout == rate
