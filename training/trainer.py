"""The training loop shared by all stages: run dir, seeding, checkpoints, resume, logs, samples, DDP.

Run dir of one stage (``RUN/STAGE/``)::

    config.json                 resolved TrainConfig (read back by --resume)
    log.jsonl                   one JSON object per log interval (step, losses, s/it)
    samples/step_0000100.png    sample grids (rows: inputs and outputs of the stage)
    checkpoints/state_0000500.pt   full training state (torch.save of tensors + primitives only;
                                   loaded with weights_only=True): G, G_ema, D, optimizers, RNG, step
    checkpoints/latest.txt      name of the newest state file
    generator.safetensors       newest generator (EMA if kept) in streamdeid.models.io format

Exact resume: every step re-seeds torch from (seed, step, rank) and draws its
batch from a permutation that is a function of (seed, epoch); optimizer,
Lookahead, EMA and discriminator states are restored; so the step after a
resume computes the same losses as the uninterrupted run.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import torch

from streamdeid.models.dbaf import DBAF
from streamdeid.models.io import save_checkpoint
from streamdeid.models.stylegan2 import Discriminator

from .config import TrainConfig
from .data import FaceSet
from .optim import build_optimizer

STATE_FORMAT = "streamdeid.training.state"
STATE_VERSION = 1


# ---------------------------------------------------------------- distributed
class Dist:
    """torchrun / WORLD_SIZE > 1: torch.distributed process group; gradients all-reduced explicitly
    (the stages call the generator's pieces, not one forward(), so the DDP wrapper's hooks would not fire)."""

    def __init__(self, device_pref: str = "auto"):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        use_cuda = torch.cuda.is_available() and device_pref in ("auto", "cuda")
        if device_pref == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("--device cuda asked for, but torch sees no GPU")
        self.device = torch.device(f"cuda:{self.local_rank}" if use_cuda else "cpu")
        if use_cuda:
            torch.cuda.set_device(self.device)
            # Fixed input shapes every step: let cuDNN pick its fastest kernels, and use TF32 matrix
            # units (about 1e-3 relative error, far below the noise of GAN training).
            torch.backends.cudnn.benchmark = True
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        if self.world > 1 and not torch.distributed.is_initialized():
            torch.distributed.init_process_group(backend="nccl" if use_cuda else "gloo")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def allreduce_grads(self, params: list[torch.nn.Parameter]) -> None:
        if self.world == 1:
            return
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        torch.distributed.all_reduce(flat)
        flat /= self.world
        offset = 0
        for g in grads:
            n = g.numel()
            g.copy_(flat[offset:offset + n].view_as(g))
            offset += n



class StopOnSignal:
    """Ctrl-C or SIGTERM during a one-process run: finish the step, write a checkpoint, stop (``requested``).
    A second signal stops at once. Several processes (torchrun) keep the default handling: their ranks
    must stop at one step, which a signal seen at different moments does not give."""

    def __init__(self, active: bool, log) -> None:
        self.active = active and threading.current_thread() is threading.main_thread()
        self.requested = False
        self._log = log
        self._old: dict[int, object] = {}

    def __enter__(self) -> StopOnSignal:
        if self.active:
            for sig in (signal.SIGINT, signal.SIGTERM):
                if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup, a background job: left as they are
                    self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self._log(f"{signal.Signals(signum).name}: stopping after this step with a checkpoint (again to stop now)")

def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def step_seed(seed: int, step: int, rank: int) -> int:
    return int(np.random.SeedSequence([seed, step, rank]).generate_state(1, dtype=np.uint64)[0] >> 1)


def to_image_grid(rows: list[torch.Tensor], max_cols: int = 8) -> np.ndarray:
    """Rows of [B, 3, R, R] in [-1, 1] -> uint8 BGR grid [rows * R, cols * R, 3]."""
    rows = [r[:max_cols].detach().float().cpu().clamp(-1, 1) for r in rows]
    cols = min(r.shape[0] for r in rows)
    grid = torch.cat([torch.cat(list(r[:cols]), dim=2) for r in rows], dim=1)  # [3, H, W]
    img = ((grid + 1) * 127.5).round().byte().permute(1, 2, 0).numpy()
    return np.ascontiguousarray(img[:, :, ::-1])


def latest_state(stage_dir: Path) -> Path | None:
    marker = stage_dir / "checkpoints" / "latest.txt"
    if marker.is_file():
        p = stage_dir / "checkpoints" / marker.read_text().strip()
        if p.is_file():
            return p
    states = sorted((stage_dir / "checkpoints").glob("state_*.pt"))
    return states[-1] if states else None


def load_state(path: Path) -> dict:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, EOFError, RuntimeError, ValueError):  # (a missing file stays an OSError)
        raise ValueError(f"{path} is not a {STATE_FORMAT} checkpoint (torch cannot read it)") from None
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT \
            or int(state.get("version", -1)) != STATE_VERSION:
        raise ValueError(f"{path} is not a {STATE_FORMAT} v{STATE_VERSION} file")
    return state


class Trainer:
    """Base class; a stage sets ``name``, ``uses_disc`` and implements ``train_step`` and ``sample_rows``."""

    name = "base"
    uses_disc = True
    uses_sface = True

    def __init__(self, cfg: TrainConfig, run_root: str | Path, data_dir: str | Path, *, init: str | None = None,
                 log=print):
        self.cfg, self.st = cfg, cfg.stages[self.name]
        self.run_root = Path(run_root)
        self.dir = self.run_root / self.name
        self.log = log
        self.interrupted = False  # the last run() ended on Ctrl-C or SIGTERM (after a checkpoint)
        self.dist = Dist(cfg.device)
        self.device = self.dist.device
        if cfg.threads > 0:
            torch.set_num_threads(cfg.threads)
        torch.manual_seed(cfg.seed)  # identical initial weights on every rank
        self.mcfg = cfg.dbaf
        self.G = DBAF(self.mcfg).to(self.device)
        self.D = Discriminator(self.mcfg).to(self.device) if self.uses_disc else None
        self.data = FaceSet(data_dir, cfg.resolution, rank=self.dist.rank, world=self.dist.world).to(self.device)
        if cfg.channels_last:  # NHWC: the layout cuDNN's tensor-core convolutions read without a transpose
            self.G.to(memory_format=torch.channels_last)
            if self.D is not None:
                self.D.to(memory_format=torch.channels_last)
        self.init_source = init
        if init and init != "none":
            self._load_init(Path(init))
        self.G_ema = copy.deepcopy(self.G).eval() if self.st.ema_decay > 0 else None
        self.g_params = self._select_trainable()
        self.opt_g = build_optimizer(self.g_params, self.st.g_optim)
        self.opt_d = None
        if self.D is not None:
            ratio = self.st.r1_every / (self.st.r1_every + 1)  # lazy-regularisation correction (StyleGAN2)
            self.opt_d = build_optimizer(self.D.parameters(), self.st.d_optim, lr_scale=ratio)
        self.step = 0
        self.elapsed = 0.0
        self.setup()

    # --------------------------------------------------------------- hooks
    def setup(self) -> None:
        """Stage-specific modules (losses); runs after weights are loaded."""

    def train_step(self, x: torch.Tensor, step: int) -> dict[str, float]:
        raise NotImplementedError

    def sample_rows(self, x: torch.Tensor) -> list[torch.Tensor]:
        raise NotImplementedError

    # ------------------------------------------------------------ weights
    def _select_trainable(self) -> list[torch.nn.Parameter]:
        prefixes = self.st.train
        params = []
        for n, p in self.G.named_parameters():
            on = any(n.startswith(pre) for pre in prefixes)
            p.requires_grad_(on)
            if on:
                params.append(p)
        if not params:
            raise ValueError(f"stage {self.name}: train prefixes {prefixes} select no generator parameter")
        return params

    def _load_init(self, path: Path) -> None:
        """Previous stage's weights: a stage dir, a state .pt or a generator .safetensors."""
        if path.is_dir():
            st = latest_state(path)
            if st is None:
                raise FileNotFoundError(f"--init {path}: no checkpoint in {path / 'checkpoints'}")
            path = st
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            from streamdeid.models.io import check_state_dict, read_checkpoint_header

            header = read_checkpoint_header(path)
            saved = self._check_init_config(path, header["model_args"])
            sd = load_file(str(path))
            check_state_dict(self.G.state_dict(), sd)
            self.G.load_state_dict(sd)
        else:
            state = load_state(path)
            saved = self._check_init_config(path, json.loads(state["model_args"]))
            self.G.load_state_dict(state["g_ema"] if state.get("g_ema") else state["g"])
            if self.D is not None and state.get("d"):
                self.D.load_state_dict(state["d"])
        if self.mcfg.kria_reflect and not saved.kria_reflect:
            self._start_reflection()
        elif self.mcfg.kria_residual and not saved.kria_residual:
            # the earlier stages never train KRIA: start it as the identity, not from their random weights
            for blk in self.G.kria.blocks:  # (G_ema is copied from G after this)
                blk.reset_residual()
            self.log(f"{self.name}: KRIA switched to the residual form, starting as the identity")
        self.log(f"{self.name}: initialised from {path}")

    @torch.no_grad()
    def _start_reflection(self, n: int = 256) -> None:
        """The earlier form's KRIA means something else in the reflection form (DBAFConfig.kria_reflect):
        start every key's centre c(P) at the mean identity of ``n`` training crops, per level, so that
        I' = 2 mean - I is the face's opposite across the average face, not the decoder's -I."""
        x = self.data.batch(np.arange(min(n, len(self.data))))
        idents = torch.cat([self.G.disentangle(self.G.encode(chunk)[0])[1] for chunk in x.split(64)])
        for blk, level in zip(self.G.kria.blocks, self.G.split_levels(idents)):  # level [N, n_l, D]
            blk.reset_residual()
            blk.net[-1].bias.copy_(level.mean(dim=(0, 1)) / blk.net[-1].lr_mul)
        self.log(f"{self.name}: KRIA switched to the reflection form, centred on the mean identity of {len(x)} crops")

    def _check_init_config(self, path: Path, saved_args: dict):
        """The init checkpoint's DBAFConfig; it must equal this run's except in shape-neutral fields."""
        from streamdeid.models.config import DBAFConfig

        saved = DBAFConfig.from_dict(saved_args)
        a, b = saved.to_dict(), self.mcfg.to_dict()
        for k in DBAFConfig.SHAPE_NEUTRAL:
            a.pop(k), b.pop(k)
        if a != b:
            raise ValueError(f"--init {path}: model config differs from this run's")
        return saved

    # ---------------------------------------------------------- checkpoint
    def state_dict(self) -> dict:
        return {
            "format": STATE_FORMAT, "version": STATE_VERSION, "stage": self.name, "step": self.step,
            "elapsed": self.elapsed, "config": self.cfg.to_json(), "model_args": json.dumps(self.mcfg.to_dict()),
            "g": self.G.state_dict(), "g_ema": self.G_ema.state_dict() if self.G_ema is not None else {},
            "d": self.D.state_dict() if self.D is not None else {},
            "opt_g": self.opt_g.state_dict(), "opt_d": self.opt_d.state_dict() if self.opt_d is not None else {},
            "rng_torch": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "rng_numpy": torch.from_numpy(np.random.get_state()[1].astype(np.int64)),
        }

    def load_state_dict(self, state: dict) -> None:
        if state["stage"] != self.name:
            raise ValueError(f"checkpoint is of stage {state['stage']!r}, not {self.name!r}")
        self.G.load_state_dict(state["g"])
        if self.G_ema is not None:
            self.G_ema.load_state_dict(state["g_ema"])
        if self.D is not None:
            self.D.load_state_dict(state["d"])
            self.opt_d.load_state_dict(state["opt_d"])
        self.opt_g.load_state_dict(state["opt_g"])
        torch.set_rng_state(state["rng_torch"])
        if torch.cuda.is_available() and state["rng_cuda"]:
            torch.cuda.set_rng_state_all(state["rng_cuda"])
        np.random.set_state(("MT19937", state["rng_numpy"].numpy().astype(np.uint32), 624, 0, 0.0))
        self.step = int(state["step"])
        self.elapsed = float(state["elapsed"])

    def save(self) -> Path:
        ck = self.dir / "checkpoints"
        ck.mkdir(parents=True, exist_ok=True)
        path = ck / f"state_{self.step:07d}.pt"
        tmp = path.with_suffix(".tmp")
        torch.save(self.state_dict(), tmp)
        os.replace(tmp, path)
        (ck / "latest.tmp").write_text(path.name)
        os.replace(ck / "latest.tmp", ck / "latest.txt")
        gen = self.G_ema if self.G_ema is not None else self.G
        tmp = self.dir / "generator.tmp"
        save_checkpoint(tmp, gen, training_commit=git_commit(), extra={"stage": self.name, "step": self.step})
        os.replace(tmp, self.dir / "generator.safetensors")
        for old in sorted(ck.glob("state_*.pt"))[:-max(self.cfg.keep_checkpoints, 1)]:
            old.unlink()
        return path

    def resume(self) -> bool:
        path = latest_state(self.dir)
        if path is None:
            return False
        self.load_state_dict(load_state(path))
        log = self.dir / "log.jsonl"
        if self.dist.main and log.is_file():  # drop records of steps the checkpoint does not contain
            lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
            kept = [ln for ln in lines if json.loads(ln).get("step", 0) <= self.step]
            log.write_text("".join(kept) + json.dumps({"event": "resume", "step": self.step, "time": time.time(),
                                                       "from": path.name}) + "\n", encoding="utf-8")
        self.log(f"{self.name}: resumed from {path} at step {self.step}")
        return True

    # ----------------------------------------------------------------- EMA
    @torch.no_grad()
    def update_ema(self) -> None:
        if self.G_ema is None:
            return
        # StyleGAN2-ADA's EMA ramp-up: the averaging window grows as ~5 % of the steps taken, so the
        # random initial weights do not linger in short CPU runs (0.999^3000 would still be 5 %).
        d = min(self.st.ema_decay, 1.0 - 1.0 / (1.0 + 0.05 * (self.step + 1)))
        pairs = [(pe, p) for pe, p in zip(self.G_ema.parameters(), self.G.parameters()) if p.requires_grad]
        if pairs:  # one fused call, not one lerp per tensor (~400 kernel launches a step on a GPU)
            torch._foreach_lerp_([pe for pe, _ in pairs], [p for _, p in pairs], 1.0 - d)
        for be, b in zip(self.G_ema.buffers(), self.G.buffers()):
            be.copy_(b)

    # ------------------------------------------------------------ helpers
    def gen_step(self, loss: torch.Tensor) -> None:
        self.opt_g.zero_grad(set_to_none=True)
        loss.backward()
        self.dist.allreduce_grads(self.g_params)
        self.opt_g.step()

    def disc_step(self, loss: torch.Tensor) -> None:
        self.opt_d.zero_grad(set_to_none=True)
        loss.backward()
        self.dist.allreduce_grads(list(self.D.parameters()))
        self.opt_d.step()

    def requires_grad_d(self, on: bool) -> None:
        if self.D is not None:
            for p in self.D.parameters():
                p.requires_grad_(on)

    # ---------------------------------------------------------------- loop
    def write_config(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "config.json").write_text(self.cfg.to_json(), encoding="utf-8")

    def _log_line(self, record: dict) -> None:
        with open(self.dir / "log.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")

    def fixed_batch(self) -> torch.Tensor:
        n = min(8, len(self.data))
        return self.data.batch(np.arange(n))

    def autocast(self):
        """bf16 autocast of the step where the config asks (``amp``); parameters, optimizer state and
        the loss sums stay fp32."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cfg.amp == "bf16")

    def _flush(self, pending: list[tuple[int, dict]]) -> list[dict]:
        """Per-step loss tensors -> float records, in one device-to-host copy for all of them.

        The steps keep their losses on the device: a ``float()`` per loss and step would make the
        host wait for the GPU every step, and the launch queue would run dry."""
        if not pending:
            return []
        names = [list(d) for _, d in pending]
        flat = torch.stack([v.detach().float().reshape(()) for _, d in pending for v in d.values()]).tolist()
        records, i = [], 0
        for (step, _), keys in zip(pending, names):
            records.append({"step": step, **dict(zip(keys, flat[i:i + len(keys)]))})
            i += len(keys)
        for rec in records:
            if not all(np.isfinite(v) for k, v in rec.items() if k != "step"):
                raise FloatingPointError(f"{self.name}: non-finite loss at step {rec['step']}: {rec}")
        return records

    @torch.no_grad()
    def write_samples(self) -> None:
        rows = self.sample_rows(self.fixed_batch())
        import cv2

        out = self.dir / "samples"
        out.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(out / f"step_{self.step:07d}.png"), to_image_grid(rows))

    def run(self, total_steps: int | None = None, *, stop_after: int | None = None,
            minutes: float | None = None) -> list[dict]:
        """Train until ``total_steps`` (default: the stage's ``steps``); ``stop_after`` ends early
        after that many steps of this call (tests, timing); ``minutes`` ends early once this call has
        trained that long, with a checkpoint and samples (a time-boxed run on a lent GPU).
        Ctrl-C or SIGTERM ends early too, with a checkpoint (``interrupted``). Returns the per-step loss records."""
        total = self.st.steps if total_steps is None else total_steps
        deadline = time.time() + 60 * minutes if minutes else None
        if self.dist.main:
            self.write_config()
            self._log_line({"event": "start", "step": self.step, "total": total, "time": time.time(),
                            "world": self.dist.world, "device": str(self.device), "init": self.init_source,
                            "threads": torch.get_num_threads()})
        self.G.train()
        if self.D is not None:
            self.D.train()
        with StopOnSignal(self.dist.world == 1, self.log) as stop:
            records, timed_out = self._steps(total, stop_after, deadline, stop)
        if self.dist.main and self.interrupted:
            self._log_line({"event": "interrupted", "step": self.step, "time": time.time()})
        elif self.dist.main and timed_out:
            self._log_line({"event": "time budget", "step": self.step, "minutes": minutes, "time": time.time()})
        if self.dist.main and (self.step == total or timed_out) and not self.interrupted and records:
            self.write_samples()
        return records

    def _steps(self, total: int, stop_after: int | None, deadline: float | None, stop: StopOnSignal
               ) -> tuple[list[dict], bool]:
        """The training loop of ``run``: steps until ``total``, ``stop_after`` steps, the deadline or a signal.
        Returns the loss records and whether the deadline (or a signal) ended it."""
        cfg = self.cfg
        records, pending, t_window, t_last_ckpt, done, in_window = [], [], time.time(), time.time(), 0, 0
        t_run, elapsed0 = time.time(), self.elapsed
        timed_out = False
        while self.step < total and (stop_after is None or done < stop_after) and not timed_out:
            step = self.step
            torch.manual_seed(step_seed(cfg.seed, step, self.dist.rank))
            x = self.data.step_batch(cfg.seed, step, cfg.batch, cfg.augment.hflip_data)
            if cfg.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with self.autocast():
                losses = self.train_step(x, step)
            self.update_ema()
            self.step += 1
            done += 1
            self.elapsed = elapsed0 + time.time() - t_run  # wall time: a GPU runs behind the host's launches
            pending.append((self.step, losses))
            in_window += 1
            self.interrupted = stop.requested
            timed_out = (deadline is not None and time.time() >= deadline) or self.interrupted
            ends = self.step == total or timed_out or (stop_after is not None and done >= stop_after)
            if self.step % cfg.log_every == 0 or ends:
                flushed = self._flush(pending)  # waits for the GPU: the window's wall time is real
                records += flushed
                if self.dist.main:
                    now = time.time()
                    self._log_line({**flushed[-1], "s_per_it": (now - t_window) / in_window, "time": now,
                                    "elapsed_h": self.elapsed / 3600})
                    t_window, in_window = now, 0
                pending = []
            if self.dist.main and cfg.sample_every and self.step % cfg.sample_every == 0:
                self.write_samples()
            due = (self.step % cfg.ckpt_every == 0 or time.time() - t_last_ckpt > 60 * cfg.ckpt_minutes
                   or self.step == total or timed_out)
            if self.dist.main and due:
                records += self._flush(pending)  # a checkpoint holds only steps known to be finite
                pending = []
                self.save()
                t_last_ckpt = time.time()
        return records, timed_out
