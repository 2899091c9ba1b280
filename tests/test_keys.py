"""The configs that enter cache keys whole (xlpe.keys.config_material) keep the keys of stages made before a new
option: the fields that always enter are the ones those keys were made with, and every field added since is declared
``when_set``. A new option added without ``when_set`` fails here (and would retrain every cached run)."""

from __future__ import annotations

import dataclasses

import pytest

from xlpe.align.crossalign_train import TrainConfig as CrossAlignTrain
from xlpe.config import option
from xlpe.data.synthetic import SyntheticConfig
from xlpe.experiments.engine.stages import DataSpec
from xlpe.keys import WHEN_SET, config_material

#: the fields each config's keys were made with (they always enter, default or not)
KEYED = {
    SyntheticConfig: ["profile", "seed", "lexicon_seed", "nouns", "verbs", "adjectives", "adverbs", "prepositions",
                      "max_len", "max_depth", "adj_rate", "pp_rate", "rel_rate", "comp_rate", "adv_rate",
                      "front_rate", "aux_rate", "one_to_many", "one_to_many_link", "many_to_one", "particle_link",
                      "synonym_rate", "drop_rate", "insert_rate"],
    DataSpec: ["builtin", "builtin_sizes", "train_src", "train_tgt", "dev_src", "dev_tgt", "test_src", "test_tgt",
               "extra_tests", "train_align", "gold_src", "gold_tgt", "gold_align", "gold_base", "gold_reverse",
               "exclude_gold", "gold_dev_lines", "train_trees", "dev_trees", "test_trees", "align_lowercase"],
    CrossAlignTrain: ["batch_size", "tlm_lr", "tlm_epochs", "tlm_max_steps", "tlm_accumulation", "mask_prob",
                      "tlm_trainable", "ssa_lr", "ssa_epochs", "ssa_max_steps", "ssa_accumulation", "label_threshold",
                      "ssa_trainable", "freeze_embeddings", "clip_norm", "adam_eps", "weight_decay", "adam", "seed",
                      "amp", "device", "save_every", "keep_last", "log_every", "resume", "progress"],
}


@pytest.mark.parametrize("cls", list(KEYED), ids=lambda c: c.__name__)
def test_fields_added_since_the_keys_were_made_enter_only_when_set(cls):
    always = [f.name for f in dataclasses.fields(cls) if not f.metadata.get(WHEN_SET)]
    assert always == KEYED[cls], "a field added to a config that keys hold whole needs when_set=True"


def test_a_when_set_field_enters_only_when_it_differs_from_its_default():
    @dataclasses.dataclass
    class Cfg:
        a: int = option(1, "an option keys always held")
        b: str = option("paper", "an option added later", when_set=True)

    assert config_material(Cfg()) == {"a": 1}
    assert config_material(Cfg(b="other")) == {"a": 1, "b": "other"}
    assert config_material(Cfg(a=2), exclude=["a"]) == {}
    assert config_material(CrossAlignTrain()) == {
        k: v for k, v in dataclasses.asdict(CrossAlignTrain()).items() if k in KEYED[CrossAlignTrain]}
