"""What a model call used, and what it cost: the usage stored with every assistant message.

``normalize_usage`` turns a provider's usage (OpenAI's ``prompt_tokens`` /
``completion_tokens``, or ``input_tokens`` / ``output_tokens``) into the shape stores sum:
``{"prompt_tokens", "completion_tokens", "total_tokens"}`` of ints, and ``cost`` as a
decimal *string* when known (messages are JSON data: a ``Decimal`` would not survive
msgpack or an export). ``Pricing`` fills in the cost when the provider did not send one::

    pricing = Pricing.per_million({"gpt-4o-mini": ("0.15", "0.60")})
    pricing.cost("gpt-4o-mini", 1000, 200)       # Decimal('0.00027')
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

PriceLike = Decimal | str | int
TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")
ALIASES = {"input_tokens": "prompt_tokens", "output_tokens": "completion_tokens"}


def as_price(value: object, what: str) -> Decimal:
    """A finite, non-negative Decimal from a Decimal, an int or a decimal str."""
    if isinstance(value, bool) or not isinstance(value, Decimal | str | int):
        # A float price is already rounded (0.1 is not 1/10): ask for the exact decimal.
        raise TypeError(f"{what} must be a Decimal, an int or a decimal str, got {value!r}")
    try:
        price = Decimal(value)
    except InvalidOperation:
        raise ValueError(f"{what} is not a decimal number: {value!r}") from None
    if not price.is_finite() or price < 0:
        raise ValueError(f"{what} must be a finite number >= 0, got {value!r}")
    return price


def as_cost(value: object) -> Decimal | None:
    """A usage's ``cost`` as a Decimal, or None when it is missing or not a valid amount."""
    if isinstance(value, bool) or not isinstance(value, Decimal | str | int | float):
        return None
    try:
        cost = Decimal(str(value))
    except InvalidOperation:
        return None
    return cost if cost.is_finite() and cost >= 0 else None


def normalize_usage(usage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The usage in the stored shape, or None when it says nothing usable.

    Token counts are kept only when they are ints >= 0 (a provider's ``None`` counts as
    absent); ``total_tokens`` defaults to prompt + completion (also when it is 0, as
    ``otpmem.stores.usage_of`` reads it); ``cost`` is kept as a
    decimal str when it is a valid amount.
    """
    if not isinstance(usage, Mapping):
        return None
    tokens: dict[str, int] = {}
    for name, value in usage.items():
        field = ALIASES.get(name, name)
        if field in TOKEN_FIELDS and type(value) is int and value >= 0:
            tokens.setdefault(field, value)
    cost = as_cost(usage.get("cost"))
    if not tokens and cost is None:
        return None
    prompt = tokens.get("prompt_tokens", 0)
    completion = tokens.get("completion_tokens", 0)
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        # As the stores sum it: a total of 0 beside real counts means "not reported".
        "total_tokens": tokens.get("total_tokens") or prompt + completion,
    }
    if cost is not None:
        out["cost"] = str(cost)
    return out


class Pricing:
    """Per-token input and output prices by model name (exact ``Decimal`` arithmetic)::

    pricing = Pricing({"gpt-4o": ("0.0000025", "0.00001")})          # per token
    pricing = Pricing.per_million({"gpt-4o": ("2.50", "10.00")})      # the price lists' unit
    Agent.start_link(llm=OpenAIClient("gpt-4o"), pricing=pricing, ...)

    The cost of a call is ``prompt_tokens x input + completion_tokens x output``; it is
    recorded with the message only when the provider sent no ``cost`` of its own.
    """

    def __init__(self, prices: Mapping[str, tuple[PriceLike, PriceLike]]) -> None:
        if not isinstance(prices, Mapping):
            raise TypeError(f"prices must map model names to (input, output), got {prices!r}")
        self._prices: dict[str, tuple[Decimal, Decimal]] = {}
        for model, pair in prices.items():
            if not isinstance(model, str) or not model:
                raise ValueError(f"a model name is a non-empty str, got {model!r}")
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                raise ValueError(f"the price of {model!r} is (input, output) per token")
            self._prices[model] = (
                as_price(pair[0], f"the input price of {model!r}"),
                as_price(pair[1], f"the output price of {model!r}"),
            )

    @classmethod
    def per_million(cls, prices: Mapping[str, tuple[PriceLike, PriceLike]]) -> Pricing:
        """Prices given per million tokens, as providers list them."""
        million = Decimal(1_000_000)
        return cls(
            {
                model: (
                    as_price(pair[0], f"the input price of {model!r}") / million,
                    as_price(pair[1], f"the output price of {model!r}") / million,
                )
                for model, pair in prices.items()
            }
        )

    def __repr__(self) -> str:
        return f"Pricing({sorted(self._prices)})"

    def price_for(self, model: str | None) -> tuple[Decimal, Decimal] | None:
        """(input, output) per token for ``model``, or None if it has no price here."""
        return None if model is None else self._prices.get(model)

    def cost(self, model: str | None, prompt_tokens: int, completion_tokens: int) -> Decimal | None:
        """What the tokens cost with ``model``'s prices, or None if it has none."""
        price = self.price_for(model)
        if price is None:
            return None
        return prompt_tokens * price[0] + completion_tokens * price[1]

    def priced(self, model: str | None, usage: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """The normalized usage, with ``cost`` filled in from the prices when it has none."""
        normal = normalize_usage(usage)
        if normal is None or "cost" in normal:
            return normal
        cost = self.cost(model, normal["prompt_tokens"], normal["completion_tokens"])
        if cost is not None:
            normal["cost"] = str(cost)
        return normal
