"""A point-cloud edge convolution (DGCNN-style): k nearest neighbours by pairwise distances, the
neighbours gathered by advanced indexing, edge features max-pooled over neighbours, BatchNorm2d
and LeakyReLU, a global max and mean pool, a classifier."""

import torch
import torch.nn.functional as F
from torch import nn


def knn(x: torch.Tensor, k: int) -> torch.Tensor:
    inner = -2 * torch.matmul(x.transpose(2, 1), x)
    sq = torch.sum(x ** 2, dim=1, keepdim=True)
    dist = -sq - inner - sq.transpose(2, 1)
    return dist.topk(k=k, dim=-1)[1]


def edge_features(x: torch.Tensor, k: int) -> torch.Tensor:
    b, c, n = x.shape
    idx = knn(x, k) + torch.arange(b, device=x.device).view(-1, 1, 1) * n
    pts = x.transpose(2, 1).contiguous()
    nb = pts.view(b * n, -1)[idx.view(-1), :].view(b, n, k, c)
    centre = pts.view(b, n, 1, c).expand(-1, -1, k, -1)
    return torch.cat((nb - centre, centre), dim=3).permute(0, 3, 1, 2).contiguous()


class EdgeConv(nn.Module):
    def __init__(self, cin: int, cout: int, k: int = 10) -> None:
        super().__init__()
        self.k = k
        self.conv = nn.Conv2d(2 * cin, cout, 1, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.leaky_relu(self.bn(self.conv(edge_features(x, self.k))), 0.2)
        return h.max(dim=-1, keepdim=False)[0]


class DGCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.e1, self.e2 = EdgeConv(3, 32), EdgeConv(32, 64)
        self.head = nn.Sequential(nn.Linear(192, 64), nn.BatchNorm1d(64), nn.LeakyReLU(0.2), nn.Linear(64, 8))

    def forward(self, pts: torch.Tensor) -> torch.Tensor:
        h1 = self.e1(pts)
        h2 = self.e2(h1)
        h = torch.cat((h1, h2), dim=1)
        pooled = torch.cat((F.adaptive_max_pool1d(h, 1).flatten(1), F.adaptive_avg_pool1d(h, 1).flatten(1)), 1)
        return self.head(pooled)


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return DGCNN().eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(4, 3, 512, generator=torch.Generator().manual_seed(5)),)
