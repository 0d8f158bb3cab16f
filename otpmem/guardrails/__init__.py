"""Guardrails: policies checked before every model call; budgets over recorded usage.

::

    agent = Agent.start_link(llm=..., memory={"store": store}, user_id="ann",
                             guardrails=[TokenBudget(50_000, scope="user")])
    agent.run("hi")        # PolicyViolation once ann's recorded tokens pass 50,000

``check_guardrails`` checks; ``admit`` checks and holds each budget's share in the store
until the answer is stored, so concurrent turns of one scope spend what one turn after
another would (see ``_reserve``).
"""

from ._policy import (
    Policy,
    PolicyViolation,
    Request,
    UsageReader,
    check_guardrails,
    check_policies,
    check_store,
)
from ._reserve import Admitted, Budget, Claim, Guardrails, Held, admit
from .budgets import CostBudget, TokenBudget

__all__ = [
    "Admitted",
    "Budget",
    "Claim",
    "CostBudget",
    "Guardrails",
    "Held",
    "Policy",
    "PolicyViolation",
    "Request",
    "TokenBudget",
    "UsageReader",
    "admit",
    "check_guardrails",
    "check_policies",
    "check_store",
]
