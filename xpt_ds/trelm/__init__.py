"""TreLM (004): ``model`` (TRILayer, language embeddings and the English vocabulary beside the target's),
``objective`` (MLM and CdLM in one pass), ``data`` (each phase's objectives' rows joined into one batch) and
``hf`` (the target-language model for stock transformers; exported verbatim as ``xpt_trelm.py``).
"""
