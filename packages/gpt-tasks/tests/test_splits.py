"""Hash splits: the same on every process and machine, disjoint, of the nominal size, and respected
by training batches. Each example's side is recomputed here from its documented canonical bytes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from gpt_core import IGNORE_INDEX
from gpt_tasks import as_bytes, digits_of, get_task, is_heldout, splits, unit_hash

SMALL_CHUNKS = {"chunk_size": 32, "block_size": 8}  # as in conftest

DIGEST_SCRIPT = textwrap.dedent(
    """
    import hashlib, json, sys
    from gpt_tasks import get_task

    def digest(ids):
        return hashlib.sha256(ids.numpy().tobytes()).hexdigest()

    small = {"chunk_size": 32, "block_size": 8, "cache_dir": sys.argv[2]}  # a fresh cache: the split is recomputed
    out = {name: digest(get_task(name).split.ids("heldout")) for name in ("sort", "addition", "modadd")}
    out["shakespeare"] = digest(get_task("shakespeare", data=sys.argv[1], **small).chunks("heldout"))
    for tokenizer in ("char", "byte", "bpe"):
        out[tokenizer] = digest(get_task("text", data=sys.argv[1], tokenizer=tokenizer, **small).chunks("heldout"))
    print(json.dumps(out))
    """
)


def digest(ids: torch.Tensor) -> str:
    return hashlib.sha256(ids.numpy().tobytes()).hexdigest()


def test_unit_hash_is_pinned():
    assert unit_hash(b"\x01\x02", b"sort") == 0.06251066624361806
    assert unit_hash(b"\x01\x02", b"other") != unit_hash(b"\x01\x02", b"sort")


def test_splits_are_identical_across_processes_and_hash_seeds(
    corpus_file, sort_task, addition_task, modadd_task, shakespeare_task, tmp_path
):
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", DIGEST_SCRIPT, str(corpus_file), str(tmp_path / f"cache-{seed}")],
            env=os.environ | {"PYTHONHASHSEED": seed},
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed in ("1", "2")
    ]
    outputs = []
    for process in processes:
        stdout, _ = process.communicate(timeout=120)
        assert process.returncode == 0
        outputs.append(json.loads(stdout))
    here = {
        "sort": digest(sort_task.split.ids("heldout")),
        "addition": digest(addition_task.split.ids("heldout")),
        "modadd": digest(modadd_task.split.ids("heldout")),
        "shakespeare": digest(shakespeare_task.chunks("heldout")),
    }
    for tokenizer in ("char", "byte", "bpe"):
        task = get_task("text", data=str(corpus_file), tokenizer=tokenizer, **SMALL_CHUNKS)
        here[tokenizer] = digest(task.chunks("heldout"))
    assert outputs[0] == outputs[1] == here
    assert here["char"] == here["byte"] == here["bpe"]  # the held-out chunks do not depend on the tokenizer


@pytest.mark.parametrize("name", ["sort", "addition", "modadd"])
def test_train_and_heldout_partition_the_example_space(name, request):
    task = request.getfixturevalue(f"{name}_task")
    train, heldout = set(task.split.ids("train").tolist()), set(task.split.ids("heldout").tolist())
    assert not train & heldout
    assert len(train) + len(heldout) == task.split.size


def test_shakespeare_train_and_heldout_chunks_partition_the_text(shakespeare_task):
    train, heldout = set(shakespeare_task.chunks("train").tolist()), set(shakespeare_task.chunks("heldout").tolist())
    assert not train & heldout
    assert train | heldout == set(range(len(shakespeare_task.chunk_offsets)))


def test_sort_heldout_count_is_pinned(sort_task):
    assert sort_task.split.count("heldout") == 250_050  # of 10^6: 25.005%


@pytest.mark.parametrize(("name", "nominal"), [("sort", 0.25), ("addition", 0.1), ("modadd", 0.8)])
def test_heldout_fraction_is_within_a_point_of_nominal(name, nominal, request):
    task = request.getfixturevalue(f"{name}_task")
    assert abs(task.split.count("heldout") / task.split.size - nominal) < 0.01


def test_modadd_holds_out_one_minus_train_fraction_of_the_pairs(modadd_task):
    assert modadd_task.split.size == 113 * 113
    assert abs(modadd_task.split.count("train") / 12769 - 0.2) < 0.01


def test_shakespeare_heldout_fraction_of_chunks_is_within_a_point_of_nominal(shakespeare_task):
    assert len(shakespeare_task.chunk_offsets) == 6250
    assert abs(len(shakespeare_task.chunks("heldout")) / 6250 - 0.1) < 0.01


def test_sampled_split_draws_only_from_its_own_side():
    task = get_task("addition", digits=5)  # 10^10 pairs: sampled, never listed
    assert not task.split.enumerated
    generator = torch.Generator().manual_seed(0)
    for split, wanted in (("train", False), ("heldout", True)):
        ids = task.split.sample(split, 300, generator)
        a, b = (ids // 10**5).tolist(), (ids % 10**5).tolist()
        sides = {is_heldout(bytes(map(int, f"{x:05d}{y:05d}")), 0.1, b"addition") for x, y in zip(a, b, strict=True)}
        assert sides == {wanted}


@pytest.mark.parametrize(
    ("name", "params", "words"),
    [
        ("addition", {"digits": 1, "heldout_fraction": 0.001}, "of the 100 examples leaves none held out"),
        ("sort", {"length": 2, "vocab": 2, "heldout_fraction": 0.99}, "leaves none to train on"),
        ("sort", {"min_length": 1, "separator": True, "vocab": 2, "heldout_fraction": 0.9}, "at length 1, holding"),
        ("modadd", {"train_fraction": 1e-9}, "leaves none to train on"),
    ],
    ids=["no held-out pair", "no training run", "no training run of a shorter length", "no training pair"],
)
def test_a_listed_split_with_an_empty_side_is_refused_when_the_task_is_made(name, params, words):
    """Training then crashed in the first batch, or the final evaluation divided by zero after the whole run."""
    with pytest.raises(ValueError, match=words):
        get_task(name, **params)


def test_a_shorter_training_length_needs_no_held_out_example():
    """Only `length` is evaluated: min_length=1 at a held-out share of 0.05 was refused for length 1's empty side."""
    task = get_task("sort", min_length=1, separator=True, heldout_fraction=0.05)
    assert len(task.splits[1].ids("heldout")) == 0 and len(task.splits[1].ids("train")) == 10


