"""A spatial transformer front end: a localisation net predicts an affine transform (initialised to
the identity), ``affine_grid`` and bilinear ``grid_sample`` warp the image, then pixel_unshuffle,
InstanceNorm2d, hardtanh and a global max pool feed a classifier."""

import torch
import torch.nn.functional as F
from torch import nn


class SpatialTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.loc = nn.Sequential(nn.Conv2d(3, 8, 5, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                                 nn.Linear(128, 6))
        nn.init.zeros_(self.loc[-1].weight)
        with torch.no_grad():
            self.loc[-1].bias.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0]))
        self.features = nn.Sequential(nn.Conv2d(12, 32, 3, padding=1), nn.InstanceNorm2d(32, affine=True),
                                      nn.Hardtanh(-2.0, 2.0))
        self.head = nn.Linear(32, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        theta = self.loc(images).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(images.shape), align_corners=False)
        warped = F.grid_sample(images, grid, mode="bilinear", padding_mode="border", align_corners=False)
        h = self.features(F.pixel_unshuffle(warped, 2))
        return self.head(torch.amax(h, dim=(2, 3)))


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return SpatialTransformer().eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(8, 3, 64, 64, generator=torch.Generator().manual_seed(1)),)
