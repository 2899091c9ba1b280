"""``xlpe export``: a trained model as a CTranslate2 model directory (:func:`xlpe.infer.export.export_model`)."""

from __future__ import annotations

import argparse
import json

from xlpe.infer.export import FORMATS, QUANTIZATIONS, export_model


def add_cli_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, help="a trained (or averaged) xlpe checkpoint")
    p.add_argument("--output", required=True, help="the model directory to write")
    p.add_argument("--format", choices=FORMATS, default="ctranslate2", help="the target engine")
    p.add_argument("--quantization", default=None, choices=QUANTIZATIONS,
                   help="CTranslate2 weight type, e.g. int8, int8_float32, float16 (default: float32)")
    p.add_argument("--force", action="store_true", help="replace --output if it exists")


def cli_main(args: argparse.Namespace) -> int:
    out = export_model(args.checkpoint, args.output, format=args.format, quantization=args.quantization,
                       force=args.force)
    print(json.dumps({"output": str(out), "format": args.format, "quantization": args.quantization or "float32"}))
    return 0
