"""Parity with transformers' GPT-2, offline: random GPT2LMHeadModels saved by transformers run in gpt-core
with the same logits and greedy tokens (with and without the KV cache), a trained sort model exported by
`gpt-train export` answers 1,000 held-out prompts in transformers as in gpt-core, and ours -> transformers
-> ours is bit-identical.

transformers is a test-only dependency: these tests skip where it is not installed (the plain gpt-train
session), and `nox -s gpt2` installs it and sets GPT_TRAIN_REQUIRE_TRANSFORMERS, which turns a missing
transformers (or tokenizers) into a failure instead of a skip.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest
import torch

from gpt_core import generate
from gpt_train.cli import main
from gpt_train.config import RunConfig
from gpt_train.hf import load_model, read_weights
from gpt_train.loading import load_run
from gpt_train.trainer import initial_model


def required(module: str):
    """The module, or a skip; under `nox -s gpt2` (GPT_TRAIN_REQUIRE_TRANSFORMERS set) an ImportError."""
    if os.environ.get("GPT_TRAIN_REQUIRE_TRANSFORMERS"):
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is a test-only dependency (nox -s gpt2)")


transformers = required("transformers")
tokenizers = required("tokenizers")

HELD_OUT_PROMPTS = 1000


def gpt_train(*args: object) -> None:
    """The CLI in-process; any exit but 0 fails the test with its status."""
    try:
        main([str(a) for a in args])
    except SystemExit as exit_:
        assert exit_.code in (0, None), f"gpt-train {' '.join(map(str, args))} exited {exit_.code}"


def random_hf_model(vocab_size: int, dtype: torch.dtype, seed: int = 0):
    """A small GPT2LMHeadModel whose every parameter is random (LayerNorm and biases too, which
    transformers initialises to 1 and 0 and which would hide a mix-up), in eval mode."""
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        vocab_size=vocab_size, n_positions=32, n_embd=48, n_layer=3, n_head=4, bos_token_id=None, eos_token_id=None
    )
    model = transformers.GPT2LMHeadModel(config).to(dtype).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    return model


def save(model, directory: Path) -> Path:
    model.save_pretrained(directory)
    assert (directory / "model.safetensors").is_file() and not (directory / "pytorch_model.bin").exists()
    return directory


def hf_greedy(model, prompts: torch.Tensor, n_new: int) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(
            prompts,
            attention_mask=torch.ones_like(prompts),
            max_new_tokens=n_new,
            min_new_tokens=n_new,
            do_sample=False,
            pad_token_id=0,
        )


# random models saved by transformers ----------------------------------------------------------------
@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float64, 1e-10), (torch.float32, 1e-4)])
def test_logits_equal_transformers(tmp_path, dtype, tolerance):
    hf = random_hf_model(101, dtype)
    ours = load_model(save(hf, tmp_path / "hf"), dtype=dtype)
    tokens = torch.randint(0, 101, (4, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected, got = hf(tokens).logits, ours(tokens).logits
    assert got.dtype == dtype
    difference = (got - expected).abs().max().item()
    assert difference <= tolerance, difference
    assert expected.abs().max().item() > 1.0  # logits of some size: the bound says something


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_generation_equals_transformers(tmp_path, dtype, use_cache):
    hf = random_hf_model(101, dtype, seed=2)
    ours = load_model(save(hf, tmp_path / "hf"), dtype=dtype)
    prompts = torch.randint(0, 101, (8, 5), generator=torch.Generator().manual_seed(3))
    expected = hf_greedy(hf, prompts, 27)  # to the last of the 32 positions
    got = generate(ours, prompts, 27, temperature=0.0, use_cache=use_cache)
    assert torch.equal(got, expected)
    assert len(set(got[:, 5:].flatten().tolist())) > 5  # not one token repeated: the comparison has teeth


# a trained sort model, exported ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def sort_run(tmp_path_factory) -> Path:
    """sort of 5 digits, small. sort's defaults are GPT-2's architecture already (learned positions,
    LayerNorm, biases, tied head), so only its size is set."""
    run_dir = tmp_path_factory.mktemp("sort") / "run"
    gpt_train(
        "run", "--task", "sort", "--device", "cpu", "--quiet", "--steps", "300", "--set", "length=5",
        "--set", "eval_every=300", "--set", "final_eval_limit=1000", "--out", run_dir,
    )  # fmt: skip
    return run_dir


def test_exported_sort_model_answers_held_out_prompts_in_transformers_as_in_gpt_core(sort_run, tmp_path):
    out = tmp_path / "hf"
    gpt_train("export", sort_run, out)
    run = load_run(sort_run, torch.device("cpu"))
    ours, task = run.model, run.task
    hf = transformers.GPT2LMHeadModel.from_pretrained(out).eval()
    ids = task.split.evaluation_ids("heldout", HELD_OUT_PROMPTS)
    sequences = task.sequences(ids)
    assert len(sequences) == HELD_OUT_PROMPTS
    prompts, n = sequences[:, : task.prompt_length], task.answer_length
    answers_ours = generate(ours, prompts, n, temperature=0.0)[:, -n:]
    answers_hf = hf_greedy(hf, prompts, n)[:, -n:]
    assert torch.equal(answers_hf, answers_ours)
    correct = (answers_ours == sequences[:, -n:]).all(dim=1).float().mean().item()
    print(f"exact match of the exported sort model on {HELD_OUT_PROMPTS} held-out prompts: {correct:.3f}")
    assert correct > 0.5, correct  # a trained model: the answers are sorts, not noise


def test_round_trip_ours_to_transformers_to_ours_is_bit_identical(sort_run, tmp_path):
    gpt_train("export", sort_run, tmp_path / "ours")
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "ours")
    back = load_model(save(hf, tmp_path / "theirs"))
    trained = load_run(sort_run, torch.device("cpu")).model
    params = dict(back.named_parameters())
    for name, param in trained.named_parameters():
        assert torch.equal(param, params[name]), name


def test_untied_head_exports_and_runs_in_transformers(tmp_path):
    run_dir = tmp_path / "run"
    gpt_train(
        "run", "--task", "sort", "--device", "cpu", "--quiet", "--steps", "2", "--set", "length=4",
        "--set", "tie_weights=false", "--set", "eval_every=2", "--set", "final_eval_limit=8", "--out", run_dir,
    )  # fmt: skip
    gpt_train("export", run_dir, tmp_path / "hf")
    ours = load_run(run_dir, torch.device("cpu")).model
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    assert not torch.equal(hf.lm_head.weight, hf.transformer.wte.weight)
    tokens = torch.randint(0, ours.config.vocab_size, (4, ours.config.block_size))
    with torch.no_grad():
        difference = (hf(tokens).logits - ours(tokens).logits).abs().max().item()
    assert difference <= 1e-4, difference


def test_exported_bpe_text_run_loads_with_its_tokenizer_in_transformers(tmp_path, capsys):
    """A BPE text run's export carries tokenizer.json and tokenizer_config.json: AutoTokenizer reads them,
    and transformers' greedy text is `gpt-train sample`'s."""
    (tmp_path / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    run_dir = tmp_path / "run"
    gpt_train(
        "run", "--task", "text", "--data", tmp_path / "corpus.txt", "--device", "cpu", "--quiet", "--steps", "4",
        "--set", "tokenizer=bpe", "--set", "vocab_size=300", "--set", "block_size=16", "--set", "chunk_size=128",
        "--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_head=2", "--set", "eval_every=2",
        "--set", "eval_limit=4", "--out", run_dir,
    )  # fmt: skip
    gpt_train("export", run_dir, tmp_path / "hf")
    capsys.readouterr()
    gpt_train("sample", run_dir, "--prompt", "the night", "--max-new-tokens", "10", "--device", "cpu")
    printed = capsys.readouterr().out
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    ids = tokenizer("the night", return_tensors="pt").input_ids
    new = hf_greedy(hf, ids, 10)[0, ids.shape[1] :]
    assert printed == f"the night -> {tokenizer.decode(new)}\n"


# a GPT-2-style tokenizer: sample --hf and --init-from --------------------------------------------------
CORPUS = "the night is young and so are we, café naïve 🎉\n" * 400


def gpt2_style_tokenizer(path: Path) -> tokenizers.Tokenizer:
    """A tiny byte-level BPE as GPT-2's: the byte alphabet, merges, and <|endoftext|> as the last id."""
    level = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = level
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=300, initial_alphabet=level.alphabet(), show_progress=False)
    tokenizer.train_from_iterator([CORPUS], trainer)
    tokenizer.add_special_tokens(["<|endoftext|>"])
    tokenizer.save(str(path))
    return tokenizer


