"""Comparisons across methods and data sizes: ``plan`` and ``runner`` (``python -m xpt_ds.sweep``), ``report``
(002 Table 2 per size, plots, the data-efficiency ratio) and the reports of the launch/ comparisons
(``compare``).
"""
