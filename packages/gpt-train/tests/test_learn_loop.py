"""The steps that train and sample (`training_step`, `generation`), and `learn train` on the learner's whole GPT:
each step graded beside gpt-train's own step and gpt-core's `generate`, each classic mistake named as a learner
writes it, the built-ins they replace refused; gpt-train's step as the check runs it is the step a run takes; and a
run of `learn train`'s trainer computes with the learner's GPT, says how it goes at each evaluation, and draws the
comparison picture."""

from __future__ import annotations

import copy

import pytest
import torch
from learn_transcript import answer, checked, solved, write

import gpt_core
from gpt_train.distributed import Rank
from gpt_train.learn.grader import check_file
from gpt_train.learn.steps import BY_NAME
from gpt_train.learn.training import LearnersGPT, compare_picture, learners_model_class, train_sort
from gpt_train.learn.training_step_check import gpt_train_step
from gpt_train.optimisation import make_optimizer
from gpt_train.runs import new_run
from gpt_train.trainer import Trainer

DECAY_RULE = 'return param.dim() >= 2 and not name.startswith("wpe.")'
CLIP_THEN_STEP = (
    "        clip_gradients(model, settings.grad_clip)  # before the update: the step takes the clipped gradients\n"
    "    adamw(model, state, lr, settings)\n"
)
WARM_UP = "settings.lr * (step + 1) / settings.warmup_steps"
TEMPERATURE = "    logits = logits / temperature  # before the softmax: T < 1 sharpens, T > 1 flattens\n"
DRAW = "return torch.multinomial(exp / exp.sum(dim=-1, keepdim=True), 1, generator=generator)"
KTH = "logits.topk(top_k, dim=-1).values[:, -1:]"
POSITIONS = "torch.arange(start, start + T, device=idx.device))  # (B, T, C)"

LEARNER_MISTAKES = {
    "decay on every parameter": ("training_step", [(DECAY_RULE, "return True")],
                                 "training_step: weight decay is applied to biases and norms"),
    "decay on every weight by its name": ("training_step", [(DECAY_RULE, 'return name.endswith("weight")')],
                                          "training_step: weight decay is applied to biases and norms"),
    "the position table decayed": ("training_step", [(DECAY_RULE, "return param.dim() >= 2")],
                                   "training_step: the position table wpe is decayed"),
    "clipping after the step": (
        "training_step", [(CLIP_THEN_STEP, "        pass\n    adamw(model, state, lr, settings)\n"
                                           "    if settings.grad_clip > 0:\n"
                                           "        clip_gradients(model, settings.grad_clip)\n")],
        "training_step: the gradients are clipped after the optimiser step (or not at all)"),
    "no clipping": ("training_step", [("clip_gradients(model, settings.grad_clip)  #", "pass  #")],
                    "training_step: the gradients are clipped after the optimiser step (or not at all)"),
    "the warm-up from 0": ("training_step", [(WARM_UP, "settings.lr * step / settings.warmup_steps")],
                           "training_step: the learning-rate schedule is off by one"),
    "the warm-up a step too long": ("training_step", [("if step < settings.warmup_steps:",
                                                       "if step <= settings.warmup_steps:")],
                                    "training_step: the learning-rate schedule is off by one"),
    "L2 in the gradient": (
        "training_step", [("            param.mul_(1.0 - lr * settings.weight_decay)\n        m.mul_(settings.beta1)"
                           ".add_(param.grad, alpha=1.0 - settings.beta1)\n        v.mul_(settings.beta2).addcmul_("
                           "param.grad, param.grad, value=1.0 - settings.beta2)",
                           "            param.grad.add_(param, alpha=settings.weight_decay)\n        m.mul_("
                           "settings.beta1).add_(param.grad, alpha=1.0 - settings.beta1)\n        v.mul_("
                           "settings.beta2).addcmul_(param.grad, param.grad, value=1.0 - settings.beta2)")],
        "training_step: the weight decay is added to the gradient (Adam with L2), not decoupled"),
    "the temperature after the softmax": (
        "generation", [(TEMPERATURE, ""), (DRAW, DRAW.replace("keepdim=True)", "keepdim=True) / temperature"))],
        "generation: the temperature changes nothing: applied after the softmax"),
    "top-k by the sorted logits' index k": (
        "generation", [(KTH, "logits.sort(dim=-1, descending=True).values[:, top_k : top_k + 1]")],
        "generation: top-k keeps k + 1 tokens"),
    "top-k masking the k-th best itself": ("generation", [("logits < kth_best", "logits <= kth_best")],
                                           "generation: top-k keeps k - 1 tokens"),
    "the cache's positions from 0": ("generation", [(POSITIONS, "torch.arange(T, device=idx.device))  # (B, T, C)")],
                                     "generation: the cache's positions are not offset"),
}  # fmt: skip


