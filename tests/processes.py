"""Starting the trainer and other entry points the way the tests need them: as one forked child of the test
process (``run_main``, ``start_main``), or as ranks of a real launcher, torchrun or deepspeed (``launch``,
``start``), on free ports (``free_port``); and finding a launched job's rank processes (``rank_pids``).
conftest.py imports these, so tests take them from there as from here."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]


PORTS: set[int] = set()  # every port free_port handed out in this worker: no_shm_left checks them
STARTED: list = []  # every job start() or start_main() began in this worker: conftest kills what a test leaves


def free_port() -> int:
    """A port nothing listens on now, outside the ephemeral range: tests run in parallel (pytest-xdist), so none
    uses a fixed one, and the other worker's jobs take ephemeral ports all the time (xpt_ds.runtime.ports)."""
    from xpt_ds.runtime.ports import free_port as pick
    port = pick()
    PORTS.add(port)
    return port


def _command(args: list[str], nproc: int, env: dict | None, launcher: str = "torchrun") -> tuple[list[str], dict]:
    # TORCHDYNAMO_DISABLE: DeepSpeed imports a torch.compile-decorated optimizer, which would pull in the
    # compiler at every start (~1 CPU-s per rank); the trainer compiles nothing.
    full_env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1",
                "TORCHDYNAMO_DISABLE": "1", **(env or {})}
    if nproc == 1:
        return [sys.executable, "-m", "xpt_ds.cli.train", *args], full_env
    port = str(free_port())
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_port", port,
                "-m", "xpt_ds.cli.train", *args], full_env
    assert launcher == "deepspeed", launcher
    return [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", str(nproc), "--master_port", port,
            "--module", "xpt_ds.cli.train", *args], full_env


def launch(args: list[str], nproc: int = 1, timeout: int = 600, env: dict | None = None,
           launcher: str = "torchrun") -> subprocess.CompletedProcess:
    """Run ``xpt_ds.cli.train ARGS`` as one process (``run_main``), or ``nproc`` ranks through a real launcher.

    torchrun by default: one launcher process instead of the deepspeed launcher's two (runner, then launch.py),
    about 5 s less per run on the 2-core CI machine, and the same ranks computing the same bits. A test that
    checks the exit code of a failed run (torchrun reports any failure as 1) or signals the job uses
    ``launcher="deepspeed"``, which returns the ranks' own code; both launchers are covered (test_faults,
    test_launch, test_slurm)."""
    if nproc == 1:
        return run_main("xpt_ds.cli.train", args, env, timeout)
    for _ in range(3):
        done = _launch_once(args, nproc, timeout, env, launcher)
        if not _store_port_taken(done.stderr):
            return done
    return done


def _store_port_taken(err: str) -> bool:
    """torchrun's agent could not listen on the port ``free_port`` checked a moment before (another worker's
    process took it between the check and the listen): it failed before starting any rank, so nothing of the run
    was written and the same command can run again on a new port."""
    return "static_tcp_rendezvous" in err and "EADDRINUSE" in err


