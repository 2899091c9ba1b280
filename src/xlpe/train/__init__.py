"""NMT training: the loop (``trainer``), its options (``config``), losses and learning-rate schedules.
Checkpoints are in :mod:`xlpe.nn.checkpoint`, the shared runtime (devices, DDP, logs) in :mod:`xlpe.runtime`.

    from xlpe.train import DataConfig, TrainConfig, train
    result = train(TransformerConfig.from_preset("small"), TrainConfig(max_updates=10000, out="runs/x"),
                   DataConfig(train_src="train.de", train_tgt="train.en", subword_model="joint.model"))
"""

from xlpe.train.config import DataConfig, TrainConfig
from xlpe.train.losses import combine_losses, label_smoothed_nll, projected_label_smoothed_nll
from xlpe.train.schedule import Schedule, build_scheduler
from xlpe.train.trainer import TrainResult, train
from xlpe.train.validation import evaluate_loss

__all__ = [
    "DataConfig", "Schedule", "TrainConfig", "TrainResult", "build_scheduler", "combine_losses", "evaluate_loss",
    "label_smoothed_nll", "projected_label_smoothed_nll", "train",
]
