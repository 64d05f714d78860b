"""A throwaway single-host Slurm cluster for tests: munged, slurmctld and slurmd run as root from one temp
directory (own munge socket, key, ports, state and spool), so nothing system-wide is touched.
Debian's slurm-wlm 22.05 and munge; `bash tests/slurm/install.sh` installs them."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from xpt_ds.runtime import ports

# A requeued job is held until its old launch credential has expired: it becomes eligible cred_expire + 1 s
# after the requeue (slurm.conf(5), AuthInfo; default 120 s, 5 is the smallest value Slurm accepts) and then
# waits for a scheduling pass (backfill every 30 s, the main loop every sched_interval = 60 s by default).
# Measured from requeue to restart on 22.05.8: 120 s with cred_expire=120 and sched_interval=1, 27 s with
# cred_expire=5 and the default intervals, 6 s with cred_expire=5 and sched_interval=1 (as configured here).
CRED_EXPIRE_S = 5
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


class ClusterUnavailable(RuntimeError):
    """Slurm is not installed, or its daemons did not come up (the message carries their logs)."""


class SlurmCluster:
    def __init__(self, root: Path):
        self.root = root
        self.env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
        self.procs: dict[str, subprocess.Popen] = {}

    def __call__(self, *cmd: str, env: dict | None = None) -> str:
        """Run a Slurm client command (sbatch, scontrol, ...) against this cluster; return its stdout."""
        proc = subprocess.run(cmd, env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=60)
        if proc.returncode:
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc.stdout

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict (JobState, Restarts, EligibleTime, ...)."""
        return dict(re.findall(r"(\w+)=(\S*)", self("scontrol", "show", "job", "--oneliner", job_id)))

    def logs(self, lines: int = 30) -> str:
        return "\n".join(f"--- {name} (last {lines} lines) ---\n" + "\n".join(
            (self.root / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
            for name in self.procs)

    def start(self) -> None:
        missing = [tool for tool in ("munged", "munge", "slurmctld", "slurmd", "sbatch") if not shutil.which(tool)]
        if missing:
            raise ClusterUnavailable(f"Slurm is not installed (no {', '.join(missing)}); as root, "
                                     "`bash tests/slurm/install.sh` installs Debian's slurm-wlm and munge")
        if os.geteuid() != 0:
            raise ClusterUnavailable("the test Slurm cluster runs its daemons as root (SlurmUser=root)")
        for sub in ("state", "spool"):
            (self.root / sub).mkdir()
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        socket_path = self.root / "munge.socket"
        # --force: munged refuses a socket whose directory others cannot search (pytest's temp root is 0700)
        self._spawn("munged", "--foreground", "--force", f"--socket={socket_path}", f"--key-file={key}",
                    f"--pid-file={self.root / 'munged.pid'}", f"--seed-file={self.root / 'munged.seed'}")
        self._wait("munged", lambda: subprocess.run(["munge", "-n", "-S", str(socket_path)],
                                                    capture_output=True).returncode == 0)
        self._write_conf(socket_path)
        self._spawn("slurmctld", "-D")
        self._spawn("slurmd", "-D")
        self._wait("slurmd", lambda: self("sinfo", "--noheader", "--Node", "--format=%T").split() == ["idle"])

    def stop(self) -> None:
        """Cancel every job (so no slurmstepd outlives slurmd), then stop the daemons."""
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            subprocess.run(["scancel", "--user=root"], env=self.env, capture_output=True, timeout=60)
            deadline = time.time() + 60
            while subprocess.run(["squeue", "--noheader"], env=self.env, capture_output=True,
                                 text=True, timeout=60).stdout.strip() and time.time() < deadline:
                time.sleep(0.5)
        for proc in reversed(self.procs.values()):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _spawn(self, name: str, *args: str) -> None:
        with open(self.root / f"{name}.log", "wb") as log:
            self.procs[name] = subprocess.Popen([name, *args], env=self.env, stdin=subprocess.DEVNULL,
                                                stdout=log, stderr=subprocess.STDOUT)

    def _wait(self, name: str, ready, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while True:
            try:
                if ready():
                    return
            except RuntimeError:  # a client command that fails while the daemons are still starting
                pass
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead or time.time() > deadline:
                why = f"{', '.join(dead)} exited" if dead else f"{name} not ready after {timeout:.0f} s"
                self.stop()
                raise ClusterUnavailable(f"test Slurm cluster did not come up: {why}\n{self.logs()}")
            time.sleep(0.2)

    def _write_conf(self, munge_socket: Path) -> None:
        # `slurmd -C` prints this host's node line: NodeName=<short hostname> CPUs=... RealMemory=...
        node = subprocess.run(["slurmd", "-C"], env=self.env, capture_output=True, text=True,
                              check=True).stdout.splitlines()[0]
        host = node.split()[0].removeprefix("NodeName=")
        r = self.root
        (r / "slurm.conf").write_text(f"""\
ClusterName=xpttest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ports.free_port("")}
SlurmdPort={ports.free_port("")}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket},cred_expire={CRED_EXPIRE_S}
StateSaveLocation={r / 'state'}
SlurmdSpoolDir={r / 'spool'}
SlurmctldPidFile={r / 'slurmctld.pid'}
SlurmdPidFile={r / 'slurmd.pid'}
MailProg=/bin/true
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobRequeue=1
SchedulerParameters=sched_interval=1
ReturnToService=2
{node} NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