@pytest.mark.parametrize(
    ("name", "params"),
    [("sort", {"length": 7, "heldout_fraction": 0.0001}), ("repeats", {"heldout_fraction": 0.999999})],
)
def test_a_sampled_split_too_lopsided_to_draw_from_is_refused(name, params):
    """Drawing by hash kept one candidate in a million: a two-step run spun for a quarter of an hour."""
    with pytest.raises(ValueError, match="hold out between 0.001 and 0.999"):
        get_task(name, **params)


def batches(task, n_batches: int = 4, size: int = 256):
    generator = torch.Generator().manual_seed(7)
    return [task.batch(size, generator) for _ in range(n_batches)]


def test_sort_training_batches_never_contain_a_heldout_example(sort_task):
    for batch in batches(sort_task):
        runs = batch.inputs[:, :6].tolist()  # one byte per symbol is the canonical encoding
        assert not any(is_heldout(bytes(run), 0.25, b"sort") for run in runs)


def test_addition_training_batches_never_contain_a_heldout_example(addition_task):
    for batch in batches(addition_task):
        for row in batch.inputs.tolist():
            operands = row[0:3] + row[4:7]  # a's digits, then b's (skipping "+")
            assert not is_heldout(bytes(operands), 0.1, b"addition")


def test_modadd_training_batches_never_contain_a_heldout_example(modadd_task):
    for batch in [*batches(modadd_task, size=500), modadd_task.batch(10**6, torch.Generator())]:
        for a, b, _ in batch.inputs.tolist():
            assert not is_heldout(a.to_bytes(2, "big") + b.to_bytes(2, "big"), 0.7, b"modadd")


def test_shakespeare_training_windows_lie_inside_training_chunks(shakespeare_task, corpus_file):
    text = corpus_file.read_text(encoding="utf-8")
    size = SMALL_CHUNKS["chunk_size"]
    for batch in batches(shakespeare_task, size=64):
        assert (batch.targets != IGNORE_INDEX).all()
        for inputs, targets in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
            window = shakespeare_task.decode(inputs + targets[-1:])
            start = text.find(window)  # random text: each window occurs once
            chunk = start // size
            assert start + len(window) <= (chunk + 1) * size  # wholly inside one chunk
            assert not is_heldout(text[chunk * size : (chunk + 1) * size].encode(), 0.1, b"shakespeare")


def test_the_sort_split_is_each_examples_own_hash_side_over_the_whole_space(sort_task):
    """The split as built (digests joined, read at once, cached) against is_heldout of every example, one by one."""
    every = torch.arange(sort_task.split.size)
    one_by_one = torch.tensor([is_heldout(data, 0.25, b"sort") for data in as_bytes(sort_task.digits(every))])
    assert torch.equal(sort_task.split.ids("heldout"), every[one_by_one])


def test_a_large_split_is_read_from_the_cache_the_second_time(monkeypatch, tmp_path):
    first = get_task("sort").split.ids("heldout")
    assert list((tmp_path / "xdg-cache" / "gpt-tasks" / "splits").glob("*.npy"))

    def no_hashing(*args):
        raise AssertionError("hashed again")

    monkeypatch.setattr(splits, "heldout_mask", no_hashing)
    assert torch.equal(get_task("sort").split.ids("heldout"), first)


def test_a_damaged_cache_is_computed_again_and_another_encoding_has_its_own_key(tmp_path):
    first = get_task("sort").split.ids("heldout")
    (cached,) = (tmp_path / "xdg-cache" / "gpt-tasks" / "splits").glob("*.npy")
    for damage in (b"damaged", b""):
        cached.write_bytes(damage)
        assert torch.equal(get_task("sort").split.ids("heldout"), first)
    np.save(cached, np.zeros(3, dtype=np.uint8))  # a readable file of the wrong length
    assert torch.equal(get_task("sort").split.ids("heldout"), first)
    other = splits.IndexedSplit(10**6, lambda ids: as_bytes(digits_of(ids + 1, 6, 10)), 0.25, b"sort")
    assert len(list(cached.parent.glob("*.npy"))) == 2 and not torch.equal(other.ids("heldout"), first)
