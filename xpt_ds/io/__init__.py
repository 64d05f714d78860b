"""Files the package reads and writes safely: ``paths`` (can a directory or an output file be written) and
``trust`` (what runs from a model directory or a checkpoint someone else wrote: nothing, unless the user says so),
``file_modes`` (saved weights readable as the umask says, not by their owner alone).
"""
