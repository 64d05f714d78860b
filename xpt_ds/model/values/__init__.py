"""Where each parameter of the target gets its value, filled once into storage the skeleton left empty: the
source's weights, read one tensor at a time (``source_files``) after checking they are the architecture xpt-ds
builds for (``source_weights``), a recipe per parameter (``plan``), and the stock init of a new parameter from a
generator of its own (``stock_init``)."""
