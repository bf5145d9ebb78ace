"""New weights into a running vLLM engine's model in place, the cheapest way
vLLM's CPU backend allows (`VLLMSampler.load_weights`, on CPUs).

vLLM's `reload_weights` puts every layer back on the meta device, allocates it
afresh, loads it, re-packs it and copies the result into the old storage: a
copy into fresh memory (page faults included), the re-pack, and for the
layers it keeps plain (embedding, norms) a second copy. On a CPU the re-pack
itself cannot be avoided: vLLM keeps a linear layer's weight only inside a
oneDNN handle (packed, its plain tensor dropped) and has no call that updates
a handle, so every sync builds new ones. This loader does only that:

- once per engine, a plain weight per packed layer ("staging", built from the
  model-format metadata vLLM recorded when it loaded the model);
- each sync, vLLM's own `model.load_weights` (its name mapping, the fused
  qkv / gate_up shards) into the staging weights and, for the layers kept
  plain, into their parameters in place; then each layer's
  `process_weights_after_loading`: the re-pack, the one pass that must run;
- zero copy where the incoming tensors allow it: when a staging weight is
  exactly a run of the incoming tensors in one buffer (the learner's shared
  memory, its q, k, v or gate, up slots adjacent in vLLM's shard order, same
  dtype), the staging weight becomes a view of that memory. vLLM's loader
  then copies each shard onto itself, which torch skips, and the re-pack reads
  the learner's memory directly. A view is taken only after one sync through
  the staging memory showed it holds exactly what vLLM's loader put there.

Only for unquantized models; anything else takes `reload_weights`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

import torch


@dataclass
class _Packed:
    """A layer whose plain weight vLLM drops after packing it."""

    name: str  # the parameter's name in vLLM's model
    module: torch.nn.Module
    staging: torch.nn.Parameter  # handed to vLLM's weight loader each sync
    own: torch.Tensor | None  # the staging weight's own memory (None while it views the incoming buffer)
    verified: int | None = None  # data_ptr of an incoming region shown to hold exactly this weight


@dataclass
class InPlaceLoader:
    """Per model (kept across syncs): its packed layers and the layers to re-pack."""

    model: torch.nn.Module
    packed: list[_Packed]
    repack: list[torch.nn.Module]
    timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def for_model(cls, model: torch.nn.Module) -> InPlaceLoader:
        from vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase
        from vllm.model_executor.model_loader.reload.layerwise import _get_original_loader, get_layerwise_info
        from vllm.model_executor.model_loader.reload.meta import materialize_meta_tensor
        from vllm.model_executor.model_loader.reload.sanitize import restore_layer_refs

        packed, repack = [], []
        for name, module in model.named_modules():
            method = getattr(module, "quant_method", None)
            weight = getattr(module, "weight", None)
            if not isinstance(method, QuantizeMethodBase) or not isinstance(weight, torch.Tensor):
                continue
            repack.append(module)
            meta = get_layerwise_info(module).restore_metadata[0].get("weight")
            if meta is None or tuple(weight.shape) == tuple(meta.shape):
                continue  # kept plain (the embedding): loaded in place
            with torch.no_grad():
                staging = restore_layer_refs(materialize_meta_tensor(meta), module)
                staging.zero_()  # fault its pages in now, not during the first sync
            # A layer-wise reload (reload_weights, a weight transfer) wraps the recorded loaders in one
            # that buffers for itself, and outside such a reload drops what it is given.
            staging.weight_loader = _get_original_loader(staging)
            packed.append(_Packed(f"{name}.weight" if name else "weight", module, staging, staging.data))
        return cls(model, packed, repack)

    @torch.no_grad()
    def load(self, tensors: Iterable[tuple[str, torch.Tensor]], packed_modules: dict[str, list[str]]) -> set[str]:
        """Load `tensors` (Hugging Face names, as `reload_weights` takes them); the names vLLM loaded."""
        started = time.perf_counter()
        incoming = dict(tensors)
        regions = [_region(p, incoming, packed_modules) for p in self.packed]
        for p, region in zip(self.packed, regions):
            if region is not None and p.verified == region.data_ptr():
                p.staging.data, p.own = region, None  # vLLM's copies onto it are no-ops
            elif p.own is None or p.staging.data_ptr() != p.own.data_ptr():
                p.own = p.own if p.own is not None else torch.empty_like(p.staging)
                p.staging.data = p.own
            p.module.weight = p.staging
        mapped = time.perf_counter()
        loaded = self.model.load_weights(incoming.items())
        copied = time.perf_counter()
        for p, region in zip(self.packed, regions):
            # After a sync through its own memory: does the region hold exactly what vLLM loaded there?
            if region is not None and p.own is not None and p.verified != region.data_ptr():
                p.verified = region.data_ptr() if torch.equal(p.staging, region) else None
        verified = time.perf_counter()
        for module in self.repack:
            module.quant_method.process_weights_after_loading(module)
            if hasattr(module, "update_param_tp_status"):
                module.update_param_tp_status()
        done = time.perf_counter()
        self.timings = {
            "map_s": mapped - started,
            "load_s": copied - mapped,
            "verify_s": verified - copied,
            "repack_s": done - verified,
            "views": float(sum(p.own is None for p in self.packed)),
            "packed": float(len(self.packed)),
        }
        return set(loaded or ())


def _region(p: _Packed, incoming: dict[str, torch.Tensor], packed_modules: dict[str, list[str]]) -> torch.Tensor | None:
    """A view of the incoming memory laid out exactly as `p`'s weight, if its parts lie there
    back to back in vLLM's shard order (`packed_modules_mapping`); else None."""
    prefix, _, rest = p.name.rpartition(".")  # "...qkv_proj", "weight"
    owner, _, leaf = prefix.rpartition(".")
    names = [f"{owner}.{part}.{rest}" if owner else f"{part}.{rest}" for part in packed_modules.get(leaf, [leaf])]
    parts = [incoming.get(n) for n in names]
    if any(t is None for t in parts):
        return None
    first = parts[0]
    assert first is not None
    storage = first.untyped_storage().data_ptr()
    offset = first.storage_offset()
    for t in parts:
        assert t is not None
        if (
            t.dtype != p.staging.dtype
            or not t.is_contiguous()
            or t.untyped_storage().data_ptr() != storage
            or t.storage_offset() != offset
        ):
            return None
        offset += t.numel()
    if offset - first.storage_offset() != p.staging.numel() or not p.staging.is_contiguous():
        return None
    return first.as_strided(p.staging.shape, p.staging.stride())


