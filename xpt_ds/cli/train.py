"""Entry point: ``python -m xpt_ds.cli.train --config FILE [--section.key=value ...] [--resume TAG]``.

Runs unchanged under ``deepspeed --module xpt_ds.cli.train``, ``torchrun -m xpt_ds.cli.train`` and
``srun python -m xpt_ds.cli.train`` (a single process without a launcher is a world of one).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from xpt_ds.config import help_text, load_config
from xpt_ds.errors import ArgumentParser, INTERRUPTED_EXIT_CODE, UserError, cli_errors, error_line, error_lines, say
from xpt_ds.metrics.run_log import finished_line, library_output_to_stderr, setup_logging
from xpt_ds.runtime import collector, rank_say
from xpt_ds.runtime.host_memory import hold_less_heap
from xpt_ds.runtime.open_files import exhausted_line, quiet_when_out, raise_soft_limit, ran_out, say_raised
from xpt_ds.runtime.preemption import PREEMPTED_EXIT_CODE, Preempted, interrupts_deferred, record_stops, release_stops
from xpt_ds.runtime.process_exit import exit_process
from xpt_ds.runtime.ports import free_port
from xpt_ds.runtime.rank_say import say_once


def parse_args(argv: list[str]):
    parser = ArgumentParser(prog="xpt-ds train", formatter_class=argparse.RawTextHelpFormatter,
                                     epilog="overrides (defaults shown):\n" + help_text())
    parser.add_argument("--config", help="YAML or JSON run config")
    parser.add_argument("--resume", help="checkpoint tag to resume from, 'best' or 'none' (default: newest complete "
                        "one)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config (what "
                        "RUN_DIR/config.yaml will hold: every key) as YAML, checked as far as a config alone can be, "
                        "and exit. Without a runnable config (even without --config), a config to start from: the "
                        "required keys say what to write there, the method's phases are written out, and a line on "
                        "stderr names what to fill in")
    parser.add_argument("--memory-plan", type=int, nargs="+", metavar="RANKS", help="print each phase's model states "
                        "a rank (weights, gradients, optimizer state; before activations) on RANKS ranks, one line "
                        "for each number given, and exit: the run's start-up check, from the config, the source's "
                        "config.json and file headers, on a machine without GPUs (a login node)")
    parser.add_argument("--local_rank", "--local-rank", type=int, help=argparse.SUPPRESS)  # set by `deepspeed`
    args, overrides = parser.parse_known_args(argv)
    if args.resume:
        overrides.append(f"--checkpoint.resume={args.resume}")
    return args, overrides


def _single_process_env() -> None:
    """A plain ``python -m xpt_ds.cli.train`` (no ``WORLD_SIZE``) is a world of one, inside a Slurm job too: give
    torch.distributed what it needs (DeepSpeed would otherwise look for MPI). Under ``srun`` with ``WORLD_SIZE``
    exported, the rank and local rank srun gives each task (``SLURM_PROCID``, ``SLURM_LOCALID``) fill in
    ``RANK`` and ``LOCAL_RANK`` where they are not set."""
    if "WORLD_SIZE" not in os.environ:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
        if "MASTER_PORT" not in os.environ:  # concurrent single-process runs must not collide
            os.environ["MASTER_PORT"] = str(free_port())
        return
    for name, slurm in (("RANK", "SLURM_PROCID"), ("LOCAL_RANK", "SLURM_LOCALID")):
        if name not in os.environ and slurm in os.environ:
            os.environ[name] = os.environ[slurm]


def print_config(path: str | None, overrides: list[str]) -> int:
    """The resolved, checked config as YAML; a template (xpt_ds.config.template) when required keys are empty,
    whose engine on a machine without CUDA is the CPU one unless the config or the command line names one."""
    from xpt_ds.config.manager import config_yaml, load_unchecked
    from xpt_ds.config.template import as_template, engine_named, template_note, template_yaml
    cfg, filled = as_template(load_unchecked(path, overrides))
    if not filled:
        sys.stdout.write(config_yaml(cfg))
        return 0
    sys.stdout.write(template_yaml(cfg, engine_named(path, overrides)))
    say(template_note(filled))
    return 0


def memory_plan(cfg, worlds: list[int]) -> int:
    """``--memory-plan``: the memory plan's line for each world size, on stdout."""
    from xpt_ds.training.memory_plan import config_plan_lines
    if min(worlds) < 1:
        raise UserError(f"--memory-plan takes rank counts of 1 or more, got {min(worlds)}")
    print("\n".join(config_plan_lines(cfg, worlds)))
    return 0


