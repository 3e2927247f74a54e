"""Every tensor the analyses, the pictures and the learn grader make names its device: the device of the
tensors it is combined with, or the CPU for what they gather on the CPU.

A factory that names none (`torch.arange(n)`) lands on the default device: the CPU, where the tests run, so
such a call passes them and then fails on CUDA, where it meets the model's tensors. Here the default device is
the meta device while the model and the task sit on the CPU, so such a call fails on the CPU too (or gives
numbers other than the CPU's, which the tests compare).
"""

from __future__ import annotations

import functools
import json
from importlib.resources import files
from pathlib import Path

import pytest
import torch

import gpt_viz
from gpt_core import GPT
from gpt_tasks import get_task
from gpt_train.lab import ablate_each_head, head_reads, logit_lens, patch
from gpt_train.lab.explain import explain_prompt
from gpt_train.lab.findings import head_findings, logit_lens_findings, patching_findings, reads_findings
from gpt_train.learn.cases import cases_for, run_case, try_case
from gpt_train.learn.grader import SEED, check_file, diagnose
from gpt_train.learn.steps import BY_NAME, STEPS
from gpt_train.learn.zoo import OWN
from gpt_train.pictures import save_attention
from gpt_viz import RunLayout

CPU = torch.device("cpu")
EXAMPLES = 32
SOLUTIONS = Path(str(files("gpt_train.learn.solutions")))


@pytest.fixture(scope="module")
def sort_model() -> tuple:
    """4-digit sort and an untrained two-layer model for it, on the CPU, its matrices scaled tenfold so that its
    answer depends on the prompt enough to patch (0.04 in logit difference; patching refuses under 0.01)."""
    task = get_task("sort", length=4)
    torch.manual_seed(0)
    model = GPT(task.model_config(n_layer=2, n_head=2, n_embd=16))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(10 if parameter.dim() == 2 else 1)
    return task, model


def every_analysis(task, model, folder: Path) -> str:
    """What `gpt-train inspect ... report` computes (each analysis's record and the findings in words), the
    explorer's view of one prompt, and the run's saved attention, as one JSON text."""
    records = {
        "heads": ablate_each_head(task, model, CPU, EXAMPLES).to_json(),
        "logit_lens": logit_lens(task, model, CPU, EXAMPLES).to_json(),
        "patching": patch(task, model, CPU, "resid_pre", 8).to_json(),
        "reads": head_reads(task, model, CPU, EXAMPLES).to_json(),
    }
    findings = head_findings(records["heads"]) + logit_lens_findings(records["logit_lens"])
    findings += patching_findings(records["patching"]) + reads_findings(records["reads"])
    prompt = explain_prompt(task, model, CPU, "3142").to_json()
    folder.mkdir()
    save_attention(task, model, CPU, RunLayout(folder))
    attention = gpt_viz.load_attention(folder).weights.tolist()
    return json.dumps(records | {"findings": findings, "prompt": prompt, "attention": attention})


def test_every_analysis_and_the_saved_attention_make_no_tensor_without_naming_its_device(sort_model, tmp_path):
    task, model = sort_model
    with torch.device("meta"):
        on_meta = every_analysis(task, model, tmp_path / "meta")
    assert on_meta == every_analysis(task, model, tmp_path / "cpu")


@pytest.mark.parametrize("step", [step for step in STEPS if step.slot is not None], ids=lambda step: step.name)
def test_the_learn_grader_makes_no_tensor_without_naming_its_device(step, tmp_path):
    answer = tmp_path / step.file_name  # the solution as a learner's own file (the shipped one is refused)
    answer.write_bytes((SOLUTIONS / step.file_name).read_bytes())
    with torch.device("meta"):
        verdict = check_file(step, answer)
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("step", [name for name in OWN if BY_NAME[name].kind == "kernel"])
def test_every_classic_mistake_is_named_whatever_the_default_device(step):
    for mistake in OWN[step]:
        kernel = functools.partial(mistake.kernels[0], tile=64) if mistake.tiled else mistake.kernels[0]
        with torch.device("meta"):
            cases = cases_for(BY_NAME[step].function, SEED)
            outcomes = [try_case(kernel, case, SEED) for case in cases]
            expected = [run_case(case.reference, case, SEED) for case in cases]
            named = diagnose(BY_NAME[step], outcomes, expected)
        assert named is not None and named.key == mistake.key, mistake.key