_LOADERS: WeakKeyDictionary[torch.nn.Module, InPlaceLoader] = WeakKeyDictionary()


def supports_in_place(worker: Any) -> bool:
    """Whether this vLLM worker can take `load_in_place` (a CPU, an unquantized model)."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu() and worker.vllm_config.model_config.quantization is None


def load_in_place(worker: Any, tensors: Iterable[tuple[str, torch.Tensor]]) -> dict[str, float]:
    """Run in a vLLM worker through `collective_rpc`: load `tensors` into its model in place.
    Returns the seconds of each part (and how many packed weights were views of the incoming memory)."""
    from vllm.config import set_current_vllm_config

    started = time.perf_counter()
    model = worker.model_runner.get_model()
    loader = _LOADERS.get(model)
    if loader is None:
        loader = _LOADERS[model] = InPlaceLoader.for_model(model)
    expected = {name for name, _ in model.named_parameters()}
    with set_current_vllm_config(worker.vllm_config):
        loaded = loader.load(tensors, getattr(model, "packed_modules_mapping", {}))
    missing = expected - loaded - {"lm_head.weight"}  # a tied head is the embedding
    if missing:
        raise ValueError(f"weights missing from the sync, the engine would mix versions: {sorted(missing)[:5]}")
    for reset in ("reset_lora_state", "reset_encoder_cache", "reset_mm_cache"):  # as reload_weights does
        getattr(worker.model_runner, reset, lambda: None)()
    return {**loader.timings, "total_s": time.perf_counter() - started}
