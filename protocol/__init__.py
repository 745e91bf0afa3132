"""The ponder wire contract: msgspec types for every message on the wire, and nothing else.

No I/O lives here and nothing here imports from ``daemon``; ``schemas/`` is generated
from these types by ``scripts/gen_schemas.py``.
"""

PROTOCOL_VERSION = 1
APPROVAL_POLICIES = ("ask", "auto", "read_only")  # ``objects.ApprovalPolicy``, for code that must not load msgspec
