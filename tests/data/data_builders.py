"""What the data tests build: a tokenizer whose ids need 32 bits, a small data config over given shards, and a
masked batch's original ids."""
from xpt_ds.config import DataConfig
from xpt_ds.data.tokenizer import TargetTokenizer

BIG_VOCAB = TargetTokenizer(path="<test>", vocab_size=65000, pad_id=1, cls_id=0, sep_id=2, unk_id=3, mask_id=4)


def data_config(shards, **kw):
    return DataConfig(train_shards=shards, **{"seq_len": 16, "shuffle_docs": 4, **kw})


def original_ids(batch):
    """The ids before masking: the masked positions given their targets back."""
    return batch["input_ids"].flatten().index_put((batch["mlm_positions"],), batch["mlm_targets"]).view_as(
        batch["input_ids"])
