"""Seed-aware significance (xlpe.evaluate.significance): seeds are not extra sentences."""

import numpy as np
import pytest

from xlpe.errors import ConfigError
from xlpe.evaluate.significance import (ONE_SEED, NoSeedTest, aer_score, aer_stats, compare, compare_texts,
                                        paired_t, tau_score, tau_stats, text_stats, welch)

WORDS = "the a cat dog sat ran on under mat rug big small red blue house tree".split()


def corpus(n=60, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, int(rng.integers(4, 9)))) for _ in range(n)]


def degrade(refs, rate, seed):
    """Each reference with about ``rate`` of its words replaced by a wrong one."""
    rng = np.random.default_rng(seed)
    return [" ".join(w if rng.random() > rate else "zzz" for w in r.split()) for r in refs]


REFS = corpus()


def test_welch_and_paired_t_on_a_textbook_example():
    # Welch's t-test, example 1 of the Wikipedia article: t = -2.46, df = 24.99, p = 0.021
    a = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
    b = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]
    t, df, p = welch(a, b)
    assert (round(t, 3), round(df, 2), round(p, 4)) == (-2.455, 24.99, 0.0214)
    t, df, p = paired_t(a, b)
    assert (round(t, 3), df, round(p, 4)) == (-2.686, 14.0, 0.0177)


def test_the_t_tests_agree_with_scipy_on_random_data():
    from scipy import stats
    rng = np.random.default_rng(7)
    for k, m in ((2, 2), (3, 3), (3, 5), (5, 4), (10, 10)):
        a, b = rng.normal(30, rng.uniform(0.1, 2), k), rng.normal(30.5, rng.uniform(0.1, 2), m)
        ref = stats.ttest_ind(a, b, equal_var=False)
        assert welch(a, b) == pytest.approx((ref.statistic, ref.df, ref.pvalue), rel=1e-12)
        if k == m:
            ref = stats.ttest_rel(a, b)
            assert paired_t(a, b) == pytest.approx((ref.statistic, k - 1, ref.pvalue), rel=1e-12)


def test_compare_tests_the_per_seed_corpus_scores_as_scipy_does():
    """The test across seeds of :func:`compare` is scipy's on the per-seed corpus scores, oriented so that the
    statistic is positive when the system is better (AER: lower is better)."""
    import sacrebleu
    from scipy import stats
    base_h, sys_h = [degrade(REFS, 0.4, s) for s in (1, 2, 3)], [degrade(REFS, 0.3, s) for s in (4, 5, 6)]
    base_s = [sacrebleu.corpus_bleu(h, [REFS]).score for h in base_h]
    sys_s = [sacrebleu.corpus_bleu(h, [REFS]).score for h in sys_h]
    for paired, ref in ((False, stats.ttest_ind(sys_s, base_s, equal_var=False)),
                        (True, stats.ttest_rel(sys_s, base_s))):
        c = compare_texts("bleu", base_h, sys_h, REFS, resamples=50, paired_seeds=paired)
        assert c.seed_test == ("paired-t" if paired else "welch")
        assert (c.statistic, c.df, c.p_seeds) == pytest.approx((ref.statistic, ref.df, ref.pvalue), rel=1e-9)
    from xlpe.io.alignments import Alignment
    gold = [Alignment({(0, 0), (1, 1)})] * 20
    hyp = {n: [aer_stats([Alignment({(0, 0), (1, 1)})] * n + [Alignment({(0, 1)})] * (20 - n), gold)]
           for n in (12, 13, 15, 16, 17, 19)}
    base, system = [hyp[12][0], hyp[15][0], hyp[13][0]], [hyp[16][0], hyp[19][0], hyp[17][0]]
    c = compare("AER", base, system, aer_score, higher_is_better=False, resamples=50)
    ref = stats.ttest_ind([-aer_score(s.sum(0)) for s in system], [-aer_score(s.sum(0)) for s in base],
                          equal_var=False)
    assert c.statistic > 0 and (c.statistic, c.p_seeds) == pytest.approx((ref.statistic, ref.pvalue), rel=1e-9)


