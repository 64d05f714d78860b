"""What is measured: ``mlm`` (002 Table 2's intrinsic metrics, bits per character and per word, on masked
tokens) and ``logger`` (throughput, MFU, TensorBoard scalars, metrics.jsonl and the progress bar).
"""
