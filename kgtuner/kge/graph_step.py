"""The whole sampled-negative training step as one CUDA graph (``train.cuda_graph: true``).

The trainer's eager row step launches some sixty small kernels a step and, at the paper's sizes, the GPU waits
for the host that launches them (docs/gpu/run3: the step at dim 64 trains as fast as at dim 2000). This module
runs the same step with every shape fixed and nothing read back by the host, so that CUDA can record it once and
replay it whole:

* the batch is copied into a static buffer (the epoch's shorter last batch takes the eager step);
* the negatives are drawn with the trainer's generator (registered with the graph, so each replay draws anew);
* each table's rows of the batch are gathered, scored, regularised and differentiated as in the eager row step;
* duplicate rows are merged by a sort and a segment sum (every duplicate carries its row's summed gradient and
  writes the same new values: no ``torch.unique``, whose size the host would have to read);
* Adam's row update (:class:`~kgtuner.kge.optim.RowSparseAdam`, torch's fused kernel) takes its step size from a
  step count and a learning rate held on the device (the capturable-optimizer pattern): the replay increments the
  count, the bias corrections are computed on the device, a learning-rate change (``lr_patience``) is written
  into the device value before the next replay.

On CUDA the step runs :data:`WARMUP_STEPS` times eagerly on a side stream (cuBLAS workspaces, autograd), is then
captured into a :class:`torch.cuda.CUDAGraph`, and every later full batch replays it. On CPU the same static step
runs eagerly: the tests compare it with the trainer's eager step. The optimizer's state (``step``, ``exp_avg``,
``exp_avg_sq``) stays the one the eager step uses, so eager steps, checkpoints and restores mix freely.

Supported: sampled negatives (uniform or typed), Adam, a model without dense parameters (every model but TuckER
and ConvE), ``compile: false``. Any other configuration trains with the eager step and says why
(``Trainer.step_note``).
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from kgtuner.kge.optim import RowSparseAdam, _one, merge_rows, write_rows

#: Eager runs of the static step before it is captured (CUDA only): cuBLAS and the autograd engine set
#: themselves up in their first calls, which a capture must not record.
WARMUP_STEPS = 3


def unsupported(trainer) -> str:
    """Why ``trainer``'s step cannot run as a captured graph ("" when it can)."""
    c = trainer.cfg
    if trainer.device.type not in ("cpu", "cuda"):
        return f"device {trainer.device} (the captured step runs on CUDA, or eagerly on CPU)"
    if not trainer.row_step:
        return f"negatives={c.negatives!r} trains by plain autograd over every entity (only sampled negatives)"
    if c.compile:
        return "compile: true captures its own CUDA graphs (choose one of compile and cuda_graph)"
    if c.optimizer != "Adam":
        return f"optimizer {c.optimizer!r} (the captured step implements Adam's row update only)"
    if trainer.model.dense_parameters():
        return f"model {c.model!r} has dense parameters, which the captured step does not update"
    tables = (trainer.model.entity.weight, trainer.model.relation.weight)
    if len(trainer.optimizers) != 1 or not isinstance(trainer.optimizers[0], RowSparseAdam) \
            or not all(trainer.optimizers[0].owns(t) for t in tables):
        return "the embedding tables are not updated by one RowSparseAdam"
    if trainer.optimizers[0].param_groups[0].get("maximize", False):
        return "Adam with maximize=True"
    return ""


