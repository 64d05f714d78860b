"""A run killed while it draws a progress bar (tests/test_processes.py): holds tqdm's write lock, as
transformers' weight-loading bar does for each update, says so, and waits to be killed."""
import time

from tqdm.auto import tqdm


def main(argv: list[str]) -> int:
    tqdm.get_lock().acquire()
    print("holding tqdm's lock", flush=True)
    time.sleep(600)
    return 1
