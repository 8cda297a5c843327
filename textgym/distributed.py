"""Data-parallel training on accelerate: N processes, one policy replica each, gradients averaged.

Every process plays its own share of an update's episodes (:func:`episode_shard`), computes the
loss on its own decisions, and before each optimizer step the trainable parameters' gradients are
averaged across processes (:meth:`ProcessContext.average_gradients`), so every replica takes the
same step and keeps the same weights. Metrics are gathered (:meth:`ProcessContext.gather`,
:meth:`ProcessContext.weighted_mean`) and written by the main process only; every stop request
(Ctrl-C, SIGTERM, a time budget, early stopping) becomes one collective decision
(:meth:`ProcessContext.agree_to_stop`). Processes are started by torch's elastic launcher
(:func:`launch`, i.e. ``torchrun --standalone``) or by the user's ``torchrun`` / ``accelerate
launch``; :func:`init` finds out which and initialises the process group through accelerate's
``PartialState``. A process started by none of them gets a single-process context: no process
group, no accelerate import, and every collective is the identity.

How gradients are averaged (measured, ``torchrun --nproc_per_node 2``, gloo, the tiny model with
a PEFT LoRA adapter, 8 score-mode decisions with multi-token candidates, so one
:meth:`textgym.policy.Policy.evaluate` runs 3 forward calls: the prompt prefix, the suffixes on its
KV cache, the candidate trie; REINFORCE loss ``-(A * logp).mean()``; max abs difference from the
1-process gradient of the whole batch, whose largest entry is 0.05):

===========================================================================  ===============
route                                                                         max difference
===========================================================================  ===============
(a) ``accelerator.prepare(model)`` (DDP), every forward through the wrapper        9.3e-09
(a) the same, 2 accumulation chunks, ``no_sync`` on the first                      1.5e-08
(a) DDP wrapper made, but the policy calls the inner PEFT model (as it does)       4.6e-02
(a) DDP, ranks with 5 and 3 decisions (DDP weighs ranks equally)                   1.1e-02
(b) no wrapper; one all-reduce of the gradients, weighted by decisions             9.3e-09
(b) the same, ranks with 5 and 3 decisions                                         2.6e-08
===========================================================================  ===============

textgym uses (b), :meth:`ProcessContext.average_gradients`: after the backward passes of a
minibatch (however many forward calls, accumulation chunks and models such as a value head took
part) and before gradient clipping, one all-reduce of the trainable parameters' gradients, packed
in flat buckets, each scaled by the process's weight (its number of decisions in the minibatch)
and divided by the total. Why not DDP:

* DDP averages only the gradients of forward calls made *through its wrapper*; a call to the inner
  model (the policy's own ``self.model``, the reference policy with the adapter disabled, a value
  head) silently leaves them un-averaged (row 3: no error, replicas drift apart).
* Episodes have different lengths, so ranks hold different numbers of decisions; DDP's equal
  weighting then is not the gradient of the global batch (row 4); the weighted mean is (row 6).
* DDP communicates in every backward (accumulation needs ``no_sync``); (b) once per optimizer
  step, at one visible place, where the trainer's non-finite guard and per-group clipping then see
  the averaged gradients. A NaN on one rank propagates through the sum to every rank, so all
  ranks skip that step together.
* (b) gives up overlapping communication with the backward pass. With LoRA the gradients are a
  few MB (``bench/distributed.py`` computes the sizes); full fine-tuning of a big model is where
  DDP's overlap would pay.

The same holds on GPUs: the buckets live on the process's device and the reduction is a plain
sum (no ``ReduceOp.AVG``), so gloo and NCCL behave alike. What every caller must keep symmetric:
each rank calls each collective the same number of times in the same order (the trainers plan
minibatches from the *global* decision count, and a rank with an empty minibatch still calls
:meth:`~ProcessContext.average_gradients`, with weight 0).

DeepSpeed, FSDP, Megatron-LM, accelerate's parallelism config (TP/CP), its mixed precision,
``torch.compile`` (dynamo) and its gradient accumulation are refused with a one-line
:class:`UnsupportedLaunch` error when an accelerate config asks for them: DeepSpeed and FSDP shard
parameters and optimizer state behind their own engine, which needs every forward call through
their wrapper and every step through their optimizer, while the policy calls its model directly
(prefix KV cache, the reference policy with the adapter disabled, saving the adapter); with LoRA
the trainable state is a few MB, so there is nothing worth sharding. The model's dtype is chosen
when it is loaded (``textgym.models.load(..., dtype=)``), and the trainers' own
``gradient_accumulation_steps`` applies.

Example (a single process: no launcher, no process group, collectives are the identity):
    >>> import torch
    >>> from textgym import distributed
    >>> ctx = distributed.init()
    >>> ctx.rank, ctx.world_size, ctx.is_main
    (0, 1, True)
    >>> layer = torch.nn.Linear(2, 1)
    >>> layer(torch.ones(1, 2)).sum().backward()
    >>> ctx.average_gradients(layer.parameters(), weight=4)
    4.0
    >>> ctx.gather([{"return": 1.0}]), ctx.agree_to_stop(False)
    ([{'return': 1.0}], False)
    >>> list(distributed.episode_shard(10, world_size=2, rank=1))
    [5, 6, 7, 8, 9]

Several processes: ``launch(["-m", "textgym.cli", "train", "bandit"], processes=2)`` (what
``textgym train --processes 2`` does), or start the same command with ``torchrun`` or ``accelerate
launch``; each process calls :func:`init` and gets its own rank.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import signal
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

if TYPE_CHECKING:  # torch is imported where it is used: the launcher and the CLI's top level need none
    import torch

__all__ = [
    "ProcessContext",
    "UnsupportedLaunch",
    "check_launch_config",
    "checksum",
    "configure_threads",
    "episode_shard",
    "exit_process",
    "init",
    "is_launched",
    "launch",
    "split_evenly",
]

T = TypeVar("T")

#: Default size of one gradient bucket (one all-reduce each); a LoRA adapter fits in one.
BUCKET_BYTES = 64 * 2**20

#: How long :func:`launch`'s elastic agent waits, after forwarding a stop signal, for the processes
#: to finish their update and save a checkpoint before it kills them (torchrun's default is 30 s,
#: shorter than one update of a real model on a CPU).
SHUTDOWN_TIMEOUT = 3600

# accelerate settings (the environment variables `accelerate launch` sets from the user's config)
# that textgym cannot honour, each with the reason given to the user.
_UNSUPPORTED_FLAGS = {
    "ACCELERATE_USE_DEEPSPEED": "DeepSpeed",
    "ACCELERATE_USE_FSDP": "FSDP",
    "ACCELERATE_USE_MEGATRON_LM": "Megatron-LM",
    "ACCELERATE_USE_PARALLELISM_CONFIG": "a parallelism config (tensor/context parallelism)",
}
_SHARDING_REASON = ("textgym keeps a whole policy replica per process and averages its gradients "
                    "itself (the policy calls its model directly); use a multi-GPU (DDP) or "
                    "multi-CPU accelerate config")

# Environment variables with which each launcher reports the process layout, in accelerate's order
# (torchrun / `accelerate launch`, Intel MPI, Open MPI, MVAPICH).
_WORLD_SIZE_VARS = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
_LOCAL_WORLD_SIZE_VARS = ("LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE",
                          "MV2_COMM_WORLD_LOCAL_SIZE")


class UnsupportedLaunch(ValueError):
    """The launch configuration asks for something textgym's data parallelism does not do."""


