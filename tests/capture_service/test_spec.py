import sys

import pytest
import torch

from capture_service.errors import InputsError, InvalidModelSpec
from capture_service.spec import load_model_spec


def test_file_spec_with_a_tensor_input(tiny_spec) -> None:
    loaded = load_model_spec(str(tiny_spec))
    assert isinstance(loaded.model, torch.nn.Module)
    assert len(loaded.args) == 1 and loaded.args[0].shape == (3, 8) and loaded.kwargs == {}


def test_dict_and_tuple_inputs(write_spec) -> None:
    base = "import torch\ndef get_model():\n    return torch.nn.Identity()\ndef get_inputs():\n"
    as_dict = load_model_spec(str(write_spec(base + "    return {'input': torch.ones(2)}\n", "d.py")))
    assert as_dict.args == () and set(as_dict.kwargs) == {"input"}
    as_list = load_model_spec(str(write_spec(base + "    return [torch.ones(2), 3]\n", "l.py")))
    assert as_list.args[1] == 3


def test_factory_spec(write_spec, monkeypatch) -> None:
    path = write_spec(
        "import torch\ndef build():\n    return torch.nn.ReLU(), (torch.ones(2),)\n", "kf_factory_mod.py"
    )
    monkeypatch.syspath_prepend(str(path.parent))
    loaded = load_model_spec("kf_factory_mod:build")
    assert isinstance(loaded.model, torch.nn.ReLU) and loaded.args[0].shape == (2,)
    sys.modules.pop("kf_factory_mod", None)


@pytest.mark.parametrize(
    ("source", "error", "words"),
    [
        ("raise ImportError('no such lib')\n", InvalidModelSpec, "failed to import: ImportError: no such lib"),
        ("import torch\ndef get_inputs():\n    return 1\n", InvalidModelSpec, "no function get_model()"),
        (
            "import torch\ndef get_model():\n    return 3\ndef get_inputs():\n    return 1\n",
            InvalidModelSpec,
            "returned a int, not a torch.nn.Module",
        ),
        (
            "import torch\ndef get_model():\n    return torch.nn.ReLU()\n"
            "def get_inputs():\n    raise ValueError('bad shape')\n",
            InputsError,
            "get_inputs() raised ValueError: bad shape (bad.py:5 in get_inputs)",
        ),
        (
            "import torch\ndef get_model():\n    return torch.nn.ReLU()\ndef get_inputs():\n    return 'x'\n",
            InputsError,
            "returned a str",
        ),
    ],
)
def test_bad_specs_name_the_cause(write_spec, source, error, words) -> None:
    with pytest.raises(error) as info:
        load_model_spec(str(write_spec(source, "bad.py")))
    assert words in str(info.value)


def test_missing_file_and_malformed_spec() -> None:
    with pytest.raises(InvalidModelSpec, match="does not exist"):
        load_model_spec("/nonexistent/model.py")
    with pytest.raises(InvalidModelSpec, match=r"neither a \.py file"):
        load_model_spec("just-a-word")
    with pytest.raises(InvalidModelSpec, match="failed to import"):
        load_model_spec("no_such_package_kf:factory")


def test_a_syntax_error_names_its_own_file_and_line(write_spec) -> None:
    with pytest.raises(InvalidModelSpec) as info:
        load_model_spec(str(write_spec("import torch\ndef get_model(:\n    return None\n", "broken.py")))
    message = str(info.value)
    assert "failed to import: SyntaxError: " in message and message.endswith("(broken.py:2)")
    assert "frozen" not in message


def test_an_error_raised_inside_torch_names_the_users_line(write_spec) -> None:
    source = (
        "import torch\ndef get_model():\n    return torch.nn.ReLU()\n"
        "def get_inputs():\n    layer = torch.nn.Linear(4, 4)\n    return layer(torch.ones(2, 3))\n"
    )
    with pytest.raises(InputsError) as info:
        load_model_spec(str(write_spec(source, "inside.py")))
    assert str(info.value).endswith("(inside.py:6 in get_inputs)")
