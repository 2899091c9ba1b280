"""The grammar of a synthetic pair: source sentences (SVO) with dependency trees, their translation into the
profile's word order, and the word alignments."""

from __future__ import annotations

import random

from xlpe.data.synthetic.config import (CLAUSE_COMPLEMENT, CLAUSE_MAIN, CLAUSE_OBJECT_RELATIVE,
                                        CLAUSE_SUBJECT_RELATIVE, P_OBJ_REL, P_THE, P_THIS, PUNCT, SyntheticConfig)
from xlpe.data.synthetic.lexicon import Lexicon


# ------------------------------------------------------------------------------------------ grammar
# A source word is a list [form, upos, deprel, head word (list) or None, index]; a target word is a tuple
# (form, links, droppable) with links a tuple of (source word, is_sure). Both sequences are built
# bottom-up by the same recursive functions, the target in the profile's order.

class TooLong(Exception):
    """Raised inside the grammar as soon as a sentence exceeds max_len source words (cheap rejection)."""


class Grammar:
    def __init__(self, cfg: SyntheticConfig, lex: Lexicon, rng: random.Random):
        self.cfg, self.lex = cfg, lex
        self.count, self.limit = 0, cfg.max_len     # source words so far in the current attempt
        self.r = rng.random
        self.sov = cfg.profile == "sov"
        self.v2 = cfg.profile == "v2"
        self.flip = cfg.profile == "svo-flip"
        self.max_depth = cfg.max_depth
        self.otm_sure = cfg.one_to_many_link == "sure"
        self.plink = cfg.particle_link == "possible"
        f = lex.tfw
        self.t = f
        self.nn, self.nadj = len(lex.nouns), len(lex.adjectives)
        self.nadv, self.nprep = len(lex.adverbs), len(lex.preps)
        self.adj_rate, self.pp_rate, self.rel_rate = cfg.adj_rate, cfg.pp_rate, cfg.rel_rate
        self.comp_rate, self.adv_rate, self.front_rate, self.aux_rate = (cfg.comp_rate, cfg.adv_rate,
                                                                         cfg.front_rate, cfg.aux_rate)

    def _particle(self, form: str, owner: list) -> tuple:
        return (form, ((owner, False),) if self.plink else (), True)

    def np(self, depth: int):
        """Returns (source words, target words, head noun, animate)."""
        r = self.r
        lex = self.lex
        srcf, opts, animate = lex.nouns[int(r() * self.nn)]
        tgt = opts[0] if len(opts) == 1 else opts[int(r() * len(opts))]
        if len(srcf) == 1:
            head = [srcf[0], "NOUN", "", None, 0]
            S = [head]
            if len(tgt) == 1:
                NT = [(tgt[0], ((head, True),), False)]
            else:
                NT = [(tgt[0], ((head, True),), False), (tgt[1], ((head, self.otm_sure),), False)]
        else:
            head = [srcf[1], "NOUN", "", None, 0]
            S = [[srcf[0], "NOUN", "compound", head, 0], head]
            NT = [(tgt[0], ((S[0], True), (head, True)), False)]
        # adjectives (0-2, distinct)
        if self.nadj and r() < self.adj_rate:
            na = self.nadj
            a1 = int(r() * na)
            if na > 1 and r() < self.adj_rate:
                a2 = (a1 + 1 + int(r() * (na - 1))) % na
                adjs = (lex.adjectives[a1], lex.adjectives[a2])
            else:
                adjs = (lex.adjectives[a1],)
            AS, AT = [], []
            for form, aopts in adjs:
                leaf = [form, "ADJ", "amod", head, 0]
                AS.append(leaf)
                at = aopts[0] if len(aopts) == 1 else aopts[int(r() * len(aopts))]
                if len(at) == 1:
                    AT.append([(at[0], ((leaf, True),), False)])
                else:
                    AT.append([(at[0], ((leaf, True),), False), (at[1], ((leaf, self.otm_sure),), False)])
            S = AS + S
            if self.flip:
                for unit in reversed(AT):    # mirror order: the adjective next to the noun stays next to it
                    NT = NT + unit
            else:
                for unit in reversed(AT):
                    NT = unit + NT
        # determiner
        u = r()
        det = [("this" if u < P_THIS else "the" if u < P_THE else "a"), "DET", "det", head, 0]
        S.insert(0, det)
        c = self.count + len(S)
        self.count = c
        if c > self.limit:
            raise TooLong
        if u < P_THIS:
            T = [(self.t["this"], ((det, True),), False)] + NT
        elif self.sov:
            T = NT                       # articles have no translation
        else:
            T = [(self.t["the" if u < P_THE else "a"], ((det, True),), True)] + NT
        # modifiers: PP, relative clause
        if depth < self.max_depth:
            if self.nprep and r() < self.pp_rate:
                pS, pT, pn, prep = self.pp(depth + 1)
                pn[2], pn[3] = "nmod", head
                S += pS
                if self.sov:
                    T = pT + [self._particle(self.t["attr"], prep)] + T
                else:
                    T += pT
            if r() < self.rel_rate:
                kind = CLAUSE_OBJECT_RELATIVE if r() < P_OBJ_REL else CLAUSE_SUBJECT_RELATIVE
                cS, cT, _ = self.clause(depth + 1, kind, head, animate)
                S += cS
                T = cT + T if self.sov else T + cT
        return S, T, head, animate

    def pp(self, depth: int):
        """Returns (source words, target words, head noun of the object, preposition)."""
        src, (tf,) = self.lex.preps[int(self.r() * self.nprep)]
        prep = [src, "ADP", "case", None, 0]
        self.count += 1
        nS, nT, noun, _ = self.np(depth)
        prep[3] = noun
        pt = (tf, ((prep, True),), True)
        return [prep] + nS, (nT + [pt] if self.sov else [pt] + nT), noun, prep

    def clause(self, depth: int, kind: int, head_noun=None, animate=False):
        """Returns (source words, target words, verb). Main clauses end with the punctuation."""
        r = self.r
        lex, t, sov = self.lex, self.t, self.sov
        vclass, v, aux, VT, AUXT = self._verb(depth, kind, head_noun)

        S = []
        T = []        # leading target material (complementiser, fronted adverb, relative pronoun)
        front = compT = None
        if kind == CLAUSE_COMPLEMENT:
            comp = ["that", "SCONJ", "mark", v, 0]
            S.append(comp)
            compT = (t["that"], ((comp, True),), True)
            if not sov:
                T.append(compT)
        # adverb
        advS = advT = None
        if self.nadv and r() < self.adv_rate:
            form, aopts = lex.adverbs[int(r() * self.nadv)]
            leaf = [form, "ADV", "advmod", v, 0]
            advS = leaf
            at = aopts[0] if len(aopts) == 1 else aopts[int(r() * len(aopts))]
            advT = [(at[0], ((leaf, True),), False)]
            if kind == CLAUSE_MAIN and r() < self.front_rate:
                front = advT
                S.append(leaf)
                advS = None
        c = self.count + len(S) + (2 if aux is not None else 1) + (advS is not None) + (kind != CLAUSE_COMPLEMENT)
        self.count = c                           # + verb, aux, adverb, and punctuation or rel. pronoun
        if c > self.limit:
            raise TooLong
        # subject
        if kind == CLAUSE_SUBJECT_RELATIVE:
            rp = ["who" if animate else "that", "PRON", "nsubj", v, 0]
            S.append(rp)
            subjT = [] if sov else [(t["who" if animate else "which"], ((rp, True),), True)]
        else:
            if kind == CLAUSE_OBJECT_RELATIVE:
                rp = ["who" if animate else "that", "PRON", "obj", v, 0]
                S.append(rp)
                if not sov:
                    T.append((t["who" if animate else "which"], ((rp, True),), True))
            nS, subjT, sh, _ = self.np(depth)
            sh[2], sh[3] = "nsubj", v
            S += nS
            if sov:
                subjT.append(self._particle(t["topic"] if kind == CLAUSE_MAIN else t["subj"], sh))
        if aux is not None:
            S.append(aux)
        S.append(v)
        post = self._post_verbal(depth, kind, vclass, v, advS, advT)
        for ps in post:
            S += ps[0]

        T = self._target_order(kind, T, front, subjT, post, VT, AUXT, compT)
        if kind == CLAUSE_MAIN:
            p = [PUNCT, "PUNCT", "punct", v, 0]
            S.append(p)
            T.append((PUNCT, ((p, True),), False))
        return S, T, v

    def _verb(self, depth: int, kind: int, head_noun):
        """A clause's verb and tense: ``(verb class, source verb, source auxiliary or None, target verb words,
        target auxiliary words or None)``."""
        r = self.r
        lex, t, sov = self.lex, self.t, self.sov
        if kind == CLAUSE_OBJECT_RELATIVE:
            vl = lex.verbs_obj
        elif depth < self.max_depth and r() < self.comp_rate:
            vl = lex.verbs_sent
        else:
            vl = lex.verbs_plain
        vclass, sf, topts = vl[int(r() * len(vl))]
        tf = topts[0] if len(topts) == 1 else topts[int(r() * len(topts))]
        if kind == CLAUSE_MAIN:
            vrel, vhead = "root", None
        elif kind == CLAUSE_COMPLEMENT:
            vrel, vhead = "ccomp", None          # the caller sets the head
        else:
            vrel, vhead = "acl:relcl", head_noun
        u = r()
        aux = None
        AUXT = None
        a = self.aux_rate
        if u < a:
            if u < a * 0.5:                      # future: will V
                v = [sf[2], "VERB", vrel, vhead, 0]
                aux = ["will", "AUX", "aux", v, 0]
                if sov:
                    VT = [(tf[4], ((aux, True), (v, True)), False)]
                else:
                    AUXT = [(t["will"], ((aux, True),), False)]
                    VT = [(tf[2], ((v, True),), False)]
            else:                                # perfect: has V-en
                v = [sf[3], "VERB", vrel, vhead, 0]
                aux = ["has", "AUX", "aux", v, 0]
                AUXT = [(t["has"], ((aux, True),), False)]
                VT = [(tf[3], ((v, True),), False)]
        else:
            k = 0 if u < a + (1.0 - a) * 0.5 else 1
            v = [sf[k], "VERB", vrel, vhead, 0]
            VT = [(tf[k], ((v, True),), False)]
        return vclass, v, aux, VT, AUXT

    def _post_verbal(self, depth: int, kind: int, vclass: int, v: list, advS, advT) -> list:
        """The constituents after the verb, in source order, as ``(source words, target words, is complement
        clause)``: objects or a complement clause (by the verb's class), a PP, the adverb ``advS`` unless fronted."""
        r, t, sov = self.r, self.t, self.sov
        post = []
        if vclass == 2:
            nS, nT, nh, _ = self.np(depth)
            nh[2], nh[3] = "iobj", v
            if sov:
                nT.append(self._particle(t["iobj"], nh))
            post.append((nS, nT, False))
        if vclass in (1, 2) and kind != CLAUSE_OBJECT_RELATIVE:
            nS, nT, nh, _ = self.np(depth)
            nh[2], nh[3] = "obj", v
            if sov:
                nT.append(self._particle(t["obj"], nh))
            post.append((nS, nT, False))
        elif vclass == 3:
            cS, cT, cv = self.clause(depth + 1, CLAUSE_COMPLEMENT)
            cv[3] = v
            post.append((cS, cT, True))
        if depth < self.max_depth and self.nprep and r() < self.pp_rate:
            pS, pT, pn, _ = self.pp(depth + 1)
            pn[2], pn[3] = "obl", v
            post.append((pS, pT, False))
        if advS is not None:
            post.append(([advS], advT, False))
        return post

    def _target_order(self, kind: int, T: list, front, subjT: list, post: list, VT: list, AUXT, compT) -> list:
        """The clause's target words in the profile's order: ``T`` holds the leading material (complementiser,
        relative pronoun), ``front`` a fronted adverb, ``post`` the post-verbal constituents in source order
        as ``(source words, target words, is complement clause)``; the punctuation is not added here."""
        sov = self.sov
        if sov:
            if front:
                T = front + T
            T += subjT
            for ps in reversed(post):
                T += ps[1]
            T += VT
            if AUXT:
                T += AUXT
            if kind == CLAUSE_COMPLEMENT:
                T.append(compT)
        elif self.v2:
            middle, extra = [], []
            for ps in post:
                if ps[2]:
                    extra += ps[1]
                else:
                    middle += ps[1]
            if kind == CLAUSE_MAIN:
                fin, nonfin = (AUXT, VT) if AUXT else (VT, [])
                if front:
                    T = front + fin + subjT
                else:
                    T = subjT + fin
                T += middle
                T += nonfin
                T += extra
            else:
                T += subjT
                T += middle
                T += VT
                if AUXT:
                    T += AUXT
                T += extra
        else:
            if front:
                T = front + T
            T += subjT
            if AUXT:
                T += AUXT
            T += VT
            for ps in post:
                T += ps[1]
        return T
