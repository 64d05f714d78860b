"""Downstream evaluation (002 Table 3): ``config`` (FinetuneConfig, Table A2's presets), ``data`` (CSV/TSV/JSONL
-> tokenized batches), ``splits`` (every file read and checked before a model loads), ``metrics`` (accuracy, F1,
correlations, entity F1, KLUE-RE's micro F1 and AUPRC) and ``run`` (one fine-tuning per seed), with ``precision``
(fp32 or bf16 autocast; LoRA's frozen bases in bf16), ``snapshot`` (the best validation epoch's trained tensors)
and ``report`` (the printed table); ``lora`` for decoders; relation extraction (001, KLUE-RE) adds ``relation``
(records -> text with typed entity markers -> ids) and ``relation_model`` (marker rows, the head over the marker
states, save/load).
"""
