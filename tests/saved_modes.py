"""The file modes of a saved model, for the tests that save one."""
from xpt_ds.io.file_modes import umask


def assert_umask_modes(directory):
    """Every file directly in ``directory`` has the mode a new file gets under the umask (readable by the group
    and others under umask 022), weights included."""
    want = 0o666 & ~umask()
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in directory.iterdir() if p.is_file()}
    assert modes and set(modes.values()) == {oct(want)}, modes
