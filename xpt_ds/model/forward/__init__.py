"""How the target computes a training step: the loss (``objective``: MLM on masked positions; ``causal_lm``: a
decoder's next-token loss in chunks), attention over packed documents (``document_mask``) and activation
checkpointing of the layer stack (``recompute``)."""
