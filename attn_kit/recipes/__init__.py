"""The recipes' programs: translation (``translation``: WMT14, the bundled corpus, your files, over the
data sources of ``sources``), Table 3 (``table3``) and WSJ parsing (``wsj``) over
one stage library (:mod:`attn_kit.pipeline`), their settings read from
``recipes/configs/*.yaml`` (:mod:`.config`) and the parts both share (:mod:`.common`).
``recipes/*.sh`` run them: ``python -m attn_kit.recipes.translation ...``."""