def test_runs_that_do_not_vary_give_no_test_across_seeds():
    """k copies of one output are one seed, not k: no t-test (not p = 0), and the verdict says which test is
    missing and why; the bootstrap, which copies do not change, decides as it does for one seed."""
    base, system = [degrade(REFS, 0.3, 1)], [degrade(REFS, 0.25, 2)]
    one = compare_texts("bleu", base, system, REFS, resamples=300, seed=5)
    assert one.p_seeds is None and one.reason == ONE_SEED and "one seed" in one.verdict()
    for paired, test in ((False, "Welch's t-test"), (True, "the paired t-test")):
        three = compare_texts("bleu", base * 3, system * 3, REFS, resamples=300, seed=5, paired_seeds=paired)
        assert three.delta != 0 and three.delta == pytest.approx(one.delta)
        assert three.p_bootstrap == pytest.approx(one.p_bootstrap)
        assert three.seed_test == "none" and three.p_seeds is None and three.statistic is None
        assert three.reason.startswith(f"{test} is undefined") and "do not vary" in three.reason
        assert f"no test across seeds: {test} is undefined" in three.verdict()
        assert three.significant() == one.significant()
        assert three.verdict().split(" (")[0] == one.verdict().split(" (")[0]
    for fn, a, b in ((welch, [1.0, 1.0], [2.0, 2.0]), (paired_t, [1.0, 2.0], [2.0, 3.0]), (welch, [1.0], [2.0, 3.0])):
        with pytest.raises(NoSeedTest):
            fn(a, b)
    assert welch([30.0] * 3, [30.2, 30.3, 30.25])[2] < 1         # one side without variance: Welch's test still runs


def test_paired_or_welch_as_documented_and_the_claim_names_its_test():
    base = [degrade(REFS, 0.4, s) for s in (1, 2, 3)]
    system = [degrade(REFS, 0.3, s) for s in (4, 5, 6)]
    why = "run i of both systems shares its seed"
    paired = compare_texts("bleu", base, system, REFS, resamples=100, paired_seeds=True, pairing=why)
    assert paired.seed_test == "paired-t" and paired.df == 2 and paired.pairing == why
    claim = paired.claim()
    assert claim.startswith(paired.verdict()) and f"the t-test is paired because {why}" in claim
    assert f"Welch's test gives p={paired.p_welch:.3f}" in claim and "each with the outputs of all its seeds" in claim
    assert paired.p_welch == pytest.approx(welch(_bleus(system), _bleus(base))[2])
    unpaired = compare_texts("bleu", base, system, REFS, resamples=100)
    assert unpaired.seed_test == "welch" and "the t-test is Welch's (unpaired) because the runs of the two" \
        in unpaired.claim() and unpaired.p_welch == unpaired.p_seeds
    uneven = compare_texts("bleu", base[:2], system, REFS, resamples=100, paired_seeds=True)
    assert uneven.seed_test == "welch" and "3 and 2 runs cannot be paired" in uneven.claim()
    single = compare_texts("bleu", base[:1], system[:1], REFS, resamples=100, paired_seeds=True)
    assert single.claim() == single.verdict() and "bootstrap p=" in single.claim() and ONE_SEED in single.claim()


def _bleus(seeds):
    import sacrebleu
    return [sacrebleu.corpus_bleu(h, [REFS]).score for h in seeds]


def test_statistics_give_sacrebleus_own_corpus_scores():
    import sacrebleu
    hyps = degrade(REFS, 0.3, 1)
    for name, ref_score in (("bleu", sacrebleu.corpus_bleu(hyps, [REFS]).score),
                            ("chrf", sacrebleu.corpus_chrf(hyps, [REFS]).score)):
        stats, score = text_stats(name, hyps, REFS)
        assert stats.shape[0] == len(REFS) and score(stats.sum(0)) == pytest.approx(ref_score, abs=1e-9)


def test_aer_and_tau_statistics_equal_the_corpus_scores():
    from xlpe.evaluate.aer import corpus_aer
    from xlpe.evaluate.reorder_metrics import corpus_reorder_scores
    from xlpe.io.alignments import Alignment
    gold = [Alignment({(0, 0), (1, 1)}, {(1, 2)}), Alignment({(0, 1)}), Alignment({(2, 2), (1, 0)})]
    hyp = [Alignment({(0, 0), (1, 2)}), Alignment({(0, 0)}), Alignment({(2, 2), (1, 0), (0, 1)})]
    assert aer_score(aer_stats(hyp, gold).sum(0)) == pytest.approx(corpus_aer(hyp, gold).aer)
    orders, ranks = [[1, 0, 2], [0, 1, 2, 3], [3, 2, 1, 0]], [[0, 1, 2], [0, 0, 1, 2], [0, 1, 2, 3]]
    assert tau_score(tau_stats(orders, ranks).sum(0)) == pytest.approx(corpus_reorder_scores(orders, ranks)["tau"])


def test_identical_systems_give_bootstrap_p_one_and_no_t_test():
    seeds = [degrade(REFS, 0.3, s) for s in (1, 2, 3)]
    c = compare_texts("bleu", seeds, seeds, REFS, resamples=200, seed=1, paired_seeds=True)
    assert c.p_bootstrap == 1.0 and c.delta == 0 and c.p_seeds is None and "differences do not vary" in c.reason
    assert c.verdict().startswith("not significant")