def _flag(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "").strip().lower() in ("1", "true", "yes")


def check_launch_config(environ: Mapping[str, str] | None = None) -> None:
    """Refuse accelerate settings that textgym would otherwise silently ignore.

    Reads only environment variables (``accelerate launch`` exports the user's config there), so
    the CLI can call it before anything is loaded.

    Raises:
        UnsupportedLaunch: one line naming the setting and why.
    """
    env = os.environ if environ is None else environ
    for name, what in _UNSUPPORTED_FLAGS.items():
        if _flag(env, name):
            raise UnsupportedLaunch(f"{what} from the accelerate config is not supported: {_SHARDING_REASON}")
    precision = env.get("ACCELERATE_MIXED_PRECISION", "no").strip().lower()
    if precision not in ("", "no"):
        raise UnsupportedLaunch(
            f"mixed_precision={precision} from the accelerate config is not supported: textgym runs "
            "the model in the dtype it was loaded with (choose it there); set mixed_precision: no")
    dynamo = env.get("ACCELERATE_DYNAMO_BACKEND", "no").strip().lower()
    if dynamo not in ("", "no"):
        raise UnsupportedLaunch(
            f"dynamo_backend={dynamo} from the accelerate config is not supported: textgym does not "
            "compile the model; set dynamo_backend: no")
    steps = env.get("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "1").strip()
    if steps not in ("", "1"):
        raise UnsupportedLaunch(
            f"gradient_accumulation_steps={steps} from the accelerate config is not supported: set "
            "the trainer's gradient_accumulation_steps instead")


def _first_int(environ: Mapping[str, str], names: Sequence[str], default: int) -> int:
    for name in names:
        if environ.get(name, "").strip():
            return int(environ[name])
    return default


def _launched_world_size(environ: Mapping[str, str]) -> int:
    return _first_int(environ, _WORLD_SIZE_VARS, 1)


def is_launched(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is one of several started by a launcher (torchrun, ``accelerate
    launch``, :func:`launch`, mpirun): its environment says the world has more than one process."""
    return _launched_world_size(os.environ if environ is None else environ) > 1


def _available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def configure_threads(local_world_size: int) -> int:
    """Share this machine's cores between its ``local_world_size`` processes (unless the user or
    the launcher set ``OMP_NUM_THREADS``, which then wins); returns torch's thread count."""
    import torch

    if "OMP_NUM_THREADS" not in os.environ:
        threads = max(1, _available_cores() // max(1, local_world_size))
        os.environ["OMP_NUM_THREADS"] = str(threads)  # also read by accelerate and by subprocesses
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def split_evenly(total: int, world_size: int, rank: int) -> int:
    """This rank's share of ``total`` items: the first ``total % world_size`` ranks get one more."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in a world of {world_size} processes")
    return total // world_size + (1 if rank < total % world_size else 0)


def episode_shard(total: int, world_size: int, rank: int, group_size: int = 1) -> range:
    """The global indices of the episodes this rank plays in an update of ``total`` episodes.

    Ranks get consecutive, disjoint blocks of whole groups of ``group_size`` episodes (a GRPO group
    never spans two ranks), as evenly as possible. Seed rule: play the shard with
    ``collect(..., episodes=len(shard), seed=update_seed + shard.start)``: episode ``j`` of the
    update is reset with ``update_seed + j`` whatever the number of processes (1 process: the
    seeds of today's single-process run), and each rank's sampling is seeded differently.

    Raises:
        ValueError: ``total`` is not a whole number of groups, or there are fewer groups than ranks
            (every rank plays at least one episode: an idle process is a configuration mistake).
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if total % group_size:
        raise ValueError(f"{total} episodes per update is not a whole number of groups of {group_size}")
    groups = total // group_size
    if groups < world_size:
        unit = "episodes" if group_size == 1 else f"groups of {group_size} episodes"
        raise ValueError(f"{groups} {unit} per update cannot be shared by {world_size} processes: "
                         f"each needs at least one (raise episodes_per_update)")
    start = sum(split_evenly(groups, world_size, r) for r in range(rank))
    return range(start * group_size, (start + split_evenly(groups, world_size, rank)) * group_size)


def checksum(parameters: Iterable[torch.Tensor]) -> str:
    """SHA-256 of the parameters' exact bytes, in order (equal on two ranks = identical weights)."""
    import torch

    digest = hashlib.sha256()
    for tensor in parameters:
        data = tensor.detach().contiguous().view(-1)
        digest.update(str((tuple(tensor.shape), data.dtype)).encode())
        digest.update(data.view(torch.uint8).cpu().numpy().tobytes())
    return digest.hexdigest()


def _buckets(sizes: Sequence[int], limit: int) -> list[range]:
    """Consecutive index ranges whose ``sizes`` add up to at most ``limit`` (an item larger than
    ``limit`` gets a range of its own); at least one range, possibly empty."""
    ranges, start, filled = [], 0, 0
    for i, size in enumerate(sizes):
        if i > start and filled + size > limit:
            ranges.append(range(start, i))
            start, filled = i, 0
        filled += size
    ranges.append(range(start, len(sizes)))
    return ranges


@dataclass(frozen=True)
class ProcessContext:
    """Where this process sits in a data-parallel run, and the collectives the trainers call.

    Every collective must be called by every rank, the same number of times, in the same order.
    In a single process (``world_size == 1``) each returns its local input and communicates
    nothing. Make one with :func:`init`.
    """

    rank: int = 0
    """Global index of this process (0 ... world_size - 1)."""
    world_size: int = 1
    """Number of processes in the run."""
    local_rank: int = 0
    """Index of this process on its machine (selects its GPU)."""
    local_world_size: int = 1
    """Number of processes on this machine."""
    device: torch.device | None = None
    """This process's ``torch.device``: ``cuda:<local_rank>`` on a multi-GPU run, else CPU; in a
    single process the default of :func:`textgym.models.load`. Models and collectives go here."""

    @property
    def is_main(self) -> bool:
        """The process that writes files, logs and checkpoints (rank 0)."""
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    # --- gradients and parameters -------------------------------------------------------------

    def average_gradients(self, parameters: Iterable[torch.nn.Parameter], weight: float = 1.0,
                          bucket_bytes: int = BUCKET_BYTES) -> float:
        """Replace each gradient by its ``weight``-weighted mean over the ranks; returns the total weight.

        Call it after the backward passes of a minibatch and before clipping and the optimizer
        step, with the same parameters in the same order on every rank. With ``weight`` = this
        rank's number of decisions and each rank's loss a mean over its own decisions, the result
        is exactly the gradient of the mean loss over all ranks' decisions. A rank without
        decisions passes ``weight=0`` (its gradients, if any, are ignored). A parameter without a
        gradient on some ranks counts as zero there; one without a gradient on every rank keeps
        ``grad=None`` (the optimizer skips it, as it would in one process).

        Args:
            parameters: the parameters being optimised (e.g. every optimizer parameter group's).
            weight: this rank's share of the minibatch (``>= 0``).
            bucket_bytes: at most this many bytes of (fp32) gradients per all-reduce.
        """
        if weight < 0:
            raise ValueError(f"weight must be >= 0, got {weight}")
        params = list(parameters)
        if not self.is_distributed:
            return float(weight)
        import torch
        from accelerate.utils import reduce

        contributes = weight > 0
        # The first bucket leads with the weight and one has-a-gradient flag per parameter.
        header = torch.tensor([float(weight)] + [float(contributes and p.grad is not None) for p in params],
                              dtype=torch.float32, device=self.device)
        total, has_grad = 0.0, [False] * len(params)
        for b, indices in enumerate(_buckets([p.numel() * 4 for p in params], bucket_bytes)):
            parts = [header] if b == 0 else []
            for i in indices:
                grad = params[i].grad
                parts.append(grad.detach().reshape(-1).to(self.device, torch.float32) * weight
                             if contributes and grad is not None
                             else torch.zeros(params[i].numel(), dtype=torch.float32, device=self.device))
            flat = reduce(torch.cat(parts), reduction="sum")
            if b == 0:
                total, has_grad = float(flat[0]), (flat[1:len(header)] > 0).tolist()
                flat = flat[len(header):]
            offset = 0
            for i in indices:
                p = params[i]
                if has_grad[i]:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    p.grad.copy_(flat[offset:offset + p.numel()].view_as(p) / total)
                else:
                    p.grad = None
                offset += p.numel()
        return total

    def broadcast_parameters(self, parameters: Iterable[torch.nn.Parameter], src: int = 0,
                             bucket_bytes: int = BUCKET_BYTES) -> None:
        """Copy rank ``src``'s parameter values into every rank's (before training, after a
        resume): the replicas start identical however their adapters were initialised."""
        params = list(parameters)
        if not self.is_distributed or not params:
            return
        import torch
        from accelerate.utils import broadcast

        for indices in _buckets([p.numel() * 4 for p in params], bucket_bytes):
            bucket = [params[i] for i in indices]
            # fp32 carries bf16/fp16/fp32 values exactly
            flat = broadcast(torch.cat([p.detach().reshape(-1).to(self.device, torch.float32) for p in bucket]),
                             from_process=src)
            offset = 0
            with torch.no_grad():
                for p in bucket:
                    p.copy_(flat[offset:offset + p.numel()].view_as(p))
                    offset += p.numel()

    # --- small records and statistics ---------------------------------------------------------

    def shard(self, total: int) -> range:
        """This rank's consecutive share of ``total`` items (e.g. evaluation episodes, demonstrations),
        as :func:`split_evenly` sizes them; empty when there are fewer items than ranks."""
        start = sum(split_evenly(total, self.world_size, r) for r in range(self.rank))
        return range(start, start + split_evenly(total, self.world_size, self.rank))

    def reduce_sum(self, values: Sequence[float]) -> list[float]:
        """Each value summed over the ranks (one all-reduce of a small vector; the same length on
        every rank): e.g. ``[failed, kl * n, n]`` of a minibatch, agreed by every rank at once."""
        if not self.is_distributed:
            return [float(v) for v in values]
        import torch
        from accelerate.utils import reduce

        flat = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        return reduce(flat, reduction="sum").tolist()

    def concat(self, values: torch.Tensor) -> tuple[torch.Tensor, slice]:
        """Every rank's 1-D ``values``, concatenated in rank order, and this rank's slice of the
        result: batch statistics (advantage normalisation) then see the global batch, exactly as one
        process holding all of it would."""
        if not self.is_distributed:
            return values, slice(0, len(values))
        import torch

        parts = self.gather([values.detach().cpu().tolist()])
        start = sum(len(part) for part in parts[:self.rank])
        merged = torch.tensor([v for part in parts for v in part], dtype=values.dtype, device=values.device)
        return merged, slice(start, start + len(values))

    def gather(self, records: Sequence[T]) -> list[T]:
        """Every rank's ``records`` (picklable, e.g. episode summaries), concatenated in rank order,
        on every rank."""
        if not self.is_distributed:
            return list(records)
        from accelerate.utils import gather_object

        return list(gather_object(list(records)))

    def weighted_mean(self, stats: Mapping[str, float], weight: float) -> dict[str, float]:
        """Each statistic's mean over the ranks, weighted by each rank's ``weight`` (its number of
        decisions): what one process would report for the whole batch. A key only some ranks
        report is averaged over those; if all their weights are 0, the plain mean."""
        if not self.is_distributed:
            return {key: float(value) for key, value in stats.items()}
        reports = self.gather([(float(weight), {k: float(v) for k, v in stats.items()})])
        out: dict[str, float] = {}
        for key in dict.fromkeys(k for _, s in reports for k in s):
            pairs = [(w, s[key]) for w, s in reports if key in s]
            total = sum(w for w, _ in pairs)
            out[key] = (sum(w * v for w, v in pairs) / total if total > 0
                        else sum(v for _, v in pairs) / len(pairs))
        return out

    def broadcast_object(self, obj: T, src: int = 0) -> T:
        """Rank ``src``'s ``obj`` on every rank (e.g. a run folder name chosen by the main process)."""
        if not self.is_distributed:
            return obj
        from accelerate.utils import broadcast_object_list

        return broadcast_object_list([obj], from_process=src)[0]

    # --- control ------------------------------------------------------------------------------

    def agree_to_stop(self, request: bool) -> bool:
        """``True`` on every rank if any rank passes ``True``.

        Call it once per update with this rank's reasons to stop (a Ctrl-C or SIGTERM received, its
        time budget spent, an early-stop rule met: the main process may be the only one asking),
        so all ranks stop after the same update. The same call makes the early exits inside an
        update collective (a minibatch over the KL limit, a non-finite loss): a rank that left the
        loop alone would leave the others waiting in the next all-reduce.
        """
        if not self.is_distributed:
            return bool(request)
        import torch
        from accelerate.utils import reduce

        flag = torch.tensor([1.0 if request else 0.0], device=self.device)
        return bool(reduce(flag, reduction="max").item() > 0)

    def barrier(self) -> None:
        """Wait until every rank gets here (e.g. others wait while the main process writes a checkpoint)."""
        if self.is_distributed:
            import torch.distributed

            torch.distributed.barrier()


_context: ProcessContext | None = None


def init(cpu: bool | None = None, timeout_seconds: float | None = None) -> ProcessContext:
    """This process's context, initialising the process group on the first call when a launcher
    started several processes (later calls return the same context).

    Args:
        cpu: run on CPU (gloo) even if GPUs are present; default: ``ACCELERATE_USE_CPU`` from an
            accelerate config, else CPU only when no GPU is available.
        timeout_seconds: how long a collective waits for the other ranks (a rank slow to finish
            its rollout makes the others wait); default: torch's.

    Raises:
        UnsupportedLaunch: the accelerate config asks for something textgym does not do
            (see :func:`check_launch_config`), or the launcher's layout gave no process group.
    """
    global _context
    if _context is not None:
        return _context
    check_launch_config()
    if not is_launched():
        from textgym import models

        _context = ProcessContext(device=models.default_device())
        return _context

    import torch
    from accelerate import PartialState
    from accelerate.utils import DistributedType

    if cpu is None:
        cpu = _flag(os.environ, "ACCELERATE_USE_CPU") or not torch.cuda.is_available()
    local_world_size = _first_int(os.environ, _LOCAL_WORLD_SIZE_VARS, _launched_world_size(os.environ))
    configure_threads(local_world_size)
    kwargs: dict[str, Any] = {}
    if timeout_seconds is not None:
        import datetime

        kwargs["timeout"] = datetime.timedelta(seconds=timeout_seconds)
    state = PartialState(cpu=cpu, **kwargs)
    if state.distributed_type in (DistributedType.NO, DistributedType.XLA, DistributedType.DEEPSPEED):
        raise UnsupportedLaunch(
            f"launched as {_launched_world_size(os.environ)} processes, but accelerate set up "
            f"{state.distributed_type.value}: textgym needs a torch.distributed process group "
            "(torchrun, `accelerate launch --multi_gpu`, or textgym's --processes)")
    _context = ProcessContext(rank=state.process_index, world_size=state.num_processes,
                              local_rank=state.local_process_index,
                              local_world_size=local_world_size, device=state.device)
    atexit.register(state.destroy_process_group)
    return _context


def exit_process(code: int | str | None = 0) -> NoReturn:
    """End this process with ``code`` (as ``sys.exit`` takes it) once its work is done.

    In a process that joined a process group, the exit handlers (the group's teardown among them)
    run while the interpreter is whole, the output is flushed, and the process ends without
    finalizing the interpreter. Finalizing it with gloo's threads alive can abort a process that
    finished its work: a gloo thread that frees the last collective's tensors late (a starved
    thread on a busy CPU) needs the GIL to drop their Python objects, the finalizing interpreter
    ends that thread instead, and its unwinding through a ``noexcept`` destructor calls
    ``std::terminate`` ("terminate called without an active exception", exit code -6). The
    process group's teardown cannot prevent this: ``destroy_process_group`` only shuts the group
    down, its threads are joined when its last reference goes, and importing
    ``torch.distributed.checkpoint`` (peft does) keeps references to it until the interpreter's
    end (torch 2.13). ``textgym train --processes N`` ends each process this way; a script of
    your own started by ``torchrun`` can end with ``distributed.exit_process(0)``.

    Without a process group this is ``sys.exit(code)``.
    """
    if _context is None or not _context.is_distributed:
        sys.exit(code)
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): the message to stderr, status 1
        print(code, file=sys.stderr)
        status = 1
    import gc

    atexit._run_exitfuncs()
    gc.collect()  # close unreachable files (their buffers flushed) while the interpreter can
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


@contextlib.contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` set, restored afterwards (the elastic launcher adds variables
    to its own process's environment)."""
    saved = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        for key in set(os.environ) - set(saved):
            del os.environ[key]
        os.environ.update(saved)


def launch(command: Sequence[str], processes: int, shutdown_timeout: int = SHUTDOWN_TIMEOUT) -> int:
    """Run ``python <command>`` in ``processes`` local processes; returns their exit code.

    The processes are started by torch's elastic launcher (``torchrun --standalone
    --nproc_per_node <processes> <command>``, run in this process) with ``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK`` and a free rendezvous port set, so :func:`init` in each of them joins one
    process group. Unless ``OMP_NUM_THREADS`` is set, each gets ``cores // processes`` threads.
    A SIGINT or SIGTERM sent to this process (Ctrl-C) is forwarded to every worker, which then has
    ``shutdown_timeout`` seconds to finish its update and save before being killed; a second one is
    forwarded as SIGTERM.

    Args:
        command: what follows ``python``: ``["-m", "textgym.cli", "train", ...]`` or
            ``["script.py", "--flag"]``.
        processes: how many processes (>= 1).
        shutdown_timeout: see above.

    Returns:
        0 if every process exited with 0; else the exit code of the lowest rank that failed
        (``128 + N`` for one killed by signal N; not the ranks the launcher itself then stopped),
        or ``128 + N`` when this launcher was stopped by signal N.
    """
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    if not command:
        raise ValueError("launch() needs a command: a script path or -m module, and its arguments")
    if is_launched():
        raise RuntimeError("launch() was called inside a launched process (RANK/WORLD_SIZE are set): "
                           "run the command directly")
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    args = get_args_parser().parse_args(
        ["--standalone", "--nproc_per_node", str(processes), "--shutdown-timeout", str(shutdown_timeout),
         *command])
    env = {} if "OMP_NUM_THREADS" in os.environ else {
        "OMP_NUM_THREADS": str(max(1, _available_cores() // processes))}
    handled = (signal.SIGINT, signal.SIGTERM)
    handlers = {sig: signal.getsignal(sig) for sig in handled}
    sys.stdout.flush()
    try:
        with _environ(env):
            run(args)  # the elastic agent installs its own SIGINT/SIGTERM handlers: it forwards them
        return 0
    except ChildFailedError as failed:
        # Once one process fails the agent stops the others with SIGTERM: those are not the cause.
        causes = {rank: failure for rank, failure in failed.failures.items()
                  if failure.exitcode != -signal.SIGTERM} or failed.failures
        code = causes[min(causes)].exitcode
        return 128 - code if code < 0 else code
    except SignalException as stopped:
        return 128 + int(stopped.sigval)
    finally:
        for sig, handler in handlers.items():
            if handler is not None:
                signal.signal(sig, handler)
