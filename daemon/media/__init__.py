"""Media in prompts, pure (no I/O but the bytes given): ``images`` reads an image's real
format and size from its bytes and scales it down to what every vision provider takes;
``limits`` holds the numbers (PROTOCOL.md "Prompt content"); ``budget`` decides which
images of a history a request can carry and words the one-line note for the others.
"""