def test_a_system_better_on_every_sentence_and_seed_is_significant():
    base = [degrade(REFS, 0.5, s) for s in (1, 2, 3)]
    system = [degrade(REFS, 0.05, s) for s in (4, 5, 6)]
    c = compare_texts("bleu", base, system, REFS, resamples=500, seed=3)
    assert c.delta > 0 and c.p_bootstrap < 0.01 and c.p_seeds < 0.01 and c.ci95[0] > 0
    assert c.verdict().startswith("significant")
    worse = compare_texts("chrf", system, base, REFS, resamples=500, seed=3)       # the other way round
    assert worse.delta < 0 and worse.p_bootstrap > 0.99 and worse.ci95[1] < 0
    assert worse.verdict().startswith("significantly worse") and not worse.significant()
    assert not c.worse()


def test_lower_is_better_metrics_and_bad_input():
    from xlpe.io.alignments import Alignment
    gold = [Alignment({(0, 0), (1, 1)})] * 30
    good = [aer_stats([Alignment({(0, 0), (1, 1)})] * 30, gold)] * 2
    bad = [aer_stats([Alignment({(0, 1)})] * 30, gold)] * 2
    c = compare("AER", bad, good, aer_score, higher_is_better=False, resamples=100)
    assert c.delta > 0 and c.p_bootstrap < 0.02                                      # lower AER = better
    with pytest.raises(ConfigError, match="same sentences"):
        compare("AER", [good[0][:10]], good, aer_score)
    with pytest.raises(ConfigError, match="at least one seed"):
        compare("AER", [], good, aer_score)


def test_several_reference_streams_and_chrf_plus_plus_give_sacrebleus_scores():
    import sacrebleu
    hyps, refs2 = degrade(REFS, 0.3, 1), degrade(REFS, 0.2, 9)
    stats, score = text_stats("bleu", hyps, [REFS, refs2])
    assert score(stats.sum(0)) == pytest.approx(sacrebleu.corpus_bleu(hyps, [REFS, refs2]).score, abs=1e-9)
    stats, score = text_stats("chrf++", hyps, REFS)
    assert score(stats.sum(0)) == pytest.approx(sacrebleu.corpus_chrf(hyps, [REFS], word_order=2).score, abs=1e-9)
    with pytest.raises(ConfigError, match="60 hypotheses for 59 references"):
        text_stats("bleu", hyps, [REFS, refs2[:-1]])


def test_evaluate_cli_groups_seed_files_per_system(tmp_path, capsys):
    """``xlpe evaluate --seeds K``: K files per system, the seed-aware tests against the first system."""
    import json

    import sacrebleu

    from xlpe.cli import main
    (tmp_path / "ref").write_text("\n".join(REFS) + "\n")
    files = {}
    for name, rate, seeds in (("base", 0.5, (1, 2, 3)), ("good", 0.05, (4, 5, 6)), ("same", 0.5, (1, 2, 3))):
        for s in seeds:
            files.setdefault(name, []).append(tmp_path / f"{name}.{s}")
            files[name][-1].write_text("\n".join(degrade(REFS, rate, s)) + "\n")
    hyp = [str(f) for n in ("base", "good", "same") for f in files[n]]
    assert main(["evaluate", "--ref", str(tmp_path / "ref"), "--hyp", *hyp, "--seeds", "3", "--names", "base",
                 "good", "same", "--metrics", "bleu", "--bootstrap", "200", "--paired-seeds", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    per_seed = [sacrebleu.corpus_bleu(degrade(REFS, 0.05, s), [REFS]).score for s in (4, 5, 6)]
    assert res["systems"]["good"]["bleu"]["per_seed"] == pytest.approx(per_seed)
    good, same = res["comparisons"]["good"]["bleu"], res["comparisons"]["same"]["bleu"]
    assert good["p_bootstrap"] < 0.01 and good["p_seeds"] < 0.01 and good["seed_test"] == "paired-t"
    assert good["verdict"].startswith("significant")
    assert same["p_bootstrap"] == 1.0 and same["verdict"].startswith("not significant")
    assert main(["evaluate", "--ref", str(tmp_path / "ref"), "--hyp", *hyp[:6], "--seeds", "3",
                 "--metrics", "bleu", "--bootstrap", "100"]) == 0
    text = capsys.readouterr().out
    assert "good.4 vs base.1, bleu: significant" in text        # default names: each system's first file
    for bad, why in ((hyp[:5], "same number of files"), (hyp[:6] + ["--names", "a", "b", "c"], "one name per 3")):
        assert main(["evaluate", "--ref", str(tmp_path / "ref"), "--hyp", *bad, "--seeds", "3"]) != 0
        assert why in capsys.readouterr().err
