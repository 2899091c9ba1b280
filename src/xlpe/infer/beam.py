"""Decoding: greedy search, batched beam search, and teacher-forced attention for alignment extraction.

All three run the model in eval mode under ``torch.no_grad`` (the model's training flag is restored after) and
are vectorised over sentences and beams: the only Python loop is over decoding steps. Keys and values are
cached (``xlpe.nn.transformer.DecoderCache``) and reordered with ``index_select`` when beams are re-ranked.

Maximum output length per sentence: ``floor(max_len_a * S + max_len_b)`` tokens before EOS, where ``S`` counts
the non-pad source tokens (EOS included), capped at ``cfg.max_len``; at that length EOS is forced (as fairseq).
PAD and BOS are never generated.

Length penalty (``lenpen = alpha``): hypotheses are ranked by ``logprob / lp(n)`` where ``logprob`` sums the
log-probabilities of the ``n`` generated tokens **including EOS**, and
``lp(n) = n ** alpha`` for ``lenpen_style='fairseq'`` (default; alpha=1 is the per-token average, 0 the raw sum;
fairseq's ``--lenpen``, used by DPE with 0.6, SPEC §6.4), or ``lp(n) = ((5 + n) / 6) ** alpha`` for
``lenpen_style='gnmt'`` (Wu et al. 2016, Eq. 14).

Two stopping rules (``stop``):

* ``"exhaust"`` (default): the shrinking beam. A sentence starts with ``beam`` live hypotheses; at each step its
  ``n`` live ones are replaced by the ``n`` best one-token extensions (by raw log-probability); those ending in
  EOS finish and leave the beam, so ``n`` shrinks by one for each; the sentence stops when no live hypothesis
  is left (or at its maximum length, where EOS is forced), and the best finished hypothesis by length-normalised
  score is returned. A beam wide enough to keep every prefix returns the exhaustive optimum.
* ``"fairseq"`` (fairseq's rule): every sentence keeps ``beam`` live hypotheses, taken from its ``2·beam`` best
  extensions after setting aside those that end in EOS; an EOS extension among the ``beam`` best finishes a
  hypothesis; the sentence stops once ``beam`` hypotheses have finished. With a confident model it can stop
  before its best hypothesis has finished (a tiny over-fitted model shows it). On a 40-minute Multi30k `small`
  model (beam 5, lenpen 1) the two rules scored 31.85 (fairseq) and 31.74 (exhaust) BLEU.

With either rule ``beam=1`` is exactly greedy search.

Cost: each step ranks the ``K·C`` candidates made of every live beam's ``C`` best tokens (``C = 2K`` or ``K``;
the ``C`` best extensions of a sentence are always among them) instead of all ``K·V``, and finds a beam's ``C``
best through the maxima of 64-token chunks (:func:`chunked_topk`; a full-row ``topk`` is slower than the
log-softmax on CPU); a sentence that is done
leaves the live batch (its decoder rows and cached keys/values are dropped), so later steps cost nothing for it;
the beams of a sentence share one memory row (its cross-attention keys and values are projected, stored and read
once, as one block of K queries, and never reordered when beams are re-ranked); only the live beams are
decoded (one per sentence at the first step; fewer than K as the exhaust rule's beam shrinks: a fifth of its
rows on Multi30k were dead beams); decoding runs under ``torch.inference_mode``.

A vocabulary shortlist (``shortlist=``, :mod:`xlpe.infer.shortlist`; off by default) scores only the batch's
likely target pieces: the output projection and the log-softmax run over that subset, so the probabilities are
normalised over it. Without one the code path is the one described above.

Verified in ``tests/test_beam.py``: ``beam=1`` equals greedy for every ``lenpen`` and both rules; the fairseq
rule equals a plain re-implementation of it; a batch equals
sentence-by-sentence decoding (tokens, scores, attention); a beam wide enough to keep every prefix returns the
exhaustive-search optimum of ``logprob / lp(n)`` (logprobs recomputed by teacher forcing, both penalty styles);
a tiny model trained to reproduce 20 pairs is decoded exactly by greedy and beam; greedy's attention equals
:func:`force_decode` on its own output.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import Tensor

from xlpe.errors import ConfigError
from xlpe.infer.shortlist import BatchVocab, Shortlist
from xlpe.nn.device import device_policy
from xlpe.nn.transformer import DecoderCache, EncoderOut, Transformer
from xlpe.runtime import check_memory

NEG_INF = float("-inf")
#: beam stopping rules (see the module docstring)
STOP_RULES = ("exhaust", "fairseq")


@dataclass
class Hypothesis:
    """One decoded sentence.

    Attributes:
        tokens: target ids without BOS and EOS.
        score: the ranking score: ``logprob / lp(n)`` for beam search, ``logprob`` for greedy.
        logprob: sum of the log-probabilities of ``tokens`` and the final EOS.
        attn: if requested, the head-averaged encoder-decoder attention of the chosen decoder layer,
            ``(len(tokens) + 1, S)``: row t is the attention used when predicting token t (the last row predicts
            EOS); ``S`` = the sentence's non-pad source tokens.
    """

    tokens: list[int]
    score: float
    logprob: float
    attn: Tensor | None = None


@contextlib.contextmanager
def _eval_mode(model: torch.nn.Module, inference: bool = False) -> Iterator[None]:
    """Eval mode without autograd; ``inference=True`` uses ``torch.inference_mode`` (less bookkeeping per op;
    its tensors must not leave the decoder: callers return lists and clones)."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode() if inference else torch.no_grad():
            yield
    finally:
        model.train(was_training)


