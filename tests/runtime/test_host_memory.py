"""xpt_ds.runtime.host_memory: with the mmap threshold fixed at 1 MiB, freed tensors of a few MB go back to the OS
even below a live small one; with glibc's own (raised by freeing one large block), they stay with the process."""
import subprocess
import sys

import pytest

CHILD = r'''
import sys, torch
from xpt_ds.runtime.host_memory import hold_less_heap

def anon_mb():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("RssAnon")) / 1024

if sys.argv[1] == "fixed":
    assert hold_less_heap()
first = torch.ones(4 * 2**20)  # 16 MB allocated and freed: glibc's own threshold rises to 16 MB
del first
base = anon_mb()
big, pins = [], []
for _ in range(100):
    big.append(torch.ones(2**19))  # 2 MB each, touched
    pins.append(torch.ones(8))  # a small live block after each
del big
print(anon_mb() - base)
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_megabyte_tensors_go_back_to_the_os():
    kept = {}
    for mode in ("fixed", "glibc"):
        proc = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, timeout=120,
                              env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
        assert proc.returncode == 0, proc.stderr[-2000:]
        kept[mode] = float(proc.stdout.strip().splitlines()[-1])
    assert kept["fixed"] < 20 and kept["glibc"] > 150, kept  # 200 MB was freed
