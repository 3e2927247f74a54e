"""Step 12: one training step, gpt-train's own: the gradients of the loss, clipped by their global norm, then AdamW
at the scheduled learning rate. In this order:

    lr = learning_rate(step)                  the rate for this step (below)
    loss.backward()                           after clearing the gradients the last step left
    clip                                      total = sqrt(sum over every parameter of sum(grad^2))
                                              every grad *= min(1, grad_clip / (total + 1e-6))
    AdamW, each parameter p with gradient g   t = 1 at the first step, 2 at the second ...
        p = p - lr * weight_decay * p         weight matrices only (p.dim() >= 2), but the position table wpe
        m = beta1 * m + (1 - beta1) * g       m and v start at zeros, one pair per parameter, kept in `state`
        v = beta2 * v + (1 - beta2) * g^2
        p = p - lr * m_hat / (sqrt(v_hat) + 1e-8),   m_hat = m / (1 - beta1^t), v_hat = v / (1 - beta2^t)

    learning_rate(step), step = 0, 1, 2 ... (settings: lr, min_lr, warmup_steps, steps):
        step < warmup_steps:   lr * (step + 1) / warmup_steps        the first step at lr / warmup_steps, not 0
        after:                 min_lr + (lr - min_lr) * (1 + cos(pi * progress)) / 2,
                               progress = min(1, (step - warmup_steps) / max(1, steps - warmup_steps))

grad_clip 0 turns clipping off. The decay is decoupled: it shrinks the weight itself and never enters m or v. Biases,
LayerNorm's weights and biases and the position table are not decayed: a norm's weight pulled towards 0 switches its
features off, and a position table pulled towards 0 forgets where each token sits.

Check it with `gpt-train learn check training_step`: it runs your step for a few steps on a small GPT (the model
step's, so model(inputs, targets) gives (logits, loss)) beside gpt-train's own step on a copy of the same weights and
the same batches, and compares every parameter after every step in float64. It refuses torch.optim,
clip_grad_norm_ and gpt-train's own optimiser: write each piece from its formula.
"""

import math  # noqa: F401 (math.cos and math.pi, for learning_rate)

import torch
from torch import nn


def training_step(model: nn.Module, state: dict, inputs: torch.Tensor, targets: torch.Tensor, step: int, settings):
    """One step. model: the GPT; state: a dict, empty at the first step and the same dict at every later one (keep
    t and each parameter's m and v in it); inputs, targets: (B, T) token ids, targets -100 where not scored; step:
    0, 1, 2 ...; settings: gpt-train's TrainSettings (lr, min_lr, warmup_steps, steps, weight_decay, beta1, beta2,
    grad_clip). Returns the loss.

    Hints: param.grad = None for each parameter clears the last step's gradients; clip after loss.backward() and
    before the update, or the update takes the gradients unclipped; change the parameters in place under
    torch.no_grad() (param.mul_, param.sub_); decide the decay by the name, model.named_parameters().
    """
    # BEGIN SOLUTION
    lr = learning_rate(step, settings)
    for param in model.parameters():
        param.grad = None
    _, loss = model(inputs, targets)
    loss.backward()
    if settings.grad_clip > 0:
        clip_gradients(model, settings.grad_clip)  # before the update: the step takes the clipped gradients
    adamw(model, state, lr, settings)
    return loss.detach()
    # END SOLUTION


def learning_rate(step: int, settings) -> float:
    """The warm-up and the cosine above (math.cos, math.pi). Try step 0 and step warmup_steps - 1 on paper:
    lr / warmup_steps and lr."""
    # BEGIN SOLUTION
    if step < settings.warmup_steps:
        return settings.lr * (step + 1) / settings.warmup_steps
    progress = min(1.0, (step - settings.warmup_steps) / max(1, settings.steps - settings.warmup_steps))
    return settings.min_lr + 0.5 * (settings.lr - settings.min_lr) * (1.0 + math.cos(math.pi * progress))
    # END SOLUTION


def decays(name: str, param: nn.Parameter) -> bool:
    """Whether AdamW decays this parameter: a weight matrix (param.dim() >= 2) that is not wpe's."""
    # BEGIN SOLUTION
    return param.dim() >= 2 and not name.startswith("wpe.")
    # END SOLUTION


@torch.no_grad()  # solution only: the updates are no part of the graph
def clip_gradients(model: nn.Module, max_norm: float) -> None:
    """Scale every gradient by grad_clip / (total + 1e-6) when that is below 1, total the norm of all of them
    together (one scale for every parameter, not one each)."""
    # BEGIN SOLUTION
    grads = [param.grad for param in model.parameters() if param.grad is not None]
    total = torch.stack([grad.norm() for grad in grads]).norm()
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for grad in grads:
        grad.mul_(scale)
    # END SOLUTION


@torch.no_grad()  # solution only: the updates are no part of the graph
def adamw(model: nn.Module, state: dict, lr: float, settings) -> None:
    """AdamW's update of every parameter that has a gradient, from the formulas above (eps = 1e-8)."""
    # BEGIN SOLUTION
    t = state["t"] = state.get("t", 0) + 1
    for name, param in model.named_parameters():
        if param.grad is None:
            continue
        if name not in state:
            state[name] = (torch.zeros_like(param), torch.zeros_like(param))
        m, v = state[name]
        if decays(name, param):
            param.mul_(1.0 - lr * settings.weight_decay)
        m.mul_(settings.beta1).add_(param.grad, alpha=1.0 - settings.beta1)
        v.mul_(settings.beta2).addcmul_(param.grad, param.grad, value=1.0 - settings.beta2)
        denominator = (v / (1.0 - settings.beta2**t)).sqrt() + 1e-8
        param.sub_(lr * (m / (1.0 - settings.beta1**t)) / denominator)
    # END SOLUTION
