"""The cache-reuse bench's endpoint answers each prompt with a new template kernel for the card it names."""

import json
import urllib.request

import pytest

from bench.cache_reuse import MODEL, TemplateEndpoint
from capture_service.capture import capture_model
from kforge_domain.card import CardSet


@pytest.fixture(scope="module")
def cards(tmp_path_factory: pytest.TempPathFactory) -> CardSet:
    out = tmp_path_factory.mktemp("capture")
    capture_model(str(MODEL), out_dir=out)
    return CardSet.load(out)


def _ask(endpoint: TemplateEndpoint, prompt: str) -> str:
    body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]}).encode()
    request = urllib.request.Request(f"{endpoint.api_base}/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["choices"][0]["message"]["content"]


def test_each_answer_is_a_kernel_the_card_has_not_had_yet(cards: CardSet) -> None:
    card = next(c for c in cards.cards if c.op == "aten::softmax.int")
    endpoint = TemplateEndpoint(cards, answer_delay_s=0.0)
    try:
        first = _ask(endpoint, f"Card id `{card.id}`; eager PyTorch takes 3 µs")
        second = _ask(endpoint, f"Card id `{card.id}`; eager PyTorch takes 3 µs")
        nameless = _ask(endpoint, "write me a kernel")
    finally:
        endpoint.close()
    for answer in (first, second):
        assert answer.startswith("DESCRIPTION: softmax") and "kf_launch" in answer and "```cpp" in answer
    assert first != second
    assert nameless == "The prompt names no card." and endpoint.requests == 3