@cli_errors
def main(argv: list[str] | None = None) -> int:
    record_stops()  # a SIGTERM or SIGUSR1 from here on is recorded until the trainer watches for it: not fatal
    try:
        return _main(argv)
    finally:
        release_stops()


def _main(argv: list[str] | None) -> int:
    args, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    rank_say.forget()
    try:
        if args.print_config:
            return print_config(args.config, overrides)
        cfg = load_config(args.config, overrides)
        if args.memory_plan:
            return memory_plan(cfg, args.memory_plan)
    except UserError as e:  # every rank reads the same config: its lines once per machine
        say_once(error_lines(e))
        return 2
    with library_output_to_stderr():  # a run's every line is on stderr (xpt_ds.metrics.run_log)
        return _run(cfg)


def _run(cfg) -> int:
    _single_process_env()
    hold_less_heap()  # before a tensor is made: glibc keeps freed heap pages below its mmap threshold
    raised = raise_soft_limit()  # ulimit -n up to the hard limit, before any DataLoader worker forks
    quiet_when_out()
    with collector.importing():  # no collector passes over the imports, frozen after (xpt_ds.runtime.collector)
        import deepspeed

        from xpt_ds.checkpoint.tags import bad_resume
        from xpt_ds.runtime.distributed import init_distributed, lost_peer, lost_peer_line
        from xpt_ds.runtime.run_lock import claim_run
        from xpt_ds.training.build import build_trainer
        from xpt_ds.training.guards import HALTED_EXIT_CODE, Halted

    if (line := bad_resume(cfg)) is not None:  # a mistyped --resume: before the run directory is locked or written
        say_once(f"error: {line}")
        return 2
    fresh = not Path(cfg.run_dir).exists()  # before any rank can make it: init_distributed waits for them all
    # guard.collective_timeout_s; and unlink DeepSpeed's CPU shared-memory buffer names (xpt_ds.runtime.distributed)
    init_distributed(cfg.guard.collective_timeout_s)
    setup_logging(deepspeed.comm.get_rank() == 0)
    if deepspeed.comm.get_rank() == 0:
        say_raised(raised)
    lock, problem = claim_run(cfg, fresh)  # lock: held until this process ends
    if problem is not None:  # another job's run directory, or other configs on other nodes: nothing touched
        say_once(f"error: {problem}")
        deepspeed.comm.destroy_process_group()
        return 2
    trainer, end = None, None  # end: the line every rank says and the exit status, once closed
    with contextlib.ExitStack() as shutdown:
        try:
            with collector.paused():  # nor over the build, which stays collectable
                trainer = build_trainer(cfg)
            end = _stopped_before_training(trainer)
            if end is None:
                trainer.train()
        except (UserError, OSError) as e:  # OSError: a file outside the checks
            line = exhausted_line(cfg.data.num_workers) if ran_out(e) else error_line(e)
            _failed(trainer, cfg, line, fresh)
            end = f"error: {line}", 2
        except Halted as e:
            end = f"error: {e}", HALTED_EXIT_CODE
        except RuntimeError as e:  # a collective whose peer is gone: one line and status.json, not a traceback
            if ran_out(e):  # out of file descriptors: torch's DataLoader says so in a RuntimeError of its own
                line = exhausted_line(cfg.data.num_workers)
            elif lost_peer(e):
                line = lost_peer_line(e, trainer.last_saved if trainer is not None else None)
            else:  # (a host allocation that failed, ...): status.json 'failed', and the traceback
                _failed(trainer, cfg, _crash_line(e), fresh)
                raise
            _failed(trainer, cfg, line, fresh)
            end = f"error: {line}", 2
        except Preempted as e:
            if trainer.interrupted:  # a Ctrl-C on any rank: every rank says so
                end = (f"interrupted: checkpoint {e} is complete; the same command resumes from it",
                       INTERRUPTED_EXIT_CODE)
            else:
                end = (f"preempted: checkpoint {e} is complete; exiting with {PREEMPTED_EXIT_CODE} so the job is "
                       "requeued (by hand: the same command resumes from it)", PREEMPTED_EXIT_CODE)
        except KeyboardInterrupt:  # a Ctrl-C before the trainer watches for it, or a second one
            _failed(trainer, cfg, "stopped at once by Ctrl-C, without a checkpoint", fresh, state="interrupted")
            newest = f" ({trainer.last_saved})" if trainer is not None and trainer.last_saved else ""
            end = ("interrupted: stopped at once, without a checkpoint; the same command resumes from the newest "
                   f"complete checkpoint{newest}", INTERRUPTED_EXIT_CODE)
        except Exception as e:  # a bug, or a failure nothing above expects: status.json 'failed', the traceback
            _failed(trainer, cfg, _crash_line(e), fresh)
            raise
        finally:  # from here a Ctrl-C waits (counted, not raised): the workers end, the lock goes, the ending stands
            shutdown.enter_context(interrupts_deferred())
            if trainer is not None:
                trainer.close()
            if deepspeed.comm.is_initialized():
                deepspeed.comm.destroy_process_group()
        if end is None:
            if trainer.rank == 0:
                names = [p.name for p in cfg.phases]
                say(finished_line(cfg.run_dir, trainer.state.global_step, sum(p.steps for p in cfg.phases),
                                  [names[i] for i in trainer.state.time_stopped], cfg.checkpoint.keep_best))
            return 0
        say_once(end[0])  # once per machine where the ranks say the same (xpt_ds.runtime.rank_say)
        return end[1]


