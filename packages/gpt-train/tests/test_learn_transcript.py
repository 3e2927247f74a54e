"""docs/learn.md's transcript of the steps, run: every step started, the attention step taken from its stub to a
pass, a classic mistake of each step that builds the model, trains it or samples from it named as the course
names it, then every step passed. `GPT_TRAIN_WRITE_DOCS=1` writes it into the page; otherwise the page must hold
it, numbers aside (`learn_transcript`)."""

from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner
from learn_transcript import SOLUTIONS, Session, answer, update_page, write

from gpt_train.cli.learn import learn
from gpt_train.learn.steps import BY_NAME, STEPS

FOLDER = Path("my-gpt")

SCORES_OVER_D = """\
    scores = q @ k.transpose(-2, -1) / q.shape[-1]  # (B, H, Tq, Tk)
    if causal:
        n_queries, n_keys = scores.shape[-2:]
        allowed = torch.ones(n_queries, n_keys, dtype=torch.bool, device=q.device).tril(n_keys - n_queries)
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v
"""
OWN_SOFTMAX = """\
    exp = (scores - scores.amax(dim=-1, keepdim=True)).exp()
    weights = exp / exp.sum(dim=-1, keepdim=True)
"""

# For each step that builds, trains or samples from the model: what the page says the learner wrote, the lines it
# shows, and the replacement in the step's answer that makes that mistake.
MISTAKES = (
    ("multi_head_attention", "Step 9, the heads split by a reshape alone, no transpose:",
     "q, k, v = [t.reshape(B, self.n_head, T, C // self.n_head) for t in self.qkv(x).split(C, dim=2)]",
     "q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)",
     "q, k, v = [t.reshape(B, self.n_head, T, C // self.n_head) for t in self.qkv(x).split(C, dim=2)]"),
    ("block", "Step 10, the norm applied after the residual add:",
     "x = self.ln1(x + self.attn(x))\nreturn self.ln2(x + self.mlp(x))",
     "x = x + self.attn(self.ln1(x))\n        return x + self.mlp(self.ln2(x))",
     "x = self.ln1(x + self.attn(x))\n        return self.ln2(x + self.mlp(x))"),
    ("model", "Step 11, the tie left out of the constructor:",
     "self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)  # and no self.lm_head.weight = self.wte.weight",
     "self.lm_head.weight = self.wte.weight", "pass"),
    ("model", "Then the positions counted from 1:",
     "x = self.wte(idx) + self.wpe(torch.arange(1, T + 1, device=idx.device))",
     "wpe(torch.arange(T, device=idx.device))", "wpe(torch.arange(1, T + 1, device=idx.device))"),
    ("training_step", "Step 12, `decays` deciding by the name, so that the norms' weights decay too:",
     'return name.endswith("weight")',
     'return param.dim() >= 2 and not name.startswith("wpe.")', 'return name.endswith("weight")'),
    ("training_step", "Then the clipping moved after the update:",
     "adamw(model, state, lr, settings)\nif settings.grad_clip > 0:\n    clip_gradients(model, settings.grad_clip)",
     "        clip_gradients(model, settings.grad_clip)  # before the update: the step takes the clipped gradients\n"
     "    adamw(model, state, lr, settings)\n",
     "        pass\n    adamw(model, state, lr, settings)\n    if settings.grad_clip > 0:\n"
     "        clip_gradients(model, settings.grad_clip)\n"),
    ("training_step", "Then the warm-up counted from step 0, at a rate of 0:",
     "return settings.lr * step / settings.warmup_steps",
     "settings.lr * (step + 1) / settings.warmup_steps", "settings.lr * step / settings.warmup_steps"),
    ("generation", "Step 13, the temperature applied to the probabilities:",
     "probs = exp / exp.sum(dim=-1, keepdim=True) / temperature\nreturn torch.multinomial(probs, 1, "
     "generator=generator).squeeze(-1)",
     ("    logits = logits / temperature  # before the softmax: T < 1 sharpens, T > 1 flattens\n",
      "    return torch.multinomial(exp / exp.sum(dim=-1, keepdim=True), 1, generator=generator).squeeze(-1)"),
     ("", "    probs = exp / exp.sum(dim=-1, keepdim=True) / temperature\n"
          "    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)")),
    ("generation", "Then the k-th best read at index k of the sorted logits:",
     "kth_best = logits.sort(dim=-1, descending=True).values[:, top_k : top_k + 1]",
     "logits.topk(top_k, dim=-1).values[:, -1:]", "logits.sort(dim=-1, descending=True).values[:, top_k : top_k + 1]"),
    ("generation", "Then the new token's position counted from 0 in the cached forward:",
     "x = model.wte(idx) + model.wpe(torch.arange(T, device=idx.device))",
     "torch.arange(start, start + T, device=idx.device))  # (B, T, C)",
     "torch.arange(T, device=idx.device))  # (B, T, C)"),
)  # fmt: skip
NEW_STEPS = ("multi_head_attention", "block", "model", "training_step", "generation")