def length_penalty(n: Tensor | int, alpha: float, style: str = "fairseq") -> Tensor | float:
    """``n ** alpha`` (fairseq) or ``((5 + n) / 6) ** alpha`` (GNMT); ``n`` counts EOS."""
    if style == "fairseq":
        return n ** alpha
    if style == "gnmt":
        return ((5 + n) / 6) ** alpha
    raise ConfigError(f"unknown lenpen_style {style!r}; valid: fairseq, gnmt")


def _max_lengths(enc: EncoderOut, a: float, b: float, cap: int) -> Tensor:
    src_len = (~enc.src_pad_mask).sum(1).to(torch.float64)
    return torch.floor(a * src_len + b).clamp(0, cap).long()


def _next_candidates(model: Transformer, tokens: Tensor, enc: EncoderOut, cache: DecoderCache, layer: int | None,
                     step: int, max_len: Tensor, k: int, slots: tuple[Tensor, int] | None = None,
                     vocab: BatchVocab | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
    """The ``k`` most probable next tokens after ``tokens (N, 1)`` and their log-probabilities (normalised over
    the whole vocabulary, or over the shortlist ``vocab``), best first: ``(logprobs (N, k), ids (N, k))``; PAD/BOS
    never, EOS alone at ``step >= max_len`` (the rest -inf); plus the head-averaged attention ``(N, S)`` of decoder
    layer ``layer`` if asked. ``slots``: the rows' places in a grid of K per memory row (:meth:`Transformer.decode`)."""
    cfg = model.cfg
    out = model.decode(tokens, enc, need_attn_layer=layer, cache=cache, memory_slots=slots,
                       output=None if vocab is None else vocab.weight)
    logits, attn = out if layer is not None else (out, None)
    lp = torch.log_softmax(logits[:, -1].float(), dim=-1)
    eos_col = cfg.eos_id if vocab is None else vocab.eos_col
    force = step >= max_len
    if bool(force.any()):
        eos = lp[:, eos_col].clone()
        lp[force] = NEG_INF
        lp[force, eos_col] = eos[force]
    if vocab is None:       # a shortlist holds neither
        lp[:, cfg.pad_id] = NEG_INF
        if cfg.bos_id != cfg.eos_id:
            lp[:, cfg.bos_id] = NEG_INF
    top, ids = chunked_topk(lp, k)
    if vocab is not None:
        ids = vocab.ids[ids]
    return top, ids, None if attn is None else attn.mean(1)[:, -1].float()


#: elements per chunk in :func:`chunked_topk`
TOPK_CHUNK = 64


def chunked_topk(x: Tensor, k: int, chunk: int | None = None) -> tuple[Tensor, Tensor]:
    """``x.topk(k, -1)`` (values and ids, best first) of rows ``(N, V)``, found through chunk maxima: the ``k``
    chunks of ``chunk`` consecutive elements with the largest maxima hold a top-``k`` set (each of their maxima is
    at least every element of the other chunks), so one vectorised ``amax`` pass over the row and a top-``k`` of
    ``k * chunk`` candidates replace a top-``k`` over ``V`` (several times slower on CPU, as is ``max`` with its
    index). Ties may pick other ids of equal values than ``topk`` would. Rows shorter than a few chunks, and
    tensors on a GPU (whose ``topk`` is fast), use ``topk`` itself. ``chunk``: default :data:`TOPK_CHUNK`."""
    N, V = x.shape
    chunk = chunk or TOPK_CHUNK
    n_full = V // chunk
    if n_full <= 2 * k or not device_policy(x.device).chunked_topk:
        return x.topk(k, dim=-1)
    tail = V - n_full * chunk
    cmax = x[:, :n_full * chunk].unflatten(1, (n_full, chunk)).amax(-1)          # (N, V // chunk)
    if tail:
        cmax = torch.cat((cmax, x[:, n_full * chunk:].amax(-1, keepdim=True)), 1)
    cid = cmax.topk(k, dim=-1).indices                                           # (N, k)
    idx = (cid[:, :, None] * chunk + torch.arange(chunk, device=x.device)).view(N, k * chunk)
    cand = x.gather(1, idx.clamp(max=V - 1))
    if tail:
        cand = cand.masked_fill(idx >= V, NEG_INF)                             # past the end of the tail chunk
    top, j = cand.topk(k, dim=-1)
    return top, idx.gather(1, j).clamp(max=V - 1)     # (a -inf past the end can win only among -inf ties)


def greedy(model: Transformer, src: Tensor, channels: dict[str, Tensor] | None = None, max_len_a: float = 1.2,
           max_len_b: float = 10, return_attn_layer: int | None = None,
           shortlist: Shortlist | None = None) -> list[Hypothesis]:
    """Greedy decoding of a right-padded source batch ``(B, S)``; one :class:`Hypothesis` per sentence.
    A sentence that has produced EOS leaves the live batch (its decoder row, memory row and cached keys/values
    are dropped), so later steps cost nothing for it. ``shortlist``: score only the batch's shortlist
    (:mod:`xlpe.infer.shortlist`; None = the whole vocabulary)."""
    cfg = model.cfg
    with _eval_mode(model, inference=True):
        enc = model.encode(src, channels)
        vocab = _batch_vocab(model, src, shortlist)
        B, S = src.shape
        dev = src.device
        src_len = (~enc.src_pad_mask).sum(1)
        max_len = _max_lengths(enc, max_len_a, max_len_b, cfg.max_len)
        steps = int(max_len.max()) + 1
        out = torch.full((B, steps), cfg.pad_id, dtype=torch.long, device=dev)
        attn = torch.zeros(B, steps, S, device=dev) if return_attn_layer is not None else None
        logprob = torch.zeros(B, dtype=torch.float64, device=dev)
        active = torch.arange(B, device=dev)               # the sentences still being decoded
        last = torch.full((B, 1), cfg.bos_id, dtype=torch.long, device=dev)
        cache = DecoderCache()
        for t in range(steps):
            best, nxt, a = _next_candidates(model, last, enc, cache, return_attn_layer, t, max_len, 1, vocab=vocab)
            out[active, t] = nxt[:, 0]
            logprob[active] += best[:, 0].double()
            if attn is not None:
                attn[active, t] = a
            done = nxt[:, 0].eq(cfg.eos_id)
            if bool(done.all()):
                break
            last = nxt
            if bool(done.any()):
                stay = (~done).nonzero().squeeze(1)
                active, last, max_len = active[stay], last[stay], max_len[stay]
                enc = enc.index_select(stay)
                cache.reorder(stay)
    hyps = []
    for i in range(B):
        n = int(out[i].eq(cfg.eos_id).nonzero()[0])
        s = int(src_len[i])
        hyps.append(Hypothesis(out[i, :n].tolist(), float(logprob[i]), float(logprob[i]),
                               None if attn is None else attn[i, :n + 1, :s].to("cpu", copy=True)))
    return hyps


def beam_search(model: Transformer, src: Tensor, channels: dict[str, Tensor] | None = None, beam: int = 5,
                lenpen: float = 0.6, max_len_a: float = 1.2, max_len_b: float = 10,
                return_attn_layer: int | None = None, lenpen_style: str = "fairseq",
                stop: str = "exhaust", shortlist: Shortlist | None = None) -> list[Hypothesis]:
    """Beam search over a right-padded source batch ``(B, S)``, all sentences and beams at once (``B * beam``
    decoder rows). Returns the best finished hypothesis of every sentence; see the module docstring for the
    length penalty and the stopping rule. ``return_attn_layer`` (0-based, negative from the top) adds the
    head-averaged encoder-decoder attention of that decoder layer to each hypothesis. ``stop``: ``"fairseq"``
    or ``"exhaust"`` (module docstring). ``shortlist``: score only the batch's shortlist (:mod:`xlpe.infer.shortlist`;
    None = the whole vocabulary)."""
    if beam < 1:
        raise ConfigError(f"beam must be >= 1, got {beam}")
    if stop not in STOP_RULES:
        raise ConfigError(f"unknown beam stop rule {stop!r}; valid: {', '.join(STOP_RULES)}")
    length_penalty(1, lenpen, lenpen_style)   # validates the style
    cfg, K = model.cfg, beam
    keep_k = stop == "fairseq"                    # fairseq: K live hypotheses at every step
    C = 2 * K if keep_k else K                    # candidates ranked per sentence
    with _eval_mode(model, inference=True):
        enc = model.encode(src, channels)   # one memory row per sentence, shared by its K beams (decoder rows)
        vocab = _batch_vocab(model, src, shortlist)
        kk = min(C, cfg.tgt_vocab if vocab is None else vocab.ids.numel())   # candidates taken from each beam
        src_len = (~enc.src_pad_mask).sum(1)
        max_len = _max_lengths(enc, max_len_a, max_len_b, cfg.max_len)
        steps = int(max_len.max()) + 1
        _check_beam_memory(src.shape, K, steps, cfg, return_attn_layer is not None)
        fin = _Finished(src.shape, K, steps, cfg.pad_id, return_attn_layer is not None, src.device)
        beams = _Beams(enc, max_len, src.shape, K, steps, cfg, return_attn_layer is not None, vocab)
        for t in range(steps):
            top_s, beam_i, tok_i = beams.extensions(model, t, kk, C, return_attn_layer)
            is_eos = tok_i.eq(cfg.eos_id)
            finite = torch.isfinite(top_s)
            rank_c = torch.arange(top_s.shape[1], device=src.device)[None, :]
            if keep_k:   # EOS among the K best finishes; the K best others stay alive
                new = is_eos & finite & (rank_c < K)
                alive = ~is_eos & finite
            else:        # the best n_alive are kept; those ending in EOS finish, the others stay alive
                kept = (rank_c < beams.n_alive[:, None]) & finite
                new, alive = kept & is_eos, kept & ~is_eos
            # 1) finished hypotheses (at most K per sentence in total, so the merge keeps them all)
            if bool(new.any()):
                fin.add(beams, new, top_s, t, length_penalty(t + 1, lenpen, lenpen_style), cfg.eos_id)
            # 2) the live candidates (at most K, best first; the rest are dead)
            beams.advance(alive, top_s, beam_i, tok_i, t)
            # 3) sentences without a live hypothesis (or at their maximum length) leave the live state
            done = beams.n_alive.eq(0) | (t >= beams.max_len)
            if keep_k:
                done |= fin.count[beams.active].ge(K)
            if bool(done.all()):
                break
            if bool(done.any()):
                beams.drop(done)
    return fin.best(src_len)


def _batch_vocab(model: Transformer, src: Tensor, shortlist: Shortlist | None) -> BatchVocab | None:
    """The shortlist of the batch ``src`` with its output-projection rows, or None without a shortlist."""
    if shortlist is None:
        return None
    cfg = model.cfg
    return shortlist.batch(src, model.output_weight, (cfg.pad_id, cfg.bos_id, cfg.eos_id))


def beam_memory(shape: tuple[int, int], K: int, steps: int, cfg, want_attn: bool) -> int:
    """An upper estimate, in bytes, of what a beam search over a batch of ``shape (B, S)`` with beam ``K``
    allocates at its peak: per decoder row (``B·K``), the step's logits and log-probabilities over the target
    vocabulary, the cached keys and values of every decoder layer over ``steps`` (twice: while reordered), the
    tokens of the live and the finished hypotheses, and the attention rows if asked for."""
    S, rows = shape[1], shape[0] * K
    per_row = (8 * cfg.tgt_vocab + 16 * cfg.dec_layers * steps * cfg.d_model + 24 * (steps + 1)
               + (12 * steps * S if want_attn else 0))
    return rows * per_row


def _check_beam_memory(shape: tuple[int, int], K: int, steps: int, cfg, want_attn: bool) -> None:
    check_memory(beam_memory(shape, K, steps, cfg, want_attn),
                 f"a beam search of beam {K} over {shape[0]} sentences ({steps} steps, a vocabulary of "
                 f"{cfg.tgt_vocab})",
                 "use a smaller beam or fewer sentences a batch (--beam, --batch-size, --max-tokens)")


class _Beams:
    """The live state of a beam search. It covers only the sentences still being decoded (``active``: their
    places in the batch), as a grid of K slots each (``tokens``, BOS first; ``scores``, raw log-probabilities,
    -inf for an empty slot); a sentence that is done leaves it, so later steps cost nothing for it. Only the
    live slots (``live``, finite score: beam 0 at the start, fewer as the exhaust rule's beam shrinks) are
    decoded; the decoder cache holds their rows in that order. ``attn``: each slot's attention rows."""

    def __init__(self, enc: EncoderOut, max_len: Tensor, shape: tuple[int, int], K: int, steps: int, cfg,
                 want_attn: bool, vocab: BatchVocab | None = None):
        (B, S), dev = shape, max_len.device
        self.enc, self.max_len, self.K, self.cfg, self.vocab = enc, max_len, K, cfg, vocab
        self.active = torch.arange(B, device=dev)
        self.tokens = torch.full((B * K, steps + 1), cfg.pad_id, dtype=torch.long, device=dev)
        self.tokens[:, 0] = cfg.bos_id
        self.scores = torch.full((B, K), NEG_INF, dtype=torch.float64, device=dev)
        self.scores[:, 0] = 0.0
        self.live = torch.arange(B, device=dev) * K
        self.attn = torch.zeros(B * K, steps, S, device=dev) if want_attn else None
        self.n_alive = torch.full((B,), K, device=dev)
        self.cache = DecoderCache()
        self.rank = torch.arange(K, device=dev)[None, :]     # a sentence's slot numbers
        self.base = self.rows = None          # this step's first slot of each sentence, the candidates' parents

    def extensions(self, model: Transformer, t: int, kk: int, C: int,
                   layer: int | None) -> tuple[Tensor, Tensor, Tensor]:
        """Decode the live slots at step ``t``; the ``C`` best one-token extensions of each sentence, best first:
        ``(scores (n, C), parent beams (n, C), tokens (n, C))``, from the ``kk`` best tokens of every beam (the
        ``C`` best extensions of a sentence are among them); sets ``rows``, the candidates' parent slots."""
        K, live, dev = self.K, self.live, self.tokens.device
        n = self.active.numel()
        if live.numel() == n * K:     # every slot live (the fairseq rule after step 0): the plain grid
            lp_k, tok_k, a = _next_candidates(model, self.tokens[:, t:t + 1], self.enc, self.cache, layer, t,
                                              self.max_len.repeat_interleave(K), kk, vocab=self.vocab)
        else:
            lp_c, tok_c, a = _next_candidates(model, self.tokens[live, t:t + 1], self.enc, self.cache, layer, t,
                                              self.max_len[live // K], kk, slots=(live, K), vocab=self.vocab)
            lp_k = torch.full((n * K, kk), NEG_INF, dtype=lp_c.dtype, device=dev).index_copy_(0, live, lp_c)
            tok_k = torch.full((n * K, kk), self.cfg.pad_id, dtype=torch.long, device=dev).index_copy_(0, live,
                                                                                                       tok_c)
        if self.attn is not None:
            self.attn[live, t] = a
        cand = (self.scores[:, :, None] + lp_k.view(n, K, kk).double()).view(n, K * kk)
        top_s, top_j = cand.topk(min(C, K * kk), dim=1)                     # (n, C), best first
        beam_i = top_j // kk
        tok_i = tok_k.view(n, K * kk).gather(1, top_j)
        self.base = (torch.arange(n, device=dev) * K)[:, None]
        self.rows = (self.base + beam_i).view(-1)
        return top_s, beam_i, tok_i

    def advance(self, alive: Tensor, top_s: Tensor, beam_i: Tensor, tok_i: Tensor, t: int) -> None:
        """Fill the slots with the ``alive`` candidates (at most K a sentence, best first; the rest are dead),
        their token ``t + 1`` appended; the cache follows them."""
        n, K, live = self.active.numel(), self.K, self.live
        self.n_alive = alive.sum(1).clamp(max=K)
        self.scores, j = top_s.masked_fill(~alive, NEG_INF).topk(K, dim=1)
        rows = (self.base + beam_i.gather(1, j)).view(-1)          # each slot's parent slot
        self.tokens = self.tokens.index_select(0, rows)
        self.tokens[:, t + 1] = tok_i.gather(1, j).view(-1)
        if self.attn is not None:
            self.attn = self.attn.index_select(0, rows)
        # the new live slots; the cache rows of their parents (live slots of this step, by construction)
        new_live = torch.isfinite(self.scores).view(-1).nonzero().squeeze(1)
        cache_row = torch.full((n * K,), -1, dtype=torch.long, device=live.device)
        cache_row[live] = torch.arange(live.numel(), device=live.device)
        self.cache.reorder_self(cache_row[rows[new_live]])
        self.live = new_live

    def drop(self, done: Tensor) -> None:
        """Remove the sentences ``done`` (over ``active``) from the live state, their cached rows too."""
        n, K, dev = self.active.numel(), self.K, self.tokens.device
        stay = (~done).nonzero().squeeze(1)
        keep_rows = (stay[:, None] * K + self.rank).view(-1)
        slot_now = torch.full((n * K,), -1, dtype=torch.long, device=dev)
        slot_now[keep_rows] = torch.arange(keep_rows.numel(), device=dev)
        live_slot = slot_now[self.live]                         # -1: a live beam of a sentence that is done
        kept_live = live_slot.ge(0).nonzero().squeeze(1)
        self.active, self.scores, self.n_alive = self.active[stay], self.scores[stay], self.n_alive[stay]
        self.max_len = self.max_len[stay]
        self.tokens = self.tokens.index_select(0, keep_rows)
        self.enc = self.enc.index_select(stay)
        self.cache.reorder(kept_live, cross_index=stay)
        self.live = live_slot[kept_live]
        if self.attn is not None:
            self.attn = self.attn.index_select(0, keep_rows)


class _Finished:
    """The finished hypotheses of a beam search, the best K of each sentence by score, indexed by the sentence's
    place in the batch: ``score`` (``logprob / lp(n)``, -inf for an empty place), ``logprob``, ``length``
    (tokens before EOS), ``tokens`` (BOS first), ``attn``; ``count``: hypotheses finished so far."""

    def __init__(self, shape: tuple[int, int], K: int, steps: int, pad_id: int, want_attn: bool,
                 dev: torch.device):
        (B, S), self.K = shape, K
        self.score = torch.full((B, K), NEG_INF, dtype=torch.float64, device=dev)
        self.logprob = torch.full((B, K), NEG_INF, dtype=torch.float64, device=dev)
        self.length = torch.zeros(B, K, dtype=torch.long, device=dev)
        self.tokens = torch.full((B, K, steps + 1), pad_id, dtype=torch.long, device=dev)
        self.attn = torch.zeros(B, K, steps, S, device=dev) if want_attn else None
        self.count = torch.zeros(B, dtype=torch.long, device=dev)

    def add(self, beams: _Beams, new: Tensor, top_s: Tensor, t: int, lp: float, eos_id: int) -> None:
        """Merge the candidates ``new`` (ending in EOS at step ``t``, parents ``beams.rows``), scored
        ``top_s / lp``, into the best K of their sentences (at most K finish per sentence in total, so the
        merge keeps them all)."""
        active, rows, K = beams.active, beams.rows, self.K
        n = active.numel()
        new_score = (top_s / lp).masked_fill(~new, NEG_INF)
        new_tokens = beams.tokens.index_select(0, rows).view(n, top_s.shape[1], -1)
        new_tokens[:, :, t + 1] = eos_id
        both = torch.cat((self.score[active], new_score), 1)
        keep = both.topk(K, dim=1).indices                                # (n, K) into [old; new]
        self.score[active] = both.gather(1, keep)
        self.logprob[active] = torch.cat((self.logprob[active], top_s), 1).gather(1, keep)
        self.length[active] = torch.cat((self.length[active], torch.full_like(new_score, t, dtype=torch.long)),
                                        1).gather(1, keep)
        self.tokens[active] = _gather_rows(torch.cat((self.tokens[active], new_tokens), 1), keep)
        if self.attn is not None:
            _, _, steps, S = self.attn.shape
            self.attn[active] = _gather_rows(
                torch.cat((self.attn[active], beams.attn.index_select(0, rows).view(n, -1, steps, S)), 1), keep)
        self.count[active] += new.sum(1)

    def best(self, src_len: Tensor) -> list[Hypothesis]:
        """The best finished hypothesis of every sentence (attention cut to its ``src_len`` source tokens)."""
        best = self.score.argmax(1)
        hyps = []
        for i in range(best.numel()):
            j = int(best[i])
            n = int(self.length[i, j])
            s = int(src_len[i])
            hyps.append(Hypothesis(self.tokens[i, j, 1:n + 1].tolist(), float(self.score[i, j]),
                                   float(self.logprob[i, j]),
                                   None if self.attn is None else self.attn[i, j, :n + 1, :s].to("cpu", copy=True)))
        return hyps


def _gather_rows(x: Tensor, index: Tensor) -> Tensor:
    """``x[b, index[b, k]]`` for ``x (B, N, ...)`` and ``index (B, K)``."""
    return x[torch.arange(x.shape[0], device=x.device)[:, None], index]


def force_decode(model: Transformer, src: Tensor, tgt: Tensor, channels: dict[str, Tensor] | None = None,
                 layer: int = -2) -> Tensor:
    """Teacher-forced encoder-decoder attention of decoder layer ``layer`` (default: the penultimate one,
    SPEC §4.6), per head: ``(B, H, T, S)``. ``tgt (B, T)`` holds the reference ``y_1 .. y_n EOS`` (right-padded,
    no BOS); the decoder reads ``BOS y_1 .. y_n``, so row t is the attention used when predicting ``tgt[:, t]``.
    Rows of padding and columns of source padding are present; callers mask them."""
    cfg = model.cfg
    bos = torch.full_like(tgt[:, :1], cfg.bos_id)
    tgt_in = torch.cat((bos, tgt[:, :-1]), 1)
    with _eval_mode(model):
        _, attn = model.decode(tgt_in, model.encode(src, channels), need_attn_layer=layer)
    return attn
