"""Guardrails: policies checked before every model call; budgets over recorded usage.

::

    agent = Agent.start_link(llm=..., memory={"store": store}, user_id="ann",
                             guardrails=[TokenBudget(50_000, scope="user")])
    agent.run("hi")        # PolicyViolation once ann's recorded tokens pass 50,000
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
from .budgets import CostBudget, TokenBudget

__all__ = [
    "CostBudget",
    "Policy",
    "PolicyViolation",
    "Request",
    "TokenBudget",
    "UsageReader",
    "check_guardrails",
    "check_policies",
    "check_store",
]
