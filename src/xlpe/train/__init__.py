"""NMT training: the loop (``trainer``), losses, learning-rate schedules and checkpoints.

    from xlpe.train import DataConfig, TrainConfig, train
    result = train(TransformerConfig.from_preset("small"), TrainConfig(max_updates=10000, out="runs/x"),
                   DataConfig(train_src="train.de", train_tgt="train.en", subword_model="joint.model"))
"""

from xlpe.train.checkpoint import (average_checkpoints, latest_checkpoint, load_checkpoint, load_model,
                                   save_checkpoint)
from xlpe.train.losses import combine_losses, label_smoothed_nll
from xlpe.train.schedule import Schedule, build_scheduler
from xlpe.train.trainer import DataConfig, TrainConfig, TrainResult, evaluate_loss, train

__all__ = [
    "DataConfig", "Schedule", "TrainConfig", "TrainResult", "average_checkpoints", "build_scheduler",
    "combine_losses", "evaluate_loss", "label_smoothed_nll", "latest_checkpoint", "load_checkpoint", "load_model",
    "save_checkpoint", "train",
]
