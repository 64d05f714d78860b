"""Where the new target word embeddings start (``model.embedding_init``): ``registry`` maps each name to its
function and runs it, ``strategies`` holds the functions, ``context`` what they read and fill, ``files`` the
embedding matrices ``data_tools`` writes. Each strategy's options are config's (``config.embedding_args``).
"""
