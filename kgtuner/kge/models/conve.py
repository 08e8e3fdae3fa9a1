"""ConvE: ``f = ReLU(fc(ReLU(conv([h; r]))))^T t`` (Dettmers et al. 2018).

``h`` and ``r`` are reshaped to ``height x dim/height`` images and stacked; the query vector
lives in entity space, so scoring all entities is one matrix product. ConvE has no closed
form for head queries: it always uses reciprocal relations (``inverse`` is forced on).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from kgtuner.errors import ConfigError
from kgtuner.kge.models.base import KGEModel


def default_height(dim: int) -> int:
    """Largest divisor of ``dim`` not above ``sqrt(dim)`` (200 -> 10 x 20, 1000 -> 25 x 40)."""
    return max(d for d in range(1, int(math.isqrt(dim)) + 1) if dim % d == 0)


class ConvE(KGEModel):
    """ConvE with options ``channels`` (32), ``kernel`` (3), ``height`` (None: ``default_height``),
    ``hidden_dropout`` (0.0, on the feature maps; ``dropout`` acts on the embeddings) and
    ``batch_norm`` (True: batch normalisation of the input image, the feature maps and the
    projected query, as in the ConvE paper)."""

    NAME = "conve"
    NEEDS_INVERSE = True
    OPTIONS = {"channels": 32, "kernel": 3, "height": None, "hidden_dropout": 0.0, "batch_norm": True}

    @classmethod
    def check_options(cls, dim, options):
        opts = super().check_options(dim, options)
        height = opts["height"] or default_height(dim)
        if dim % height:
            raise ConfigError(f"model.options.height={height} must divide dim={dim} for 'conve'")
        width = dim // height
        k = int(opts["kernel"])
        if k < 1 or k > min(2 * height, width) or int(opts["channels"]) < 1:
            raise ConfigError(f"ConvE needs 1 <= kernel <= min(2*height, width) = {min(2 * height, width)} "
                              f"and channels >= 1 (got kernel={k}, channels={opts['channels']}, dim={dim})")
        if not 0.0 <= float(opts["hidden_dropout"]) < 1.0:
            raise ConfigError(f"model.options.hidden_dropout must be in [0, 1), got {opts['hidden_dropout']}")
        return {**opts, "height": int(height), "kernel": k, "channels": int(opts["channels"])}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        o = self.options
        self.height, self.width = o["height"], self.dim // o["height"]
        self.conv = nn.Conv2d(1, o["channels"], o["kernel"])
        n_feat = o["channels"] * (2 * self.height - o["kernel"] + 1) * (self.width - o["kernel"] + 1)
        self.fc = nn.Linear(n_feat, self.dim)
        bn = bool(o["batch_norm"])
        self.bn0 = nn.BatchNorm2d(1) if bn else nn.Identity()
        self.bn1 = nn.BatchNorm2d(o["channels"]) if bn else nn.Identity()
        self.bn2 = nn.BatchNorm1d(self.dim) if bn else nn.Identity()

    def reset_dense_parameters(self):
        for layer in (self.conv, self.fc, self.bn0, self.bn1, self.bn2):
            if hasattr(layer, "reset_parameters"):
                layer.reset_parameters()

    def tail_query(self, h, r):
        img = torch.cat([h.view(-1, 1, self.height, self.width), r.view(-1, 1, self.height, self.width)], dim=2)
        x = F.relu(self.bn1(self.conv(self.bn0(img))))
        if self.options["hidden_dropout"] > 0 and self.training:
            x = F.dropout(x, self.options["hidden_dropout"], training=True)
        return F.relu(self.bn2(self.fc(x.flatten(1))))

    def head_query(self, r, t):
        raise RuntimeError("ConvE scores heads through reciprocal relations only")

    def export_embeddings(self):
        out = super().export_embeddings()
        for name, p in self.state_dict().items():
            if not name.startswith(("entity.", "relation.")):
                out[f"param:{name}"] = p.detach().float().cpu().numpy()
        return out