class CapturedStep:
    """The trainer's sampled-negative step with static shapes, replayed from a CUDA graph on CUDA.

    Call it with a full batch (``[batch_size, 3]`` on the trainer's device); it trains one step and returns the
    step's loss (a fresh tensor, safe to keep). Build it with :func:`captured_step`.
    """

    def __init__(self, trainer):
        self.trainer = trainer
        self.opt: RowSparseAdam = trainer.optimizers[0]
        self.tables = (trainer.model.entity.weight, trainer.model.relation.weight)
        device = trainer.device
        self.capture = device.type == "cuda"
        self.batch = torch.zeros((trainer.cfg.batch_size, trainer.examples.shape[1]), dtype=trainer.examples.dtype,
                                 device=device)
        group = self.opt.param_groups[0]
        self.beta1, self.beta2 = group["betas"]
        self.eps = float(group["eps"])
        self._lr_host = float(group["lr"])
        self.lr = torch.tensor(self._lr_host, dtype=torch.float64, device=device)
        #: Adam's step count on the device (float64: the bias corrections are computed as the eager step's are)
        self.count = torch.zeros((), dtype=torch.float64, device=device)
        self._count_host: int | None = None
        self.graph = None
        self.loss: torch.Tensor | None = None
        self.calls = 0
        self.captures = 0
        self._moments: tuple | None = None
        self._side = None
        _one(self.tables[0].device)  # the fused kernel's step count (cached per device): made here, never in a capture

    def reset(self) -> None:
        """Forget the captured graph (the optimizer's state tensors were replaced, e.g. by a restore)."""
        self.graph = None
        self.loss = None
        self.calls = 0
        self._count_host = None
        self._moments = None

    # --------------------------------------------------------------------------------------------- a step
    def __call__(self, batch: torch.Tensor) -> torch.Tensor:
        self._sync_host_state()
        self.batch.copy_(batch)
        if not self.capture:
            loss = self._step()
        elif self.graph is None and self.calls < WARMUP_STEPS:
            loss = self._warmup_step()
        else:
            if self.graph is None:
                self._record()
            self.graph.replay()
            loss = self.loss.clone()  # the graph's output buffer is overwritten by the next replay
        self.calls += 1
        for table in self.tables:  # the host's mirror of the device count (checkpoints, the eager step)
            self.opt.state[table]["step"] += 1
        self._count_host += 1
        return loss

    def _sync_host_state(self) -> None:
        """Bring the device-side values up to the optimizer's: its step count (an eager step or a restore moved
        it), its learning rate (``lr_patience`` halves it), its state tensors (a restore replaces them)."""
        states = [self.opt._state(t) for t in self.tables]
        moments = tuple((s["exp_avg"], s["exp_avg_sq"]) for s in states)
        if self._moments is None or any(a is not b for pa, pb in zip(moments, self._moments) for a, b in zip(pa, pb)):
            if self._moments is not None:
                self.reset()
            self._moments = moments
        step = int(states[0]["step"])
        if any(int(s["step"]) != step for s in states):
            raise RuntimeError(f"the embedding tables' Adam step counts differ ({[s['step'] for s in states]}): "
                               "the captured step updates both tables every step")
        if self._count_host != step:
            self.count.fill_(step)
            self._count_host = step
        lr = float(self.opt.param_groups[0]["lr"])
        if lr != self._lr_host:
            self.lr.fill_(lr)
            self._lr_host = lr

    def _side_stream(self):
        """This step's own stream on the trainer's device, for the warm-up and the capture (torch's shared capture
        stream is made once per process, on whichever device was current then)."""
        if self._side is None:
            with torch.cuda.device(self.batch.device):
                self._side = torch.cuda.Stream()
        return self._side

    def _warmup_step(self) -> torch.Tensor:
        side = self._side_stream()
        with torch.cuda.device(self.batch.device):
            main = torch.cuda.current_stream()
            side.wait_stream(main)
            with torch.cuda.stream(side):
                loss = self._step()
            main.wait_stream(side)
            loss.record_stream(main)  # made on the side stream, read on the main one (the loss monitor)
        return loss

    def _record(self) -> None:
        """Capture :meth:`_step` into a CUDA graph (recorded, not run: the first replay runs it)."""
        with torch.cuda.device(self.batch.device):  # the trainer's device, whichever is current
            graph = torch.cuda.CUDAGraph()
            graph.register_generator_state(self.trainer.generator)
            with torch.cuda.graph(graph, stream=self._side_stream()):
                self.loss = self._step()
        self.graph = graph
        self.captures += 1

    # --------------------------------------------------------------------------------------- the static step
    def _step(self) -> torch.Tensor:
        """One training step on ``self.batch``; every shape fixed, nothing read by the host."""
        tr = self.trainer
        model = tr.model
        neg = tr.sampler.draw(tr.generator)
        ids = tr.sampler.row_ids(model, self.batch, neg)
        leaves = [w.detach().index_select(0, i).requires_grad_() for w, i in zip(self.tables, ids)]
        # bf16 autocast without its cast cache (the cache's lifetime is the context's, not the graph's)
        amp = torch.autocast(tr.device.type, dtype=torch.bfloat16, cache_enabled=False) if tr._amp else nullcontext()
        with amp:
            loss = tr._rows_objective(self.batch, leaves[0], None, leaves[1], None)
        loss.backward()
        with torch.no_grad():
            self.count.add_(1)
            # SparseAdam's step size, then rescaled for the fused kernel run at step 1 (as RowSparseAdam does)
            c1, c2 = 1 - self.beta1, (1 - self.beta2) ** 0.5
            step_size = self.lr * torch.sqrt(1 - torch.pow(self.beta2, self.count)) / (1 - torch.pow(self.beta1, self.count))
            kernel_lr = (step_size * c1 / c2).float()
            for table, idx, leaf in zip(self.tables, ids, leaves):
                self._adam_rows(table, idx, leaf.grad, leaf.detach(), kernel_lr, self.eps / c2)
        return loss.detach()

    def _adam_rows(self, table, idx, grads, p_rows, kernel_lr, kernel_eps) -> None:
        rows, sums, _, pick = merge_rows(idx, grads, dedup=False)
        p_rows = p_rows.index_select(0, pick)
        state = self.opt.state[table]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m_rows, v_rows = m.index_select(0, rows), v.index_select(0, rows)
        torch._fused_adam_([p_rows], [sums.to(p_rows.dtype).contiguous()], [m_rows], [v_rows], [],
                           [_one(table.device)], lr=kernel_lr, beta1=self.beta1, beta2=self.beta2,
                           weight_decay=0.0, eps=kernel_eps, amsgrad=False, maximize=False)
        for target, new in ((m, m_rows), (v, v_rows), (table, p_rows)):
            write_rows(target, rows, new)


def captured_step(trainer) -> tuple[CapturedStep | None, str]:
    """``(step, note)``: the captured step of ``trainer`` (``train.cuda_graph: true``), or None and the reason the
    eager step trains instead."""
    reason = unsupported(trainer)
    if reason:
        return None, f"cuda_graph: the eager step trains: {reason}"
    where = "replayed from one CUDA graph" if trainer.device.type == "cuda" else \
        "run eagerly with static shapes (no CUDA device)"
    return CapturedStep(trainer), f"cuda_graph: the whole step is {where}"
