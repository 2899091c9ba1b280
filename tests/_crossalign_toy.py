"""A tiny WordPiece vocabulary, BERT config and sentence pairs for the Cross-Align tests (no download)."""

from transformers import BertConfig, BertModel, BertTokenizer

EN = "the cat sat on a mat dog ran to house big small red".split()
DE = "die katze sass auf einer matte hund lief zum haus gross klein rot".split()
LETTERS = "abcdefghijklmnopqrstuvwxyz"
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + EN + DE + list(LETTERS) + ["##" + c for c in LETTERS]
PAIRS = [("the cat sat on a mat", "die katze sass auf einer matte"), ("a dog ran", "hund lief"),
         ("the big dog ran to the house", "der grosse hund lief zum haus"),
         ("a small red cat", "eine kleine rote katze"), ("the cat ran", "die katze lief"),
         ("a big house", "ein grosses haus"), ("the red dog sat", "der rote hund sass"), ("a mat", "eine matte"),
         ("the small house", "das kleine haus"), ("dog and cat", "hund und katze")]


def tokenizer():
    return BertTokenizer(vocab={w: i for i, w in enumerate(dict.fromkeys(VOCAB))})


def bert_config(layers=4, **kw):
    return BertConfig(vocab_size=len(tokenizer()), hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=48, **kw)


def write_encoder(d, layers=4, seed=1):
    """A plain BERT encoder directory without an MLM head (like an e5 import)."""
    import torch
    torch.manual_seed(seed)
    BertModel(bert_config(layers), add_pooling_layer=False).save_pretrained(d)
    tokenizer().save_pretrained(d)
    return d