@pytest.mark.parametrize("what", list(LEARNER_MISTAKES))
def test_each_classic_mistake_written_as_a_learner_writes_it_is_named(tmp_path, what):
    step, replacements, said = LEARNER_MISTAKES[what]
    verdict = checked(tmp_path, step, *replacements)
    assert not verdict.passed
    assert verdict.message.splitlines()[0].startswith(said), verdict.message
    second = verdict.message.splitlines()[1]  # where it first differs, or the exception it raises as the mistake does
    assert second.startswith("  first difference: ") or " raised ZeroDivisionError" in second, verdict.message


CLIP = "clip_gradients(model, settings.grad_clip)  #"
TORCH_ADAMW = """\
    if "optimizer" not in state:
        named = list(model.named_parameters())
        groups = [{"params": [p for n, p in named if decays(n, p)], "weight_decay": settings.weight_decay},
                  {"params": [p for n, p in named if not decays(n, p)], "weight_decay": 0.0}]
        state["optimizer"] = torch.optim.AdamW(groups, lr, (settings.beta1, settings.beta2))
    for group in state["optimizer"].param_groups:
        group["lr"] = lr
    state["optimizer"].step()
"""
REFUSED = {
    "PyTorch's clip_grad_norm_": (
        "training_step", [(CLIP, "torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)  #")],
        "training_step: your training_step calls torch.nn.utils.clip_grad_norm_, the built-in it is graded against"),
    "torch.optim.AdamW, grouped as gpt-train's": (
        "training_step", [("    adamw(model, state, lr, settings)\n", TORCH_ADAMW)],
        "training_step: your training_step calls a torch.optim optimiser, the built-in it is graded against"),
    "gpt-train's own schedule": (
        "training_step", [("    lr = learning_rate(step, settings)\n",
                           "    from gpt_train.optimisation import learning_rate as schedule\n\n"
                           "    lr = schedule(step, settings)\n")],
        "training_step: your training_step calls gpt_train.optimisation.learning_rate"),
    "torch.softmax in the draw": (
        "generation", [(DRAW, "return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)")],
        "generation: your generate calls torch.softmax, a built-in this course has you write"),
    "gpt-core's sampling": (
        "generation", [("    if temperature == 0:\n        return logits.argmax(dim=-1)\n",
                        "    from gpt_core.generate import next_token as theirs\n\n"
                        "    return theirs(logits, temperature, top_k, generator)\n")],
        "generation: your generate calls gpt_core.generate.next_token, gpt-core's own code"),
}  # fmt: skip


@pytest.mark.parametrize("what", list(REFUSED))
def test_the_built_ins_a_step_replaces_are_refused(tmp_path, what):
    step, replacements, said = REFUSED[what]
    assert checked(tmp_path, step, *replacements).message.startswith(said)  # a refusal, never a pass


def test_generation_with_use_cache_that_reads_the_whole_sequence_again_is_refused(tmp_path):
    source = answer("generation", ("forward(model, token[:, None], cache) if use_cache else ", ""))
    verdict = check_file(BY_NAME["generation"], write(tmp_path, "generation", source))
    assert verdict.message == (
        "generation: with use_cache=True your generate puts the whole sequence through the model again at every "
        "step: keep each block's keys and values, and feed only the new token"
    )


def test_a_step_that_moves_no_parameter_is_one_line(tmp_path):
    source = answer(
        "training_step",
        ("            param.mul_(1.0 - lr * settings.weight_decay)\n", "            pass\n"),
        ("        param.sub_(lr * (m / (1.0 - settings.beta1**t)) / denominator)",
         "        param = param - lr * (m / (1.0 - settings.beta1**t)) / denominator"),
    )  # fmt: skip
    verdict = check_file(BY_NAME["training_step"], write(tmp_path, "training_step", source))
    assert verdict.message.startswith("training_step: your training_step leaves every parameter as it was")