def test_the_transcript_of_every_step(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    session = Session()
    names = " ".join(step.name for step in STEPS)

    session.say("Every step started, each a stub in `my-gpt/`:")
    started = [session_output(step.name) for step in STEPS]
    session.loop(f"for step in {names}; do gpt-train learn start $step; done", started)
    assert all(line.startswith(f"wrote {FOLDER / step.file_name}: ") for line, step in zip(started, STEPS, strict=True))

    session.say("Step 2, from its stub, written with the scores divided by d:")
    said = session.run("start", "attention")
    assert "already exists: it is kept as it is" in said
    said = session.run("check", "attention")
    assert "attention is not written yet" in said
    session.say("The body written in place of the raise:")
    session.code(SCORES_OVER_D)
    stub = (FOLDER / "attention.py").read_text()
    (FOLDER / "attention.py").write_text(stub.replace("    raise NotImplementedError\n", SCORES_OVER_D))
    said = session.run("check", "attention")
    assert said.startswith("attention: your scores are divided by d, not sqrt(d)\n")
    session.say("The fix, `/ q.shape[-1] ** 0.5`:")
    fixed = SCORES_OVER_D.replace("/ q.shape[-1]", "/ q.shape[-1] ** 0.5")
    (FOLDER / "attention.py").write_text(stub.replace("    raise NotImplementedError\n", fixed))
    said = session.run("check", "attention")
    assert said.startswith("attention: your attention calls torch.softmax")
    session.say("The softmax of step 1 in its place, `exp = (scores - scores.amax(dim=-1, keepdim=True)).exp()` and "
                "`weights = exp / exp.sum(dim=-1, keepdim=True)`:")  # fmt: skip
    own = fixed.replace("    weights = torch.softmax(scores, dim=-1)\n", OWN_SOFTMAX)
    (FOLDER / "attention.py").write_text(stub.replace("    raise NotImplementedError\n", own))
    said = session.run("check", "attention")
    assert said.startswith("attention: passed")

    named = set()
    for step, prose, shown, old, new in MISTAKES:
        session.say(prose)
        session.code(shown)
        write(FOLDER, step, answer(step, *([(old, new)] if isinstance(old, str) else zip(old, new, strict=True))))
        said = session.run("check", step)
        shutil.copy(SOLUTIONS / BY_NAME[step].file_name, FOLDER)  # the next step's check imports it
        assert said.startswith(f"{step}: ") and "passed" not in said.splitlines()[0], said
        assert "first difference" in said, said  # a named mistake, then where the numbers part
        named.add(step)
    assert named == set(NEW_STEPS)

    session.say("Every step with its answer (`gpt_train/learn/solutions/`), each passed:")
    checked = []
    for step in STEPS:
        shutil.copy(SOLUTIONS / step.file_name, FOLDER / step.file_name)
        checked.append(session_output(step.name, "check"))
    session.loop(f"for step in {names}; do gpt-train learn check $step; done", checked)
    assert all(line.startswith(f"{step.name}: passed") for line, step in zip(checked, STEPS, strict=True)), checked
    listing = session.run("list", shown="gpt-train learn")
    assert listing.count("(passed)") == len(STEPS)

    update_page("steps", session.render(), Path(__file__).name)


def session_output(step: str, command: str = "start") -> str:
    """What `gpt-train learn COMMAND STEP` prints, not added to a session (a loop shows them together)."""
    return CliRunner().invoke(learn, [command, step]).output