@pytest.fixture
def gpt2_directory(tmp_path) -> tuple[Path, tokenizers.Tokenizer]:
    """What a download of `gpt2` looks like, in small: config.json and model.safetensors from transformers,
    and tokenizer.json."""
    directory = tmp_path / "gpt2"
    directory.mkdir()
    tokenizer = gpt2_style_tokenizer(directory / "tokenizer.json")
    save(random_hf_model(tokenizer.get_vocab_size(), torch.float32, seed=4), directory)
    return directory, tokenizer


def test_sample_hf_gives_transformers_greedy_text(gpt2_directory, capsys):
    directory, tokenizer = gpt2_directory
    prompt = "the night is"
    gpt_train("sample", "--hf", directory, "--prompt", prompt, "--max-new-tokens", "20", "--device", "cpu")
    printed = capsys.readouterr().out
    hf = transformers.GPT2LMHeadModel.from_pretrained(directory).eval()
    ids = torch.tensor([tokenizer.encode(prompt).ids])
    new = hf_greedy(hf, ids, 20)[0, ids.shape[1] :].tolist()
    assert printed == f"{prompt} -> {tokenizer.decode(new, skip_special_tokens=False)}\n"


def test_init_from_a_transformers_directory_fine_tunes_from_its_weights(gpt2_directory, tmp_path):
    directory, tokenizer = gpt2_directory
    (tmp_path / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    run_dir = tmp_path / "tuned"
    gpt_train(
        "run", "--task", "text", "--data", tmp_path / "corpus.txt", "--init-from", directory, "--device", "cpu",
        "--quiet", "--steps", "2", "--set", "block_size=16", "--set", "chunk_size=128", "--set", "eval_every=1",
        "--set", "eval_limit=4", "--out", run_dir,
    )  # fmt: skip
    config = RunConfig.load(run_dir)
    start = dict(initial_model(config).named_parameters())
    weights = read_weights(directory, load_model(directory).config)
    assert all(torch.equal(start[name], value) for name, value in weights.items())
    assert config.task_params["vocab_size"] == tokenizer.get_vocab_size()  # the directory's, <|endoftext|> too
