"""Real-world model code: tiny Hugging Face ``transformers`` models built from configs (random weights, no hub).

``python hf_models.py OUT MODE``, with the bridge on (``torch_otel.auto``); ``HF_HUB_OFFLINE=1``. Backend ``eager``:
dynamo's work (graph breaks, guards, recompiles) is the model's, at a fraction of a compiler's time.

- ``gpt2``: a GPT-2 trained four steps, its sequence length changing every step (8, 12, 16, 20), compiled as users
  compile it (``torch.compile(model)``: automatic dynamic shapes on). Its loss calls ``logger.warning_once``: a graph
  break torch cannot resume from, which ends the frame of ``forward``;
- ``gpt2_static``: the same with ``torch.compile(model, dynamic=False)``: every frame recompiles at every step;
- ``gpt2_static_marked``: the same, with the fix the run summary names for the frame the user's call enters:
  ``torch._dynamo.maybe_mark_dynamic(input_ids, 1)`` on the tensor passed as ``input_ids``, before the call;
- ``gpt2_batches``: the same with ``dynamic=False``, trained on batches of 4, 8, 2, 1 and 3 sequences; and
  ``gpt2_batches_fixed``, with the summary's fix applied (automatic dynamic shapes back on: ``torch.compile(model)``);
- ``generate_static``, ``generate_dynamic``: a Llama's ``generate`` with a static cache and a dynamic cache, its
  ``forward`` compiled;
- ``two_models``: two GPT-2s compiled through the same library code, one with ``dynamic=False`` (called from one line)
  and one with ``dynamic=True`` (from another), each trained on the same lengths.
- ``llama_modes``: a Llama in eval mode called under ``no_grad``, then ``inference_mode`` (a dispatch key set
  mismatch), then with one layer's ``self_attn`` training and its ``attention_dropout`` changed (a value guard on a
  module path);
- ``llama_train``, ``llama_train_dynamic``, ``llama_train_inductor``: a Llama trained three steps on one shape
  (``torch.compile(model)``: AOTAutograd compiles its backward lazily, at the first ``backward()``), the same with
  ``dynamic=True`` (the backward is compiled with its forward), and with inductor (on a warm
  ``TORCHINDUCTOR_CACHE_DIR``, AOTAutograd's cache serves the forward and its backward together);
  ``llama_train_static``: with ``dynamic=False``, its sequence length changing every step (8, 12, 16).

It writes ``OUT/counters.json`` (torch's own ``counters``: graph breaks, unimplemented, recompiles by frame) and
``OUT/metrics.txt`` (this process's /metrics exposition) once the bridge processed every compile.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

import torch_otel.auto  # noqa: F401, E402  (the bridge, as torch-otel run turns it on)

out = Path(sys.argv[1])
mode = sys.argv[2]

from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()
torch.manual_seed(0)
LENGTHS = (8, 12, 16, 20)


def gpt2() -> GPT2LMHeadModel:
    return GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=128, n_positions=64))


def train(model: torch.nn.Module, mark: bool = False) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for seq in LENGTHS:
        ids = torch.randint(0, 128, (2, seq))
        if mark:
            torch._dynamo.maybe_mark_dynamic(ids, 1)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()


if mode.startswith("gpt2_batches"):
    compiled = torch.compile(gpt2(), backend="eager", dynamic=None if mode == "gpt2_batches_fixed" else False)
    opt = torch.optim.SGD(compiled.parameters(), lr=0.01)
    for batch in (4, 8, 2, 1, 3):
        ids = torch.randint(0, 128, (batch, 8))
        compiled(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
elif mode.startswith("gpt2"):
    compiled = torch.compile(gpt2(), backend="eager", dynamic=False if mode.startswith("gpt2_static") else None)
    train(compiled, mark=mode == "gpt2_static_marked")
elif mode.startswith("generate"):
    llama = LlamaForCausalLM(
        LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=256,
        )
    ).eval()
    llama.forward = torch.compile(llama.forward, backend="eager")
    prompt = torch.randint(0, 256, (1, 8))
    cache = "static" if mode == "generate_static" else None
    with torch.no_grad():
        llama.generate(prompt, max_new_tokens=6, do_sample=False, cache_implementation=cache, pad_token_id=0)
elif mode == "llama_modes":
    llama = LlamaForCausalLM(
        LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            vocab_size=128,
        )
    ).eval()
    compiled = torch.compile(llama, backend="eager")
    attn = llama.model.layers[1].self_attn
    changes = {
        "train": attn.train,  # its dropout is read now (a recompile)
        "dropout": lambda: setattr(attn, "attention_dropout", 0.25),  # and guarded: a recompile for its value
    }
    for grad_mode, change in (
        (torch.no_grad, None),
        (torch.inference_mode, None),
        (torch.no_grad, "train"),
        (torch.no_grad, "dropout"),
    ):
        if change:
            changes[change]()
        ids = torch.randint(0, 128, (1, 8))
        with grad_mode():
            compiled(input_ids=ids)  # one call site: one frame
elif mode.startswith("llama_train"):
    llama = LlamaForCausalLM(
        LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            vocab_size=128,
        )
    )
    backend = "inductor" if mode == "llama_train_inductor" else "aot_eager"
    dynamic = {"llama_train_dynamic": True, "llama_train_static": False}.get(mode)
    if mode == "llama_train_static":
        llama.gradient_checkpointing_enable()  # as a training run that saves memory does
    compiled = torch.compile(llama, backend=backend, dynamic=dynamic)
    opt = torch.optim.SGD(llama.parameters(), lr=0.01)
    for step in range(3):
        # one shape; llama_train_static: the sequence length changes every step (8, 12, 16)
        ids = torch.randint(0, 128, (2, 8 + 4 * step if mode == "llama_train_static" else 16))
        compiled(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
elif mode == "two_models":
    static = torch.compile(gpt2(), backend="eager", dynamic=False)
    dynamic = torch.compile(gpt2(), backend="eager", dynamic=True)
    for seq in LENGTHS:
        ids = torch.randint(0, 128, (2, seq))
        static(input_ids=ids, labels=ids).loss.backward()
        dynamic(input_ids=ids, labels=ids).loss.backward()
else:
    raise SystemExit(f"unknown mode {mode!r}")

from prometheus_client import REGISTRY, generate_latest  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

import torch_otel  # noqa: E402

torch_otel.force_flush()
out.mkdir(parents=True, exist_ok=True)


def _shortened(counts: dict[object, int]) -> dict[str, int]:
    """torch's counts by their message's first 300 characters, summed: messages that differ only further on (their
    "Developer debug context" names objects by id) are one key here, and none of their counts is lost."""
    out: dict[str, int] = {}
    for m, n in counts.items():
        out[str(m)[:300]] = out.get(str(m)[:300], 0) + n
    return out


(out / "counters.json").write_text(json.dumps({k: _shortened(counters[k]) for k in ("graph_break", "unimplemented", "stats")}))
(out / "metrics.txt").write_bytes(generate_latest(REGISTRY))
