"""The target model: ``build`` (the ITL-extended model from an English masked LM, 002 §3), ``adapters`` (the
Adapters baseline; exported verbatim as ``xpt_adapters.py``), ``phases`` (which parameters train in each phase
and where each phase starts) and ``objective`` (the MLM loss on masked positions only).
"""
