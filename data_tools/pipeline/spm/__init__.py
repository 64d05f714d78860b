"""Stage (c), spm: ``stage`` trains SentencePiece on the train split (or copies a given model) through ``trainer``,
with the special-token layout of the source model family (``layouts``)."""