def _stopped_before_training(trainer) -> tuple[str, int] | None:
    """A stop any rank was asked for before training started (a SIGTERM or SIGUSR1 since the top of ``main``, or a
    Ctrl-C once the trainer watched for it): every rank ends here (one host exchange, so they agree), with nothing
    to save, as preempted (124: the job is requeued) or interrupted (130). None: train."""
    level = float(trainer.guards.exchange.gather([trainer.preemption.level])[:, 0].max())
    if level == 0:
        return None
    interrupted = level >= 2
    trainer.write_status("interrupted" if interrupted else "preempted")
    again = f"resumes from checkpoint {trainer.last_saved}" if trainer.last_saved else "starts the run"
    if interrupted:
        return (f"interrupted: stopped before training started, nothing to save; the same command {again}",
                INTERRUPTED_EXIT_CODE)
    return (f"preempted: stopped before training started, nothing to save; exiting with {PREEMPTED_EXIT_CODE} so the "
            f"job is requeued (by hand: the same command {again})", PREEMPTED_EXIT_CODE)


def _crash_line(e: BaseException) -> str:
    """status.json's error for an unexpected exception: its type and the first line of its message."""
    said = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {said}" if said else type(e).__name__


def _failed(trainer, cfg, line: str, fresh: bool, state: str = "failed") -> None:
    """status.json says the run failed (it said 'running', or a previous attempt's state, until now): the
    trainer's full status once it is set up, else (it failed while being built or resumed) rank 0 updates the
    old file's state and error, keeping the steps and checkpoint it names. A run directory this attempt made
    (``fresh``) and left nothing in is removed instead: a config or data error leaves no run behind."""
    import deepspeed

    from xpt_ds.runtime.status import mark_stopped, remove_unstarted
    try:
        if trainer is not None and trainer.engine is not None:  # set up: its own step and checkpoint
            trainer.write_status(state, error=line)
        elif deepspeed.comm.get_rank() == 0 and not (fresh and remove_unstarted(Path(cfg.run_dir))):
            mark_stopped(Path(cfg.run_dir), state, line)
    except OSError:
        pass  # the run directory itself may be what failed


if __name__ == "__main__":
    exit_process(main())
