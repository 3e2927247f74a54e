"""The training_step step's answer: gpt-train's step written out. The loss's gradients, clipped by their global norm,
then AdamW at the scheduled learning rate, decaying the weight matrices alone."""

import math

import torch

EPS = 1e-8  # AdamW's, under the square root's sum
CLIP_EPS = 1e-6  # clip_grad_norm_'s, under the norm


def training_step(model, state, inputs, targets, step, settings):
    """One step at schedule step `step` (0, 1, ...); `state` keeps AdamW's moments from one step to the next."""
    lr = learning_rate(step, settings)
    for param in model.parameters():
        param.grad = None
    _, loss = model(inputs, targets)
    loss.backward()
    if settings.grad_clip > 0:
        clip_gradients(model, settings.grad_clip)  # before the update: the step takes the clipped gradients
    adamw(model, state, lr, settings)
    return loss.detach()


def learning_rate(step, settings):
    """Linear warm-up to lr over warmup_steps (the first step at lr / warmup_steps), then cosine to min_lr."""
    if step < settings.warmup_steps:
        return settings.lr * (step + 1) / settings.warmup_steps
    progress = min(1.0, (step - settings.warmup_steps) / max(1, settings.steps - settings.warmup_steps))
    return settings.min_lr + 0.5 * (settings.lr - settings.min_lr) * (1.0 + math.cos(math.pi * progress))


def decays(name, param):
    """Weight decay on the weight matrices alone: not biases, not norms, not the position table."""
    return param.dim() >= 2 and not name.startswith("wpe.")


@torch.no_grad()
def clip_gradients(model, max_norm):
    """Scale every gradient by max_norm / (total + 1e-6) when the norm of all of them together is above it."""
    grads = [param.grad for param in model.parameters() if param.grad is not None]
    total = torch.stack([grad.norm() for grad in grads]).norm()
    scale = (max_norm / (total + CLIP_EPS)).clamp(max=1.0)
    for grad in grads:
        grad.mul_(scale)


@torch.no_grad()
def adamw(model, state, lr, settings):
    """Decoupled weight decay, then Adam's update from bias-corrected moments."""
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
        denominator = (v / (1.0 - settings.beta2**t)).sqrt() + EPS
        param.sub_(lr * (m / (1.0 - settings.beta1**t)) / denominator)
