"""The numbers of PROTOCOL.md "Prompt content", in one place.

2000 px and 3.75 MB are what Anthropic (the strictest vision API ponder speaks) takes in a
request of many images; the other providers take at least that. 20 images and 20 MB per
request keep a long session under every provider's request cap (Gemini's inline 20 MB).
"""

MAX_IMAGE_EDGE_PX = 2000
MAX_IMAGE_BYTES = 3_750_000
MAX_IMAGES_PER_PROMPT = 20
# What one request carries at most (counted as base64, as it goes on the wire); older images
# are sent as a one-line note.
MAX_IMAGES_PER_REQUEST = 20
MAX_IMAGE_BYTES_PER_REQUEST = 20_000_000
# What admission reads at all before it refuses: the raw bytes of one image (a screenshot of
# a 8K display is ~30 MB as PNG) and its decoded pixels (Pillow's decompression-bomb limit).
MAX_INPUT_IMAGE_BYTES = 48 * 1024 * 1024
MAX_IMAGE_PIXELS = 50_000_000
# Text of a linked or embedded file kept in the message; the rest is cut (``truncated``).
MAX_RESOURCE_TEXT_BYTES = 256 * 1024
# The formats every vision provider takes.
IMAGE_MIME_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