def _launch_once(args: list[str], nproc: int, timeout: int, env: dict | None,
                 launcher: str) -> subprocess.CompletedProcess:
    cmd, full_env = _command(args, nproc, env, launcher)
    # PYTHONFAULTHANDLER: a rank given SIGABRT (a job still running at the timeout, ``_stacks_then_kill``) prints
    # every thread's Python stack before it dies
    proc = subprocess.Popen(cmd, cwd=REPO, env={**full_env, "PYTHONFAULTHANDLER": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        err = _stacks_then_kill(proc)
        raise AssertionError(f"{' '.join(cmd[2:])} was still running after {timeout} s: every rank was sent SIGABRT; "
                             f"the end of its stderr, with the ranks' stacks:\n{_stacks(err)}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


STACKS_KEPT = 30_000  # characters of a hung job's stderr before its ranks' stacks that its AssertionError shows


def _stacks(err: str) -> str:
    """A hung job's stderr from STACKS_KEPT characters before the first rank's stacks (faulthandler's "Fatal Python
    error") to the end: every rank's stacks, however long (threads, DataLoader workers, the extension module list),
    where the last STACKS_KEPT characters alone cut the first rank's off."""
    first = err.find("Fatal Python error")
    return err[max(0, first - STACKS_KEPT):] if first >= 0 else err[-STACKS_KEPT:]


def _no_core_files() -> None:
    """No core dumps from the tests' processes (inherited by every job they start): a rank aborted by
    ``_stacks_then_kill`` would otherwise leave one in the repository, where a machine allows them."""
    import resource
    _, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))


_no_core_files()


def _stacks_then_kill(proc: subprocess.Popen) -> str:
    """A launched job that hangs: SIGABRT to each rank (faulthandler prints its threads' stacks), then, once the
    launcher has gone or 30 s have passed, SIGKILL to the whole process group and to every process that was below
    the launcher, then or now (``_stopped_tree``: a rank or DataLoader worker in a session of its own, which would
    keep the job's pipes open and this wait going for ever); the job's stderr."""
    import contextlib
    import signal
    try:
        below = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        below = []
    for pid in rank_pids(proc).values():
        with contextlib.suppress(ProcessLookupError):  # a rank that ended meanwhile
            os.kill(pid, signal.SIGABRT)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        below += _stopped_tree(proc.pid)  # ranks the launcher started after the first look (torchrun: setsid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for child in below:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # a process nobody knew of holds the pipes: stop reading them
            proc.kill()
            err = "(stderr not read: the job's pipes stayed open after every process below it was killed)"
    with contextlib.suppress(ProcessLookupError):  # DataLoader workers or a rank the launcher left behind
        os.killpg(proc.pid, signal.SIGKILL)
    for child in below:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    port = proc.args[proc.args.index("--master_port") + 1]  # its ranks' DeepSpeed all-reduce buffers stay behind
    for leftover in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*_{port}_*"):
        leftover.unlink(missing_ok=True)
    return err


def _stopped_tree(pid: int) -> list[psutil.Process]:
    """PID and every process below it, each stopped (SIGSTOP) before its children are listed, so that none starts
    another one unseen before they are all killed. A job whose ranks were not started yet when its timeout came
    had none for ``rank_pids`` to find; torchrun starts them in sessions of their own, out of the launcher's
    process group, so they outlived the job (tests/runtime/test_hung_job.py)."""
    found: dict[int, psutil.Process] = {}
    todo = [pid]
    while todo:
        try:
            process = psutil.Process(todo.pop())
            process.suspend()
            found[process.pid] = process
            todo += [child.pid for child in process.children() if child.pid not in found]
        except psutil.NoSuchProcess:
            continue
    return list(found.values())


def _run_in_child(module: str, argv: list[str], env: dict | None, cwd: Path, out: int, err: int,
                  new_session: bool = False) -> None:
    """The forked child of ``run_main`` and ``start_main``: MODULE's main with ARGV, stdout and stderr on the
    file descriptors ``out`` and ``err``; never returns."""
    import contextlib
    import importlib
    import logging
    import signal
    import traceback

    import threading

    import torch
    import tqdm
    _, full_env = _command(argv, 1, env)
    code = 1
    # tqdm's write lock holds a semaphore shared with the process that forked this one: a child killed while it
    # drew a bar (transformers draws one loading weights) left this test worker unable to draw any, and its next
    # from_pretrained hung for good (seen 2026-12-05 with transformers 5.25). The child takes a lock of its own.
    lock, classes = threading.RLock(), [tqdm.tqdm]
    while classes:  # tqdm.auto's class too (transformers' bars), which may hold a lock of its own
        cls = classes.pop()
        if cls is tqdm.tqdm or "_lock" in vars(cls):
            cls._lock = lock
        classes += cls.__subclasses__()
    try:
        if new_session:  # its own process group, as a shell gives a foreground job
            os.setsid()
        entry = importlib.import_module(module).main  # imported by the parent already
        os.dup2(out, 1), os.dup2(err, 2)
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)
        os.environ.clear()
        os.environ.update(full_env)
        os.chdir(cwd)
        root = logging.getLogger()  # as a fresh interpreter has it: main's basicConfig then applies
        for handler in list(root.handlers):
            root.removeHandler(handler)
        root.setLevel(logging.WARNING)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # pytest's own handler is not a fresh one's
        torch.set_num_threads(1)
        torch._dynamo.config.disable = True  # TORCHDYNAMO_DISABLE, read at import in a fresh process
        code = entry(list(argv))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed or broken stream: the exit code still goes out
                stream.flush()
        os._exit(code or 0)


