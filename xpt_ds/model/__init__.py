"""The target model. On top, ``build`` (the ITL-extended model from an English masked LM, 002 §3, and the one build
plan every start uses), ``decoder`` (the same for a GPT-2 or Llama-layout source), ``skeleton`` (the module tree
without values, and storage for it), ``preflight`` (the checks before any source weight is read), ``phases`` (which
parameters train in each phase and where each phase starts), ``weight_decay`` (which of them AdamW decays) and
``finite`` (whether tensors hold only finite values, by their sums first). Below them, by concern:

- ``values``: where each parameter's value comes from: the source's weights a tensor at a time (``source_files``),
  whether they are the architecture xpt-ds builds for (``source_weights``), a recipe per parameter (``plan``) and a
  new parameter's stock init from its own generator (``stock_init``);
- ``methods``: what a method adds to the reused layers: ``adapters`` (exported verbatim as ``xpt_adapters.py``),
  ``lora`` (through peft), ``extend`` (vocabulary extension) and ``extensions`` (a method's own parts, TreLM's,
  reached through the method table);
- ``forward``: how the model computes a step: ``objective`` (the MLM loss on masked positions only), ``causal_lm``
  (a decoder's next-token loss), ``document_mask`` (attention that keeps packed documents apart) and
  ``recompute`` (activation checkpointing of the layers)."""
