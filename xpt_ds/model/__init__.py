"""The target model: ``build`` (the ITL-extended model from an English masked LM, 002 §3, and the one build plan
every start uses), ``skeleton`` (the module tree without values, and storage for it), ``plan`` (where each
parameter's value comes from), ``source_files`` (the source's weights, a tensor at a time), ``new_values`` (a new
parameter's stock init from its own generator), ``decoder`` (the same for a GPT-2 or Llama source), ``causal_lm``
(their next-token loss), ``adapters`` (the Adapters baseline; exported verbatim as ``xpt_adapters.py``), ``lora``
(the LoRA baseline of decoder sources, through peft), ``phases`` (which parameters train in each phase and where
each phase starts), ``objective`` (the MLM loss on masked positions only), ``recompute`` (activation
checkpointing of the layers, for the trainer and fine-tuning) and ``finite`` (whether tensors hold only finite
values, by their sums first)."""
