"""The recipes' programs: WMT14 translation (``wmt14``) and WSJ parsing (``wsj``) over
one stage library (:mod:`attn_kit.pipeline`), their settings read from
``recipes/configs/*.yaml`` (:mod:`.config`) and the parts both share (:mod:`.common`).
``recipes/*.sh`` run them: ``python -m attn_kit.recipes.wmt14 ...``."""
