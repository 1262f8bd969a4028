"""Learning-rate schedulers: the lr the Learner uses for each optimizer update.

A scheduler is anything with ``step() -> float``, ``state_dict()`` and ``load_state_dict()``
(:class:`LrScheduler`). ``step()`` advances the schedule and returns the lr to use *now*; the first
call is step 1. The Learner calls it once right before each optimizer update and writes the value
into every param group of the optimizer; a bare float is a constant schedule
(:func:`as_scheduler`).

Shipped schedules (Burn's), for step ``k = 1, 2, …``::

    ConstantLr(lr)                                   lr
    LinearLr(initial_lr, final_lr, num_iters)        initial_lr at k = 1, moving linearly to
                                                     final_lr at k = num_iters + 1, then final_lr
    CosineAnnealingLr(initial_lr, num_iters, min_lr) min_lr + (initial_lr - min_lr)
                                                     * (1 + cos(pi * (k - 1) / num_iters)) / 2
                                                     (goes on past num_iters, back up: no restart)
    ExponentialLr(initial_lr, gamma)                 initial_lr * gamma ** (k - 1)
    StepLr(initial_lr, step_size, gamma)             initial_lr * gamma ** ((k - 1) // step_size)
    NoamLr(factor, warmup_steps, model_size)         factor * model_size ** -0.5
                                                     * min(k ** -0.5, k * warmup_steps ** -1.5)
    ComposedLr(schedulers, reduction)                prod / sum / avg of all children, every
                                                     child stepped on every call
    SequentialLr(schedulers, milestones)             one child at a time (warm-up, then another)
    TorchLrScheduler(torch_scheduler)                any ``torch.optim.lr_scheduler.LRScheduler``

Where ember differs from Burn:

* initial lrs above 1 are accepted (PyTorch users use them); they must still be finite and > 0;
* every closed form is computed from an integer step counter, so a resumed schedule continues with
  exactly the values of an uninterrupted one (Burn's exponential schedule multiplies its previous
  lr, and its record stores that float);
* invalid arguments raise ``ValueError`` (``TypeError`` for a wrong type) in the constructor, naming
  the argument and the value. Beyond Burn's checks, ember rejects a StepLr ``initial_lr`` or
  ``gamma`` <= 0 (Burn only warns), a Noam ``factor`` <= 0, non-finite numbers and an empty
  ``ComposedLr`` (Burn's empty product is a constant 1.0);
* ``state_dict()`` is a JSON-serialisable dict tagged with the scheduler's ``"kind"``; loading a
  state of another kind, or one with a missing or unexpected key, raises ``ValueError`` (Burn leaves
  the state unchanged when a key is missing).

State dicts hold counters, not configuration: load a state into a scheduler built with the same
arguments. ``LinearLr(...).state_dict() == {"kind": "linear", "step": 3}`` after three calls;
``ComposedLr`` and ``SequentialLr`` nest their children's states under ``"schedulers"``.

Modules: :mod:`~ember.train._lr_scheduler.base` (the protocol and :func:`as_scheduler`),
:mod:`~ember.train._lr_scheduler.schedules` (the closed forms),
:mod:`~ember.train._lr_scheduler.composed` (schedules of schedules),
:mod:`~ember.train._lr_scheduler.torch_adapter` (torch schedulers) and
:mod:`~ember.train._lr_scheduler.validation` (the argument and state checks they share).
"""