def run_main(module: str, argv: list[str], env: dict | None = None, timeout: int = 600,
             cwd: Path = REPO) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGV`` as a forked child of this test process, which has torch, DeepSpeed and
    transformers imported already: the same ``main`` in its own process (own pid, environment, stdout, stderr,
    exit status, working directory ``cwd``, DataLoader workers), without the imports a new interpreter pays:
    6-8 CPU-s on the 2-core CI machine, 4 of them transformers' modeling modules. The CLI tests of the sweep (whose
    training runs it starts as real interpreters) and of the refusals of foreign code (test_trust) run this way too.
    Multi-rank runs and the install, launcher and Slurm tests start real interpreters, as do the tests whose point
    is a fresh one (one-line errors without import-time warnings, determinism across processes)."""
    import importlib
    import signal
    import tempfile
    import time

    importlib.import_module(module)  # here, not in every child
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        _run_in_child(module, argv, env, cwd, out.fileno(), err.fileno())
    deadline = time.time() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.time() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise subprocess.TimeoutExpired([module, *argv], timeout)
        time.sleep(0.02)
    texts = []
    for f in (out, err):
        f.seek(0)
        texts.append(f.read().decode("utf-8", errors="replace"))
        f.close()
    return subprocess.CompletedProcess([module, *argv], os.waitstatus_to_exitcode(status), *texts)


class Started:
    """A ``start_main`` child: ``pid`` (also its process group), ``poll()`` and ``wait(timeout)`` like Popen's."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> int:
        import time
        deadline = time.time() + timeout
        while self.poll() is None:
            if time.time() > deadline:
                os.killpg(self.pid, 9)
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.02)
        return self.returncode


def start_main(module: str, argv: list[str], log: Path, env: dict | None = None) -> Started:
    """``run_main`` without waiting: the child leads a process group of its own (a shell's foreground job, which
    a terminal's Ctrl-C signals whole), stdout and stderr go to ``log``."""
    import importlib
    importlib.import_module(module)
    with open(log, "w") as f:
        sys.stdout.flush(), sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _run_in_child(module, argv, env, REPO, f.fileno(), f.fileno(), new_session=True)
    STARTED.append(Started(pid))
    return STARTED[-1]


def start(args: list[str], log: Path, nproc: int = 2, env: dict | None = None,
          launcher: str = "deepspeed") -> subprocess.Popen:
    """``launch`` through a launcher (the deepspeed one by default) without waiting for it; stdout and stderr go to
    ``log``."""
    cmd, full_env = _command(args, nproc, env, launcher)
    with open(log, "w") as out:
        STARTED.append(subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=out, stderr=subprocess.STDOUT))
    return STARTED[-1]


def kill_started() -> list[str]:
    """Kill every job ``start`` or ``start_main`` began that still runs, with every process below it (a rank in a
    session of its own too: ``_stopped_tree``), and reap it; forget every started job. Returns the command lines of
    those that were still running: a test that failed before it waited on its job would otherwise leave the job
    training beside the tests after it. Each is gone when this returns."""
    import contextlib
    import signal
    left = []
    for job in STARTED:
        if job.poll() is not None:
            continue
        forked = isinstance(job, Started)
        left.append(f"forked pid {job.pid}" if forked else " ".join(map(str, job.args)))
        tree = _stopped_tree(job.pid)
        if forked:  # start_main's child leads a group of its own (a Popen's group is the test worker's)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, signal.SIGKILL)
        for process in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        job.wait(timeout=60)
        psutil.wait_procs(tree, timeout=60)  # gone, not only sent the signal, when this returns
    STARTED.clear()
    return left


def rank_pids(launcher: subprocess.Popen) -> dict[int, int]:
    """Local rank -> pid of the training processes under a deepspeed launcher or torchrun (not their DataLoader
    workers)."""
    pids = {}
    for child in psutil.Process(launcher.pid).children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
            parent = " ".join(child.parent().cmdline())
            if "xpt_ds.cli.train" in cmd and "--local_rank=" in cmd and "deepspeed.launcher.launch" in parent:
                pids[int(cmd.split("--local_rank=")[1].split()[0])] = child.pid
            elif "xpt_ds.cli.train" in cmd and "torch.distributed.run" in parent:
                pids[int(child.environ()["LOCAL_RANK"])] = child.pid
        except (psutil.NoSuchProcess, psutil.AccessDenied, AttributeError):  # it ended (a zombie too), or its parent
            continue
    return pids
