"""A checkpoint -> a stock Hugging Face model directory: ``hf`` (the export itself, streamed from any ZeRO stage
and world size, and a checkpoint's model in fp32 for evaluation and the probe), ``out_dir`` (the ``--out`` folder:
what an export may replace there, and how the finished export takes its place), ``llama_layout`` (a Qwen2 target
with a vocabulary of its own, written as a Llama model) and ``model_card`` (the ``README.md`` an export carries and
the scores ``xpt-ds evaluate --card`` adds). It reads checkpoints through ``xpt_ds.checkpoint``, without the
training loop."""