def test_an_unwritten_helper_is_named_at_its_raise(tmp_path):
    source = answer("training_step", (DECAY_RULE, "raise NotImplementedError"))
    path = write(tmp_path, "training_step", source)
    line = source.splitlines().index("    raise NotImplementedError") + 1
    verdict = check_file(BY_NAME["training_step"], path)
    assert verdict.message == (
        f"{path}:{line}: decays is not written yet (it raises NotImplementedError): write its body in place of the "
        "raise"
    )


def test_the_check_s_step_is_the_step_a_gpt_train_run_takes(tmp_path):
    """`gpt_train_step`, the reference a learner's step is held to, beside `Trainer.train_step` on the same batches:
    the same weights after a warm-up, the cosine and every step clipped (at 0.05, far below the gradients' norm),
    within float32's rounding (the run computes its loss on the scored rows alone)."""
    values = {"steps": 12, "warmup_steps": 4, "grad_clip": 0.05, "length": 4, "n_layer": 1, "n_embd": 32}
    run = new_run("sort", values, tmp_path / "run", force=True, device=torch.device("cpu"), rank=Rank())
    try:
        trainer = Trainer(run, quiet=True)
        twin = copy.deepcopy(trainer.model)
        optimizer = make_optimizer(twin, trainer.settings)
        for step in range(trainer.settings.steps):
            batch = trainer.draw_batch(step)
            trainer.train_step(step)
            gpt_train_step(twin, optimizer, batch.inputs, batch.targets, step, trainer.settings)
    finally:
        run.close()
    for (name, ours), theirs in zip(trainer.model.named_parameters(), twin.parameters(), strict=True):
        assert (ours - theirs).abs().max() <= 1e-6, name


def test_the_learners_gpt_computes_on_the_run_s_own_parameters(tmp_path):
    solved(tmp_path, "model")
    torch.manual_seed(0)
    model = gpt_core.GPT(gpt_core.GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16))
    theirs = LearnersGPT(model, learners_model_class(tmp_path / "model.py"))
    assert {id(p) for p in theirs.parameters()} == {id(p) for p in model.parameters()}
    idx = torch.randint(11, (3, 8))
    targets = idx.clone()
    targets[:, :4] = gpt_core.IGNORE_INDEX
    read = targets != gpt_core.IGNORE_INDEX
    ours, expected = theirs(idx, targets, read=read), model(idx, targets, read=read)
    assert (ours.logits - expected.logits).abs().max() <= 1e-5
    assert abs(float(ours.loss.detach() - expected.loss.detach())) <= 1e-5


def test_learn_train_s_trainer_runs_the_learners_gpt_says_each_evaluation_and_draws_the_comparison(tmp_path):
    """A short run of sort (40 steps) on the learner's GPT, counted: every training step and evaluation goes
    through it; a line at each evaluation; the picture of both runs' losses."""
    solved(tmp_path, "model")
    model_class = learners_model_class(tmp_path / "model.py")
    calls = []
    counted = type("Counted", (model_class,), {"forward": lambda self, *a: calls.append(1) or model_class.forward(
        self, *a)})  # fmt: skip
    values = {"steps": 40, "eval_every": 20, "eval_limit": 100, "final_eval_limit": 200, "length": 4}
    lines: list[str] = []
    cpu = torch.device("cpu")
    mine = train_sort(tmp_path, {}, tmp_path / "runs" / "mine", cpu, lines.append, counted, values)
    theirs = train_sort(tmp_path, {}, tmp_path / "runs" / "gpt-core", cpu, lambda line: None, None, values)
    assert len(calls) >= 40 + 1  # every step, and the evaluations
    assert lines[0].startswith("  step 20 of 40: loss ") and "held-out exact match" in lines[0]
    assert lines[1].startswith("  step 40 of 40: loss ") and lines[1].endswith("scoring every held-out example")
    assert lines[2].startswith(f"  held-out exact match {mine.exact_match:.5f} on 200 examples")
    assert abs(mine.exact_match - theirs.exact_match) <= 0.02  # the same start, batches and maths
    picture = compare_picture(mine.run_dir, theirs.run_dir, tmp_path / "runs" / "compare-loss.png")
    assert picture == tmp_path / "runs" / "compare-loss.png"
    assert picture.read_bytes().startswith(b"\x89PNG")
