"""TreLM (004): ``model`` (TRILayer, language embeddings and the English vocabulary beside the target's),
``objective`` (MLM and CdLM in one pass), ``data`` (each phase's objectives' rows joined into one batch),
``work`` (the tokens and FLOPs of every row a micro-batch trains on), ``valid`` (CdLM validation on
data.parallel_valid_shards) and ``hf`` (the target-language model for stock transformers; exported verbatim as
``xpt_trelm.py``).
"""
