"""One meaning of ``Usage`` for every provider (PROTOCOL.md, "Context, cost and compaction").

``input_tokens`` counts every input token the model read, cached ones included;
``output_tokens`` every token it generated, reasoning included; ``reasoning_tokens``,
``cache_read_tokens`` and ``cache_write_tokens`` are parts of those. A field the provider
does not report is None.

Providers count differently: Anthropic's ``input_tokens`` leaves out cache reads and
writes, Gemini's ``candidatesTokenCount`` and some Chat Completions servers'
``completion_tokens`` (Copilot's Gemini models) leave out reasoning. Adapters read the
wire fields and say which way their provider counts; the arithmetic lives here only.
"""

from typing import Any

from protocol.objects import Usage

# No call reads or writes this many tokens: a larger number is garbage (and would not fit the store's integers).
MAX_COUNT = 2**40


def count(value: Any) -> int | None:
    """A token count from the wire: a non-negative int below ``MAX_COUNT``, else None (absent, null,
    a string, a float, a negative or absurd number)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_COUNT
    return value if ok else None


def normalized_usage(
    *,
    input_tokens: Any,
    output_tokens: Any,
    reasoning_tokens: Any = None,
    cache_read_tokens: Any = None,
    cache_write_tokens: Any = None,
    input_excludes_cache: bool = False,
    output_excludes_reasoning: bool = False,
) -> Usage:
    """``Usage`` in the shared meaning, from a provider's raw counts.

    ``input_excludes_cache``: the provider's input count leaves out cache reads and writes
    (they are added). ``output_excludes_reasoning``: its output count leaves out reasoning
    (it is added). Raw values that are not counts are treated as not reported.
    """
    read, write, reasoning = count(cache_read_tokens), count(cache_write_tokens), count(reasoning_tokens)
    total_in, total_out = count(input_tokens), count(output_tokens)
    if input_excludes_cache and total_in is not None:
        total_in += (read or 0) + (write or 0)
    if output_excludes_reasoning and total_out is not None:
        total_out += reasoning or 0
    return Usage(
        input_tokens=total_in,
        output_tokens=total_out,
        reasoning_tokens=reasoning,
        cache_read_tokens=read,
        cache_write_tokens=write,
    )


def reasoning_outside_output(total: Any, input_tokens: Any, output_tokens: Any, reasoning_tokens: Any) -> bool:
    """Whether a server's output count left reasoning out, judged by its own total: true when
    ``total == input + output + reasoning`` (with some reasoning), as Copilot reports its
    Gemini models; OpenAI, DeepSeek and the others report ``total == input + output``."""
    total_n, in_n, out_n, reasoning_n = (count(v) for v in (total, input_tokens, output_tokens, reasoning_tokens))
    if total_n is None or in_n is None or out_n is None or reasoning_n is None:
        return False
    return bool(reasoning_n) and total_n == in_n + out_n + reasoning_n
