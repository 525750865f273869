import torch

from capture_service.layout import clone_exact, spanned_elements, tensor_spec


def test_clone_keeps_strides_offset_and_values_of_a_view() -> None:
    base = torch.arange(60.0).reshape(6, 10)
    view = base[1:, 2:7].t()
    copy = clone_exact(view)
    assert copy.stride() == view.stride() and copy.storage_offset() == view.storage_offset()
    assert torch.equal(copy, view)
    copy.zero_()
    assert base.sum() == torch.arange(60.0).sum()


def test_clone_keeps_overlapping_broadcast_layouts() -> None:
    expanded = torch.randn(3, 1).expand(3, 5)
    copy = clone_exact(expanded)
    assert copy.stride() == (1, 0) and torch.equal(copy, expanded)


def test_span_and_spec_of_empty_and_offset_tensors() -> None:
    assert spanned_elements((0, 4), (4, 1)) == 0
    assert spanned_elements((2, 3), (1, 2)) == 6
    spec = tensor_spec(torch.randn(65)[1:])
    assert spec.storage_offset == 1 and not spec.aligned16
    assert clone_exact(torch.empty(0, 3)).shape == (0, 3)
