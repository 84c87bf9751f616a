"""Start-up workloads on a Hugging Face model, each stamping its own boundaries with ``time.perf_counter``.

``python startup_train.py MODE MODEL_DIR OUTPUTS``, ``HF_HUB_OFFLINE=1``; ``STARTUP_OUT`` set: the start-up recorder
on (tests/workloads/startup_probe.py), else the bridge stays off.

- ``save``: a tiny Llama built from a config (random weights, seeded), saved to ``MODEL_DIR`` with ``save_pretrained``
  (safetensors): what the other modes load;
- ``train``: the model loaded with ``from_pretrained``, compiled (``aot_eager``) and trained three steps on a
  ``DataLoader`` whose two workers do real work for each sample; the start-up ends at the first optimizer step;
- ``generate``: the same model loaded, its ``forward`` compiled, and ``generate``: it ends at the first token;
- ``seq2seq``: an encoder-decoder (a T5 built from its config), its ``forward`` compiled, and ``generate``, which calls
  the encoder first: it ends at the first token too, not at the encoder's return;
- ``assisted``: ``generate`` helped by a one-layer model of the same vocabulary (assisted decoding): the assistant's own
  ``generate`` drafts tokens before the model's first call; it ends at the model's first token (``token1``: the
  streamer's second ``put``, the first being the prompt), not at the assistant's first forward;
- ``sleep``: ``train``, with a ``time.sleep(SLEEP_S)`` in the user's model construction (plain code: unattributed).

Stamps (``startup_probe.stamp``): ``imports0/1`` around the imports, ``build0/1`` around the model's construction
(``weights0/1`` around ``from_pretrained`` inside it), ``data0/1`` around the first batch, ``step0/1`` around the
first step, ``step2`` at the second step's end (``generate``: ``gen0/1`` around ``generate``, ``token1`` when the
first token's scores reach a logits processor). ``OUTPUTS`` gets the losses or the generated tokens, exactly
(float.hex), to compare runs with the bridge on and off, and what torch's hooked functions are at the end
(``startup_probe.fingerprint``).
"""

from __future__ import annotations

import startup_probe  # noqa: I001 - first: the bridge's first code, as under torch-otel run

startup_probe.stamp("imports0")
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402
import torch._dynamo  # noqa: E402, F401 - what torch.compile and the optimizer import on first use
import torch.utils.data  # noqa: E402
from torch._dynamo.backends.registry import _lazy_import  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

_lazy_import()  # the compiler backends torch.compile imports on its first call
startup_probe.stamp("imports1")
mode, model_dir, outputs = sys.argv[1], sys.argv[2], sys.argv[3]
hf_logging.set_verbosity_error()
SEQ, VOCAB = 16, 256


class Tokens(torch.utils.data.Dataset):
    """Token sequences made by real work per sample (hashing), as a tokenizer's workers would."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        h = str(i).encode()
        ids = []
        for _ in range(SEQ):
            for _ in range(400):
                h = hashlib.sha256(h).digest()
            ids.append(h[0] % VOCAB)
        return torch.tensor(ids)


class Wrapped(torch.nn.Module):
    """The user's own model code around the loaded model (``sleep``: a slow construction)."""

    def __init__(self, inner: torch.nn.Module, sleep_s: float) -> None:
        super().__init__()
        time.sleep(sleep_s)
        self.inner = inner

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.inner(input_ids=ids, labels=ids).loss


def save() -> None:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        max_position_embeddings=64,
    )
    LlamaForCausalLM(cfg).save_pretrained(model_dir)


def train(sleep_s: float) -> list[str]:
    startup_probe.stamp("build0")
    startup_probe.stamp("weights0")
    loaded = LlamaForCausalLM.from_pretrained(model_dir)
    startup_probe.stamp("weights1")
    model = Wrapped(loaded, sleep_s)
    startup_probe.stamp("build1")
    compiled = torch.compile(model, backend="aot_eager")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(Tokens(), batch_size=4, num_workers=2)
    losses = []
    startup_probe.stamp("data0")
    it = iter(loader)
    batch = next(it)
    startup_probe.stamp("data1")
    for step in range(3):
        if step:
            batch = next(it)
        else:
            startup_probe.stamp("step0")
        loss = compiled(batch)
        loss.backward()
        opt.step()
        opt.zero_grad()
        startup_probe.stamp(("step1", "step2", "step3")[step])
        losses.append(loss.item().hex())
    return losses


def _generate(model: torch.nn.Module, ids: list[int], **kwargs: int) -> list[int]:
    """``model.forward`` compiled, then ``generate``: ``token1`` is stamped when the first token's scores reach a logits
    processor (the model's first call has returned)."""
    model.forward = torch.compile(model.forward, backend="aot_eager")

    def first_token(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if "token1" not in startup_probe._stamps:
            startup_probe.stamp("token1")
        return scores

    startup_probe.stamp("gen0")
    out = model.generate(torch.tensor([ids]), max_new_tokens=4, do_sample=False, logits_processor=[first_token], **kwargs)
    startup_probe.stamp("gen1")
    return [int(t) for t in out[0]]


def generate() -> list[int]:
    startup_probe.stamp("weights0")
    model = LlamaForCausalLM.from_pretrained(model_dir)
    startup_probe.stamp("weights1")
    return _generate(model, [1, 2, 3, 4], pad_token_id=0)


def seq2seq() -> list[int]:
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(d_model=32, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=2, d_kv=16, vocab_size=VOCAB)
    config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = 0, 0, 1
    return _generate(T5ForConditionalGeneration(config), [5, 6, 7, 8], min_new_tokens=4)


def assisted() -> list[int]:
    import copy

    from transformers.generation.streamers import BaseStreamer

    model = LlamaForCausalLM.from_pretrained(model_dir)
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = 1
    torch.manual_seed(1)
    draft = LlamaForCausalLM(config)
    model.forward = torch.compile(model.forward, backend="aot_eager")

    class FirstToken(BaseStreamer):
        puts = 0

        def put(self, value: torch.Tensor) -> None:
            self.puts += 1
            if self.puts == 2:  # the first put is the prompt
                startup_probe.stamp("token1")

        def end(self) -> None:
            pass

    startup_probe.stamp("gen0")
    out = model.generate(
        torch.tensor([[1, 2, 3, 4]]),
        assistant_model=draft,
        max_new_tokens=4,
        do_sample=False,
        streamer=FirstToken(),
        pad_token_id=0,
    )
    startup_probe.stamp("gen1")
    return [int(t) for t in out[0]]


if mode == "save":
    save()
else:
    if mode in ("generate", "seq2seq", "assisted"):
        result = {"generate": generate, "seq2seq": seq2seq, "assisted": assisted}[mode]()
    else:
        result = train(float(os.environ.get("SLEEP_S", "1.0")) if mode == "sleep" else 0.0)
    with open(outputs, "w", encoding="utf-8") as f:
        json.dump({"outputs": result, "fingerprint": startup_probe.fingerprint()}, f)
