"""The path-conditioned SQL generator: prompt, model loading (4-bit + LoRA), SFT warm start, GRPO."""

import logging

# bitsandbytes (imported by peft) logs on every import, on CPUs with AVX512-BF16, that an optional
# kernel could not be fetched from the Hugging Face hub and that `pip install kernels` would help;
# it then uses its own kernel. Offline that advice is wrong, so only that one record is dropped.
logging.getLogger("bitsandbytes.backends.cpu.ops").addFilter(lambda record: "kernels-community" not in record.getMessage())
