"""The hooks ``flopmeter.watch`` installs: before each forward of a module (with its keyword arguments), around
each ``step()`` of an optimizer, and whether the autograd engine is running a backward.

Where torch has them (2.0 on), they are torch's own: ``register_forward_pre_hook(..., with_kwargs=True)``,
``Optimizer.register_step_pre_hook`` and ``register_step_post_hook``, and ``torch._C._current_graph_task_id()``
(-1 outside a backward). Where it lacks them (Debian's torch 1.13), the module's ``forward`` and the optimizer's
``step`` are wrapped on the instance (a bound method, so that a learning-rate scheduler made later can wrap it in
turn), and a backward is seen by a gradient hook on the forward's output, which queues a callback for the end of
that backward. ``remove()`` restores what was there; a wrapper that something else has wrapped since cannot be
taken out and is switched off instead (it then calls straight through).

Thread-safety: install and remove from the thread that trains; the callbacks run where torch runs them.
"""

from __future__ import annotations

import functools
import logging
import types
from collections.abc import Mapping
from typing import Any, Callable, List, Optional

LOG = logging.getLogger("flopmeter")


def torch_has_hooks(torch: Any) -> bool:
    """Whether this torch has keyword forward pre-hooks, optimizer step hooks and the backward's graph task id."""
    import inspect

    try:
        keyword = "with_kwargs" in inspect.signature(torch.nn.Module.register_forward_pre_hook).parameters
    except (TypeError, ValueError):
        keyword = False
    return keyword and hasattr(torch.optim.Optimizer, "register_step_post_hook") and \
        hasattr(torch._C, "_current_graph_task_id")


class _Handles:
    """Undo actions, run once each in reverse order by ``remove()``."""

    def __init__(self) -> None:
        self._undo: List[Callable[[], None]] = []

    def add(self, undo: Callable[[], None]) -> None:
        self._undo.append(undo)

    def remove(self) -> None:
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except Exception as e:  # noqa: BLE001 - removing the rest matters more
                LOG.warning("flopmeter: removing a hook failed (%s: %s)", type(e).__name__, e)


def _wrap_method(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]],
                 handles: _Handles) -> None:
    """Sets ``owner.<name>`` to a bound method around the current one; the undo restores it, or switches the
    wrapper off when something has wrapped it since."""
    had_own = name in vars(owner)
    previous = vars(owner).get(name)
    original = getattr(owner, name)
    state = {"on": True}
    inner = make(original)

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if state["on"]:
            return inner(*args, **kwargs)
        return original(*args, **kwargs)

    bound = types.MethodType(wrapper, owner)
    setattr(owner, name, bound)

    def undo() -> None:
        state["on"] = False
        current = vars(owner).get(name)
        if getattr(current, "__func__", None) is wrapper:
            if had_own:
                setattr(owner, name, previous)
            else:
                delattr(owner, name)

    handles.add(undo)


def _first_grad_tensor(torch: Any, output: Any) -> Optional[Any]:
    """A tensor of the forward's output that requires a gradient (the loss or the logits), or None."""
    if isinstance(output, torch.Tensor):
        return output if output.requires_grad else None
    values = output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else \
        output.values() if isinstance(output, Mapping) else ()
    for value in values:
        if isinstance(value, torch.Tensor) and value.requires_grad:
            return value
    return None


class BackwardWatch:
    """Whether a backward is running, for a torch without ``_current_graph_task_id``: a gradient hook on a
    counted forward's output marks the start, a callback the engine runs at the end of that backward the end."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self.running = False

    def watch_output(self, output: Any) -> None:
        tensor = _first_grad_tensor(self._torch, output)
        if tensor is not None:
            tensor.register_hook(self._started)

    def _started(self, grad: Any) -> None:
        if not self.running:
            self.running = True
            self._torch.autograd.Variable._execution_engine.queue_callback(self._ended)

    def _ended(self) -> None:
        self.running = False


def install_forward(torch: Any, module: Any, before: Callable[[Any, Any], Any],
                    after: Optional[Callable[[Any, Any], None]], native: bool, handles: _Handles) -> None:
    """``before(args, kwargs)`` ahead of each forward of `module`; ``after(token, output)`` behind it, with what
    ``before`` returned (wrapped forwards only: torch's own hooks need no ``after``)."""
    if native:
        def hook(_module: Any, args: Any, kwargs: Any) -> None:  # None: the arguments go on unchanged
            before(args, kwargs)

        handles.add(module.register_forward_pre_hook(hook, with_kwargs=True).remove)
        return

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def forward(*args: Any, **kwargs: Any) -> Any:
            token = before(args, kwargs)
            output = original(*args, **kwargs)
            if after is not None and token:
                after(token, output)
            return output
        return forward

    _wrap_method(module, "forward", make, handles)


def install_step(torch: Any, optimizer: Any, pre: Callable[[], None], post: Callable[[], None], native: bool,
                 handles: _Handles) -> None:
    """``pre()`` and ``post()`` around each ``optimizer.step()`` that runs."""
    if native and isinstance(optimizer, torch.optim.Optimizer):
        handles.add(optimizer.register_step_pre_hook(lambda *_: pre()).remove)
        handles.add(optimizer.register_step_post_hook(lambda *_: post()).remove)
        return

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            pre()
            result = original(*args, **kwargs)
            post()
            return result
        return step

    _wrap_method(optimizer, "step", make, handles)


def innermost_optimizer(torch: Any, optimizer: Any) -> Any:
    """The torch optimizer that really steps: under Accelerate's ``AcceleratedOptimizer`` (whose ``step`` runs on
    every micro-batch and steps the inner one only when gradients synchronise), DeepSpeed's and Lightning's
    wrappers, each of which keeps it as ``.optimizer``."""
    seen = set()
    while id(optimizer) not in seen:
        seen.add(id(optimizer))
        inner = getattr(optimizer, "optimizer", None)
        if inner is None or not callable(getattr(inner, "step", None)):
            break
        if not isinstance(inner, torch.optim.Optimizer) and isinstance(optimizer, torch.optim.Optimizer) and \
                type(optimizer).__module__.startswith("torch."):
            break
        optimizer = inner
    return optimizer
